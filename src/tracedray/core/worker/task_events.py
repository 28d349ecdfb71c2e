"""Task state transitions, buffered and sent to the GCS task table in batches."""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING

from tracedray import logs
from tracedray.exceptions import RaySystemError
from tracedray.v1 import common_pb2, gcs_pb2

if TYPE_CHECKING:
    from tracedray.core.gcs.client import GcsClient

log = logs.get_logger(__name__)
_KINDS = {common_pb2.NORMAL: "NORMAL_TASK", common_pb2.ACTOR_CREATION: "ACTOR_CREATION_TASK",
          common_pb2.ACTOR_METHOD: "ACTOR_TASK"}
MAX_BUFFERED = 100_000


class TaskEventBuffer:
    def __init__(self, gcs: GcsClient) -> None:
        self._gcs = gcs
        self._events: list[gcs_pb2.TaskEvent] = []
        self._lock = threading.Lock()
        self.dropped = 0
        self.sent = 0

    def record(self, spec: common_pb2.TaskSpec, state: str, *, node_id: str = "",
               worker_id: str = "", worker_pid: int = 0, error_type: str = "",
               error_message: str = "") -> None:
        event = gcs_pb2.TaskEvent(
            task_id=spec.task_id, attempt=spec.attempt, state=state, time=time.time(),
            function_name=spec.function_name, job_id=spec.job_id, node_id=node_id,
            worker_id=worker_id, worker_pid=worker_pid, error_type=error_type,
            error_message=error_message, actor_id=spec.actor_id,
            kind=_KINDS.get(spec.kind, "NORMAL_TASK"))
        if state == "PENDING_ARGS_AVAIL":
            event.call_site = spec.call_site
            event.parent_task_id = spec.parent_task_id
            event.trace_id = spec.trace_context.get("traceparent", "")[3:35]
            event.resources.update(spec.resources)
        with self._lock:
            if len(self._events) >= MAX_BUFFERED:
                self.dropped += 1  # GCS unreachable for long: keep memory bounded
                return
            self._events.append(event)

    def flush(self) -> None:
        with self._lock:
            events, self._events = self._events, []
        if not events:
            return
        try:
            self._gcs.add_task_events(events)
            self.sent += len(events)
        except RaySystemError as exc:
            log.warning("task_events.flush_failed", events=len(events), error=str(exc))
            with self._lock:
                self._events[:0] = events[: MAX_BUFFERED - len(self._events)]
