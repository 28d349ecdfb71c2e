"""Values this process knows: owned task results and puts, and fetched copies.

Holds ``ObjectValue`` protos (inline bytes or a store location), never Python
objects, so a value is deserialized on each ``get`` (a fresh copy for mutable
inline values, as in Ray) and shared-memory values stay zero-copy.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from tracedray.v1 import common_pb2

ReadyCallback = Callable[[bytes, common_pb2.ObjectValue], None]


@dataclass(frozen=True)
class MemoryStoreStatistics:
    objects: int
    inline_bytes: int
    waiting_callbacks: int


class MemoryStore:
    def __init__(self) -> None:
        self._values: dict[bytes, common_pb2.ObjectValue] = {}
        self._callbacks: dict[bytes, list[ReadyCallback]] = {}
        self._cond = threading.Condition()

    def put(self, object_id: bytes, value: common_pb2.ObjectValue) -> None:
        with self._cond:
            self._values[object_id] = value
            callbacks = self._callbacks.pop(object_id, ())
            self._cond.notify_all()
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
             timeout_s: float | None) -> set[bytes]:
        """Wait until at least ``num_ready`` of ``object_ids`` are present; return those present."""
        ids = list(object_ids)
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        with self._cond:
            while True:
                ready = {oid for oid in ids if oid in self._values}
                if len(ready) >= num_ready:
                    return ready
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return ready
                self._cond.wait(remaining if remaining is None else min(remaining, 1.0))

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
