"""A submitted task as its caller tracks it, and resolution of its arguments."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tracedray import telemetry
from tracedray._proto.v1 import common_pb2
from tracedray.core.address import Address
from tracedray.core.serialization import serialize_error
from tracedray.core.worker.retry_policy import RetryExceptions

if TYPE_CHECKING:
    from tracedray.core.worker.core_worker import CoreWorker
    from tracedray.core.worker.memory_store import MemoryStore


@dataclass
class PendingTask:
    spec: common_pb2.TaskSpec
    return_ids: list[bytes]
    # Refs this task keeps alive until it finishes (top-level and nested arguments).
    dep_ids: list[bytes]
    # (arg index, object id, owner) of top-level ref arguments still to resolve.
    unresolved: list[tuple[int, bytes, Address | None]]
    retries_left: int
    # Which application exceptions may run the call again (the caller decides).
    retry_exceptions: RetryExceptions = RetryExceptions()
    scheduling_key: str = ""
    # The resource part of the scheduling key, when the submission plan worked it out
    # ("": the submitter works it out from the spec).
    resource_shape: str = ""
    dispatch_span: Any = None
    # The task.submit span (a telemetry.PendingSpan) or its SpanContext: the dispatch
    # span's parent without parsing the spec's trace fields back (None when telemetry
    # is off, or for a rebuilt task).
    trace_parent: Any = None
    cancelled: bool = False
    force_cancelled: bool = False
    lease: Any = None
    # The caller asked the worker to hand this pipelined task back (work stealing).
    steal_requested: bool = False
    # (node id -> input bytes) for locality-aware placement
    input_bytes_by_node: dict[str, int] = field(default_factory=dict)

    @property
    def task_id(self) -> bytes:
        return self.spec.task_id


def stored_error(worker: CoreWorker, value: common_pb2.ObjectValue) -> BaseException | None:
    """The exception an error value holds, as the caller's get() would raise it."""
    return loaded_error(worker.objects.load, value)


def loaded_error(load: Callable[[common_pb2.ObjectValue], Any],
                 value: common_pb2.ObjectValue) -> BaseException | None:
    """The exception ``load`` raises for an error value (None: it is not one)."""
    try:
        load(value)
    except BaseException as exc:  # noqa: BLE001 - it is the value we want
        return exc
    return None


def end_dispatch_spans(tasks: Iterable[PendingTask]) -> None:
    """End, as one record, the dispatch spans of tasks whose results came in together
    and succeeded (a batch of results: one ``marshal`` and one append, not one each)."""
    spans = []
    for task in tasks:
        if task.dispatch_span is not None:
            spans.append(task.dispatch_span)
            task.dispatch_span = None
    if spans:
        telemetry.finish_spans(spans)


def error_value(object_id: bytes, exc: BaseException) -> common_pb2.ObjectValue:
    serialized = serialize_error(exc)
    value = common_pb2.ObjectValue(object_id=object_id, size=serialized.size)
    value.inline_value.inband = serialized.inband
    value.inline_value.buffers.extend(bytes(b) for b in serialized.buffers)
    value.inline_value.is_error = True
    return value


class DependencyResolver:
    """Waits for a task's top-level ref arguments and fills their values into the spec.

    Owned refs resolve through the memory store's callbacks (no thread); borrowed
    refs are fetched from their owner on a pool thread. An upstream error resolves
    the task to that error (``on_failed``), as Ray propagates failures along a DAG.
    """

    def __init__(self, worker_id: str, memory_store: MemoryStore, *,
                 fetch_from_owner: Callable[[bytes, Address, float | None],
                                            common_pb2.ObjectValue],
                 background: Callable[..., bool]) -> None:
        self._worker_id = worker_id  # refs owned by it resolve from the memory store
        self._memory_store = memory_store
        self._fetch_from_owner = fetch_from_owner
        self._background = background
        self._lock = threading.Lock()

    def resolve(self, task: PendingTask, on_ready: Callable[[PendingTask], None],
                on_failed: Callable[[PendingTask, common_pb2.ObjectValue], None]) -> None:
        if not task.unresolved:
            on_ready(task)
            return
        remaining = [len(task.unresolved)]
        failed = [False]

        def arrived(index: int, value: common_pb2.ObjectValue) -> None:
            with self._lock:
                if failed[0]:
                    return
                if value.HasField("inline_value") and value.inline_value.is_error:
                    failed[0] = True
                    error = value
                else:
                    task.spec.args[index].value.CopyFrom(value)
                    if value.store_node_id:
                        nodes = task.input_bytes_by_node
                        nodes[value.store_node_id] = nodes.get(value.store_node_id, 0) + value.size
                    remaining[0] -= 1
                    if remaining[0]:
                        return
                    error = None
            if error is not None:
                on_failed(task, error)
            else:
                on_ready(task)

        def deliver_to(index: int) -> Callable[[common_pb2.ObjectValue], None]:
            return lambda value: arrived(index, value)

        for index, object_id, owner in task.unresolved:
            deliver = deliver_to(index)
            if owner is None or owner.worker_id == self._worker_id:
                self._memory_store.on_ready(object_id, _ignoring_id(deliver))
            else:
                self._background(self._fetch_borrowed, object_id, owner, deliver)

    def _fetch_borrowed(self, object_id: bytes, owner: Address,
                        deliver: Callable[[common_pb2.ObjectValue], None]) -> None:
        deliver(self._fetch_from_owner(object_id, owner, None))


def _ignoring_id(deliver: Callable[[common_pb2.ObjectValue], None]
                 ) -> Callable[[bytes, common_pb2.ObjectValue], None]:
    return lambda _object_id, value: deliver(value)
