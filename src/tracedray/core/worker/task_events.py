"""Task state transitions, buffered and sent to the GCS task table in batches.

Recording is on the hot path (several transitions per task), so ``record`` only
appends a tuple; protos are built, and the transitions of one task attempt
coalesced into a single event, on the flusher thread.

An actor call's RUNNING is *deferred* by the worker running it (``defer_running``): the
next flush records it if the call still runs then, otherwise the worker hands the
call's start and end to its caller in the result (``TaskResult.started_at/ended_at``),
which records RUNNING and FINISHED with its own events of the call: one event per call
at the GCS instead of one from each side, and the worker sends none for a short call.
The periodic flush keeps a call's first state back a while (``HOLD_CALL_S``) for its end
to join it.
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, NamedTuple

from tracedray import logs
from tracedray._proto.v1 import common_pb2, gcs_pb2
from tracedray.core import trace_context
from tracedray.exceptions import RaySystemError

if TYPE_CHECKING:
    from tracedray.core.gcs.client import GcsClient

log = logs.get_logger(__name__)
_KINDS = {common_pb2.NORMAL: "NORMAL_TASK", common_pb2.ACTOR_CREATION: "ACTOR_CREATION_TASK",
          common_pb2.ACTOR_METHOD: "ACTOR_TASK"}
MAX_BUFFERED = 100_000
# Events per AddTaskEvents call: a burst's backlog goes as several calls, so the GCS
# parses and merges a bounded batch at a time (its memory under a burst: issue 23).
SEND_BATCH = 2_000
FIRST_STATE = "PENDING_ARGS_AVAIL"
# A periodic flush keeps back an actor call's first state this long while nothing else
# of the call came: its end usually comes within it (with the RUNNING its actor left to
# us), and the call is then one event at the GCS, not two.
HOLD_CALL_S = 0.5


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
        # Actor calls running here whose RUNNING no flush has recorded yet, by task id.
        self._deferred: dict[bytes, _Transition] = {}
        self._unsent: list[gcs_pb2.TaskEvent] = []
        self._lock = threading.Lock()
        self.dropped = 0
        self.sent = 0

    def record(self, spec: common_pb2.TaskSpec, state: str, *, node_id: str = "",
               worker_id: str = "", worker_pid: int = 0, error_type: str = "",
               error_message: str = "", at: float = 0.0) -> None:
        """``at``: when the task reached ``state``, if not now (a time another process
        reported)."""
        transition = _Transition(spec, spec.attempt, state, at or time.time(), node_id,
                                 worker_id, worker_pid, error_type, error_message)
        with self._lock:
            if len(self._pending) >= MAX_BUFFERED:
                self.dropped += 1  # GCS unreachable for long: keep memory bounded
                return
            self._pending.append(transition)

    def record_ran(self, spec: common_pb2.TaskSpec, started: float, ended: float, *,
                   node_id: str, worker_id: str, worker_pid: int) -> None:
        """RUNNING at ``started`` and FINISHED at ``ended``, where another process ran the
        task (an actor call whose actor left them to its caller): one hold of the lock."""
        attempt = spec.attempt
        running = _Transition(spec, attempt, "RUNNING", started, node_id, worker_id,
                              worker_pid, "", "")
        finished = _Transition(spec, attempt, "FINISHED", ended, node_id, worker_id,
                               worker_pid, "", "")
        with self._lock:
            if len(self._pending) + 2 > MAX_BUFFERED:
                self.dropped += 2  # GCS unreachable for long: keep memory bounded
                return
            self._pending += (running, finished)

    def defer_running(self, spec: common_pb2.TaskSpec, at: float, *, node_id: str,
                      worker_id: str, worker_pid: int) -> None:
        """An actor call started at ``at``: its RUNNING is recorded by the next flush if
        it is still running then; ``end_deferred`` says whether that happened."""
        transition = _Transition(spec, spec.attempt, "RUNNING", at, node_id, worker_id,
                                 worker_pid, "", "")
        with self._lock:
            self._deferred[spec.task_id] = transition

    def end_deferred(self, task_id: bytes) -> bool:
        """The call ended: True if no flush recorded its RUNNING (whoever reports its end
        reports its RUNNING too), False if one did."""
        with self._lock:
            return self._deferred.pop(task_id, None) is not None

    def add(self, event: gcs_pb2.TaskEvent) -> None:
        """An event built elsewhere (a slow attempt's mark), sent with the next flush."""
        with self._lock:
            if len(self._unsent) < MAX_BUFFERED:
                self._unsent.append(event)

    def flush(self, *, hold_young_calls: bool = False) -> None:
        """Send what was recorded; ``hold_young_calls`` (the periodic flush) keeps back
        the first state of actor calls that just started (``held_back``)."""
        with self._lock:
            pending, self._pending = self._pending, []
            if self._deferred:  # calls running now: RUNNING is theirs to show
                pending.extend(self._deferred.values())
                self._deferred.clear()
            unsent, self._unsent = self._unsent, []
        if hold_young_calls and pending:
            pending, held = held_back(pending, time.time())
            if held:
                with self._lock:  # ahead of what came meanwhile: a call's states in order
                    self._pending[:0] = held
        events = unsent + coalesce(pending)
        for start in range(0, len(events), SEND_BATCH):
            try:
                self._gcs.add_task_events(events[start:start + SEND_BATCH])
            except RaySystemError as exc:
                log.warning("task_events.flush_failed", events=len(events) - start,
                            error=str(exc))
                with self._lock:  # ahead of any added meanwhile, which stay too
                    self._unsent = (events[start:] + self._unsent)[:MAX_BUFFERED]
                return
            self.sent += min(SEND_BATCH, len(events) - start)


def held_back(transitions: list[_Transition], now: float
              ) -> tuple[list[_Transition], list[_Transition]]:
    """(to send, to keep) (pure): an actor call's first state is kept while younger than
    ``HOLD_CALL_S`` and alone (no other state of the call is here)."""
    young = now - HOLD_CALL_S
    # The driver flushes every task's states through here: without a young call among
    # them (normal tasks), a look at each one's state and time is all it costs.
    if not any(t.state == FIRST_STATE and t.time > young
               and t.spec.kind == common_pb2.ACTOR_METHOD for t in transitions):
        return transitions, []
    moved_on = {t.spec.task_id for t in transitions if t.state != FIRST_STATE}
    send: list[_Transition] = []
    keep: list[_Transition] = []
    for t in transitions:
        spec = t.spec
        if (t.state == FIRST_STATE and t.time > young
                and spec.kind == common_pb2.ACTOR_METHOD and spec.task_id not in moved_on):
            keep.append(t)
        else:
            send.append(t)
    return send, keep


def coalesce(transitions: list[_Transition]) -> list[gcs_pb2.TaskEvent]:
    """One event per (task, attempt): the last state, plus every state's time (pure).

    This runs in the driver for every task it submits, so it is written for speed:
    transitions are grouped first, each message is built once, and map fields are
    filled key by key (initialising them from dicts goes through a slow generic path).
    """
    groups: dict[tuple[bytes, int], list[_Transition]] = {}
    for t in transitions:
        key = (t.spec.task_id, t.attempt)
        group = groups.get(key)
        if group is None:
            groups[key] = [t]
        else:
            group.append(t)
    events = []
    for group in groups.values():
        spec = group[0].spec
        last = group[-1]
        event = gcs_pb2.TaskEvent(
            task_id=spec.task_id, attempt=last.attempt, function_name=spec.function_name,
            job_id=spec.job_id, actor_id=spec.actor_id, kind=_KINDS.get(spec.kind, "NORMAL_TASK"),
            state=last.state, time=last.time)
        state_times = event.state_times
        for t in group:
            state_times[t.state] = t.time
            if t.state == FIRST_STATE:
                event.call_site = spec.call_site
                event.parent_task_id = spec.parent_task_id
                event.trace_id = trace_context.trace_id_hex(spec)
                event.submit_span_id = spec.parent_span_id
                resources = event.resources
                for name, amount in spec.resources.items():
                    resources[name] = amount
            # Later transitions win, as they would setting the fields one by one.
            if t.node_id:
                event.node_id = t.node_id
            if t.worker_id:
                event.worker_id = t.worker_id
            if t.worker_pid:
                event.worker_pid = t.worker_pid
            if t.error_type:
                event.error_type = t.error_type
            if t.error_message:
                event.error_message = t.error_message
        events.append(event)
    return events
