"""Values this process knows: owned task results and puts, and fetched copies.

Holds ``ObjectValue`` protos (inline bytes or a store location), never Python
objects, so a value is deserialized on each ``get`` (a fresh copy for mutable
inline values, as in Ray) and shared-memory values stay zero-copy.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from tracedray._proto.v1 import common_pb2

ReadyCallback = Callable[[bytes, common_pb2.ObjectValue], None]


@dataclass(eq=False)  # identity: two waiters on the same ids are different waiters
class _Waiter:
    """One blocked ``wait``: the ids it still misses and how many more it needs."""

    missing: set[bytes]
    still_needed: int
    stop_on_error: bool = False  # a get(): an error among the values ends the wait
    done: threading.Event = field(default_factory=threading.Event)


def is_error(value: common_pb2.ObjectValue | None) -> bool:
    """Whether the value is an exception to raise on get (errors are always inline)."""
    return value is not None and value.HasField("inline_value") and value.inline_value.is_error


@dataclass(frozen=True)
class MemoryStoreStatistics:
    objects: int
    inline_bytes: int
    waiting_callbacks: int


class MemoryStore:
    def __init__(self) -> None:
        self._values: dict[bytes, common_pb2.ObjectValue] = {}
        self._callbacks: dict[bytes, list[ReadyCallback]] = {}
        # id -> waiters missing it: a put touches only those (a get of 5,000 refs would
        # otherwise rescan all of them on every arrival).
        self._waiters: dict[bytes, list[_Waiter]] = {}
        self._cond = threading.Condition()

    def put(self, object_id: bytes, value: common_pb2.ObjectValue) -> None:
        self.put_many([(object_id, value)])

    def put_many(self, values: list[tuple[bytes, common_pb2.ObjectValue]]) -> None:
        """Store values under one lock: a batch of task results costs one acquisition,
        not one each; the callbacks run after, outside it."""
        ready: list[tuple[bytes, common_pb2.ObjectValue, list[ReadyCallback]]] = []
        with self._cond:
            for object_id, value in values:
                self._values[object_id] = value
                callbacks = self._callbacks.pop(object_id, None)
                if callbacks:
                    ready.append((object_id, value, callbacks))
                waiters = self._waiters.pop(object_id, None)
                if waiters:
                    _arrived(object_id, value, waiters)
        for object_id, value, callbacks in ready:
            for callback in callbacks:
                callback(object_id, value)

    def get_if_ready(self, object_id: bytes) -> common_pb2.ObjectValue | None:
        return self._values.get(object_id)

    def contains(self, object_id: bytes) -> bool:
        return object_id in self._values

    def on_ready(self, object_id: bytes, callback: ReadyCallback) -> None:
        """Call ``callback`` once the value is present (now, if it already is)."""
        with self._cond:
            value = self._values.get(object_id)
            if value is None:
                self._callbacks.setdefault(object_id, []).append(callback)
                return
        callback(object_id, value)

    def wait(self, object_ids: Iterable[bytes], num_ready: int,
             timeout_s: float | None, *, stop_on_error: bool = False) -> set[bytes]:
        """Wait until at least ``num_ready`` of ``object_ids`` are present (or, with
        ``stop_on_error``, one present value is an error); return those present."""
        ids = set(object_ids)
        with self._cond:
            missing = {oid for oid in ids if oid not in self._values}
            waiter = _Waiter(missing, num_ready - (len(ids) - len(missing)), stop_on_error)
            if waiter.still_needed <= 0 or (stop_on_error and any(
                    is_error(self._values[oid]) for oid in ids - missing)):
                return ids - missing
            for oid in missing:
                self._waiters.setdefault(oid, []).append(waiter)
        waiter.done.wait(timeout_s)
        with self._cond:
            for oid in waiter.missing:
                waiting = self._waiters.get(oid)
                if waiting is not None and waiter in waiting:
                    waiting.remove(waiter)
                    if not waiting:
                        del self._waiters[oid]
            return {oid for oid in ids if oid in self._values}

    def delete(self, object_ids: Iterable[bytes]) -> None:
        with self._cond:
            for oid in object_ids:
                self._values.pop(oid, None)
                self._callbacks.pop(oid, None)

    def statistics(self) -> MemoryStoreStatistics:
        with self._cond:
            inline = sum(v.size for v in self._values.values() if v.HasField("inline_value"))
            return MemoryStoreStatistics(len(self._values), inline,
                                         sum(len(c) for c in self._callbacks.values()))

    def __repr__(self) -> str:
        s = self.statistics()
        return f"<MemoryStore objects={s.objects} inline_bytes={s.inline_bytes}>"


def _arrived(object_id: bytes, value: common_pb2.ObjectValue, waiters: list[_Waiter]) -> None:
    """(Lock held) ``object_id`` arrived: wake the waiters it completes."""
    for waiter in waiters:
        if object_id in waiter.missing:
            waiter.missing.discard(object_id)
            waiter.still_needed -= 1
            if waiter.still_needed <= 0 or (waiter.stop_on_error and is_error(value)):
                waiter.done.set()
