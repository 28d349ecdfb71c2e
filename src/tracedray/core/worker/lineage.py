"""Lineage: how to make an owned object again after the node holding it died.

The owner keeps the spec of each normal task whose results went to a node's
shared-memory store (inline results travel with the owner and cannot be lost).
An entry lives as long as one of those results is referenced; the reference
table's release drops it. Objects made by ``put`` have no lineage: when their
node dies they are lost, and ``get`` says so.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from tracedray._proto.v1 import common_pb2


@dataclass
class _Entry:
    spec: common_pb2.TaskSpec
    return_ids: tuple[bytes, ...]
    live: set[bytes] = field(default_factory=set)  # results still referenced
    rebuilds: int = 0


@dataclass(frozen=True)
class LineageStatistics:
    tasks: int
    objects: int
    rebuilds_total: int


class Lineage:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._tasks: dict[bytes, _Entry] = {}
        self._by_object: dict[bytes, bytes] = {}  # object id -> task id
        self._nodes: dict[bytes, str] = {}  # object id -> node whose store holds it
        self._rebuilds = 0

    def record(self, spec: common_pb2.TaskSpec, return_ids: list[bytes],
               values: list[common_pb2.ObjectValue]) -> None:
        """A normal task finished: remember it if any result is in a node's store."""
        stored = {v.object_id: v.store_node_id for v in values if v.store_node_id}
        if not stored or spec.kind != common_pb2.NORMAL:
            return
        with self._lock:
            entry = self._tasks.get(spec.task_id)
            if entry is None:
                copy = common_pb2.TaskSpec()
                copy.CopyFrom(spec)
                entry = self._tasks[spec.task_id] = _Entry(copy, tuple(return_ids))
            entry.live.update(stored)
            for object_id, node_id in stored.items():
                self._by_object[object_id] = spec.task_id
                self._nodes[object_id] = node_id

    def forget(self, object_ids: list[bytes]) -> None:
        """These objects were released: their task is kept while another result lives."""
        with self._lock:
            for object_id in object_ids:
                task_id = self._by_object.pop(object_id, None)
                self._nodes.pop(object_id, None)
                entry = self._tasks.get(task_id) if task_id is not None else None
                if entry is None:
                    continue
                entry.live.discard(object_id)
                if not entry.live:
                    del self._tasks[task_id]  # type: ignore[arg-type]

    def objects_on(self, node_id: str) -> list[bytes]:
        with self._lock:
            return [oid for oid, node in self._nodes.items() if node == node_id]

    def nodes(self) -> set[str]:
        with self._lock:
            return set(self._nodes.values())

    def take_for_rebuild(self, object_id: bytes, max_rebuilds: int
                         ) -> tuple[common_pb2.TaskSpec, tuple[bytes, ...]] | None:
        """The spec to run again for ``object_id`` (a copy, next attempt number), or None
        when it has no lineage or was rebuilt ``max_rebuilds`` times already. Its
        results leave the table until the rerun finishes and records them again."""
        with self._lock:
            task_id = self._by_object.get(object_id)
            entry = self._tasks.get(task_id) if task_id is not None else None
            if entry is None or entry.rebuilds >= max_rebuilds:
                return None
            entry.rebuilds += 1
            self._rebuilds += 1
            for oid in entry.return_ids:
                self._nodes.pop(oid, None)
            spec = common_pb2.TaskSpec()
            spec.CopyFrom(entry.spec)
            spec.attempt = entry.spec.attempt + entry.rebuilds
            return spec, entry.return_ids

    def has(self, object_id: bytes) -> bool:
        with self._lock:
            return object_id in self._by_object

    def statistics(self) -> LineageStatistics:
        with self._lock:
            return LineageStatistics(len(self._tasks), len(self._by_object), self._rebuilds)

    def __repr__(self) -> str:
        s = self.statistics()
        return f"<Lineage tasks={s.tasks} objects={s.objects} rebuilds={s.rebuilds_total}>"
