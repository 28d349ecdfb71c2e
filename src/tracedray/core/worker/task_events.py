"""Task state transitions, buffered and sent to the GCS task table in batches.

Recording is on the hot path (several transitions per task), so ``record`` only
appends a tuple; protos are built, and the transitions of one task attempt
coalesced into a single event, on the flusher thread.
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, NamedTuple

from tracedray import logs
from tracedray.exceptions import RaySystemError
from tracedray.v1 import common_pb2, gcs_pb2

if TYPE_CHECKING:
    from tracedray.core.gcs.client import GcsClient

log = logs.get_logger(__name__)
_KINDS = {common_pb2.NORMAL: "NORMAL_TASK", common_pb2.ACTOR_CREATION: "ACTOR_CREATION_TASK",
          common_pb2.ACTOR_METHOD: "ACTOR_TASK"}
MAX_BUFFERED = 100_000
FIRST_STATE = "PENDING_ARGS_AVAIL"


class _Transition(NamedTuple):
    spec: common_pb2.TaskSpec
    attempt: int
    state: str
    time: float
    node_id: str
    worker_id: str
    worker_pid: int
    error_type: str
    error_message: str


class TaskEventBuffer:
    def __init__(self, gcs: GcsClient) -> None:
        self._gcs = gcs
        self._pending: list[_Transition] = []
        self._unsent: list[gcs_pb2.TaskEvent] = []
        self._lock = threading.Lock()
        self.dropped = 0
        self.sent = 0

    def record(self, spec: common_pb2.TaskSpec, state: str, *, node_id: str = "",
               worker_id: str = "", worker_pid: int = 0, error_type: str = "",
               error_message: str = "") -> None:
        transition = _Transition(spec, spec.attempt, state, time.time(), node_id, worker_id,
                                 worker_pid, error_type, error_message)
        with self._lock:
            if len(self._pending) >= MAX_BUFFERED:
                self.dropped += 1  # GCS unreachable for long: keep memory bounded
                return
            self._pending.append(transition)

    def flush(self) -> None:
        with self._lock:
            pending, self._pending = self._pending, []
            unsent, self._unsent = self._unsent, []
        events = unsent + coalesce(pending)
        if not events:
            return
        try:
            self._gcs.add_task_events(events)
            self.sent += len(events)
        except RaySystemError as exc:
            log.warning("task_events.flush_failed", events=len(events), error=str(exc))
            with self._lock:
                self._unsent = events[:MAX_BUFFERED]


_DETAILS = ("node_id", "worker_id", "worker_pid", "error_type", "error_message")


def coalesce(transitions: list[_Transition]) -> list[gcs_pb2.TaskEvent]:
    """One event per (task, attempt): the last state, plus every state's time (pure).

    Fields are gathered in plain dicts and each message is built once with keyword
    arguments: setting protobuf fields one by one cost ~3x as much (this runs in the
    driver, which submits the tasks, for every task).
    """
    gathered: dict[tuple[bytes, int], tuple[dict[str, object], dict[str, float]]] = {}
    for t in transitions:
        spec = t.spec
        key = (spec.task_id, t.attempt)
        entry = gathered.get(key)
        if entry is None:
            entry = gathered[key] = ({"task_id": spec.task_id, "attempt": t.attempt,
                                      "function_name": spec.function_name,
                                      "job_id": spec.job_id, "actor_id": spec.actor_id,
                                      "kind": _KINDS.get(spec.kind, "NORMAL_TASK")}, {})
        fields, state_times = entry
        fields["state"] = t.state
        fields["time"] = t.time
        state_times[t.state] = t.time
        if t.state == FIRST_STATE:
            fields["call_site"] = spec.call_site
            fields["parent_task_id"] = spec.parent_task_id
            fields["trace_id"] = spec.trace_context.get("traceparent", "")[3:35]
            fields["resources"] = dict(spec.resources)
        for name in _DETAILS:
            value = getattr(t, name)
            if value:
                fields[name] = value
    return [gcs_pb2.TaskEvent(state_times=state_times, **fields)  # type: ignore[arg-type]
            for fields, state_times in gathered.values()]
