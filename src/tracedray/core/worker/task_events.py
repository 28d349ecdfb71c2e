"""Task state transitions, buffered and sent to the GCS task table in batches.

Recording is on the hot path (several transitions per task), so ``record`` only
appends a tuple; protos are built, and the transitions of one task attempt
coalesced into a single event, on the flusher thread.

An actor call's first state is left to the actor: the caller puts the call's submission
time in its spec (``submitted_at``) and holds the state back (``hold_first``); the actor
records it with RUNNING and FINISHED, so a call is one event at the GCS, not one from
each side. The caller drops what it held once the actor answered the call
(``reported_by_actor``), and sends it itself when it records another state of the call
(a failure the actor never saw), when the call still waits after ``HOLD_CALL_S`` (so
``list tasks`` shows it pending), when the call cannot be sent at once (``release_held``),
and at a final flush. Each side thus reports what it
saw: a caller that dies cannot take the actor's report of a finished call with it.

A normal task's first state waits for the caller's next flush (``record_first``); if the
task is sent to a worker before it, the state goes with the task instead
(``take_first``, ``spec.submitted_at``) and the worker records it with the dispatch,
start and end (dispatch_record.py): a task sent at once is one event, not two.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, NamedTuple

from tracedray import logs
from tracedray._proto.v1 import common_pb2, gcs_pb2
from tracedray.core import trace_context
from tracedray.core.protocol import task_event_wire as wire
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
# Recorded by the worker a task was sent to, at its caller's ``spec.dispatched_at``.
DISPATCHED_STATE = "SUBMITTED_TO_WORKER"
# How long a caller holds an actor call's first state back for its actor to report it.
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
        # Actor calls' first states, by task id, left to their actors (hold_first).
        self._held: dict[bytes, _Transition] = {}
        # Normal tasks' first states not flushed yet, by task id: one dispatched before
        # the next flush leaves its first state to its worker (take_first).
        self._first: dict[bytes, _Transition] = {}
        self._unsent: list[bytes] = []  # serialized events
        self._lock = threading.Lock()
        self.dropped = 0
        self.sent = 0
        # Each recorded transition's number, and the last one a flush delivered to the
        # GCS: a result tells its caller both (executor_reports.py).
        self._recorded = 0
        self.delivered_through = 0

    def record(self, spec: common_pb2.TaskSpec, state: str, *, node_id: str = "",
               worker_id: str = "", worker_pid: int = 0, error_type: str = "",
               error_message: str = "", at: float = 0.0, attempt: int | None = None) -> int:
        """``at``: when the task reached ``state``, if not now (the caller's moment of a
        submission recorded later by the submit inbox's thread); ``attempt``: if not the
        spec's. Returns the transition's number (``delivered_through`` passes it once
        the GCS has it), 0 when it was dropped."""
        transition = _Transition(spec, spec.attempt if attempt is None else attempt, state,
                                 at or time.time(), node_id, worker_id, worker_pid,
                                 error_type, error_message)
        with self._lock:
            if len(self._pending) >= MAX_BUFFERED:
                self.dropped += 1  # GCS unreachable for long: keep memory bounded
                return 0
            held = self._held
            if held:  # a state of a call whose first state was held: ours to send now
                first = held.pop(spec.task_id, None)
                if first is not None:
                    self._pending.append(first)
            self._pending.append(transition)
            self._recorded += 1
            return self._recorded

    def hold_first(self, spec: common_pb2.TaskSpec, at: float) -> None:
        """An actor call's first state, at ``at``, left to its actor (the module's
        docstring); ``spec.submitted_at`` must say ``at``."""
        transition = _Transition(spec, spec.attempt, FIRST_STATE, at, "", "", 0, "", "")
        with self._lock:
            if len(self._pending) + len(self._held) >= MAX_BUFFERED:
                self.dropped += 1
                return
            self._held[spec.task_id] = transition

    def record_first(self, spec: common_pb2.TaskSpec, at: float) -> None:
        """A normal task's first state, at ``at``: sent with the next flush unless its
        task is dispatched first (``take_first``)."""
        transition = _Transition(spec, spec.attempt, FIRST_STATE, at, "", "", 0, "", "")
        with self._lock:
            if len(self._pending) + len(self._first) >= MAX_BUFFERED:
                self.dropped += 1
                return
            self._first[spec.task_id] = transition

    def record_left_by_caller(self, spec: common_pb2.TaskSpec, attempt: int, node_id: str,
                              worker_id: str, worker_pid: int) -> None:
        """The states a caller left to the worker it sent ``spec`` to, at the caller's
        times: the first (attempt 0 only, at ``spec.submitted_at``) and the dispatch (at
        ``spec.dispatched_at``), where the spec carries them. The worker records them
        as the task arrives; the caller, where that worker may have died first."""
        if spec.submitted_at and not attempt:
            self.record(spec, FIRST_STATE, at=spec.submitted_at, attempt=0)
        if spec.dispatched_at:
            self.record(spec, DISPATCHED_STATE, at=spec.dispatched_at, node_id=node_id,
                        worker_id=worker_id, worker_pid=worker_pid, attempt=attempt)

    def take_first(self, task_id: bytes) -> float:
        """The task goes to a worker now: if its first state has not been flushed, the
        worker records it (at the time returned, which the spec carries as
        ``submitted_at``) with the states it sees, in one event. 0.0: already sent."""
        if not self._first:
            return 0.0
        with self._lock:
            first = self._first.pop(task_id, None)
        return 0.0 if first is None else first.time

    def release_held(self, task_ids: Iterable[bytes]) -> None:
        """These calls wait in their caller (their actor is not reachable yet, or their
        arguments are not ready): their first states go with the next flush, so that a
        caller that dies before sending them still leaves them in the record."""
        held = self._held
        if held:
            with self._lock:
                for task_id in task_ids:
                    first = held.pop(task_id, None)
                    if first is not None:
                        self._pending.append(first)

    def reported_by_actor(self, task_ids: Iterable[bytes]) -> None:
        """The actor answered these calls: it reported their first states."""
        held = self._held
        if held:
            with self._lock:
                for task_id in task_ids:
                    held.pop(task_id, None)

    def add(self, event: gcs_pb2.TaskEvent) -> None:
        """An event built elsewhere (a slow attempt's mark), sent with the next flush."""
        with self._lock:
            if len(self._unsent) < MAX_BUFFERED:
                self._unsent.append(event.SerializeToString())

    def flush(self, *, periodic: bool = False) -> None:
        """Send what was recorded. A ``periodic`` flush keeps actor calls' first states
        back while younger than ``HOLD_CALL_S``; any other (shutdown) sends them all."""
        cutoff = time.time() - HOLD_CALL_S if periodic else float("inf")
        with self._lock:
            pending, self._pending = self._pending, []
            if self._first:  # recorded before any later state of their tasks
                pending[:0] = self._first.values()
                self._first = {}
            held = self._held
            if held:
                due = [task_id for task_id, t in held.items() if t.time <= cutoff]
                pending.extend(held.pop(task_id) for task_id in due)
            unsent, self._unsent = self._unsent, []
            through = self._recorded
        events = unsent + coalesce(pending)
        for start in range(0, len(events), SEND_BATCH):
            try:
                self._gcs.add_encoded_task_events(events[start:start + SEND_BATCH])
            except RaySystemError as exc:
                log.warning("task_events.flush_failed", events=len(events) - start,
                            error=str(exc))
                with self._lock:  # ahead of any added meanwhile, which stay too
                    self._unsent = (events[start:] + self._unsent)[:MAX_BUFFERED]
                return
            self.sent += min(SEND_BATCH, len(events) - start)
        # Everything numbered up to ``through`` went: this flush sent what earlier failed
        # ones kept back first. (The core worker's Flusher runs one flush at a time.)
        self.delivered_through = through


def coalesce(transitions: list[_Transition]) -> list[bytes]:
    """One event per (task, attempt), serialized (task_event_wire.py): the last state,
    plus every state's time (pure).

    This runs for every task and actor call, so it is written for speed: transitions
    are grouped first, and each event's bytes are written at once, not built as a
    message and serialized.
    """
    groups: dict[tuple[bytes, int], list[_Transition]] = {}
    for t in transitions:
        key = (t.spec.task_id, t.attempt)
        group = groups.get(key)
        if group is None:
            groups[key] = [t]
        else:
            group.append(t)
    return [_encode(group) for group in groups.values()]


def _encode(group: list[_Transition]) -> bytes:
    spec = group[0].spec
    last = group[-1]
    state_times: dict[str, float] = {}
    node_id = worker_id = error_type = error_message = ""
    worker_pid = 0
    first = None
    for t in group:
        state_times[t.state] = t.time
        if t.state == FIRST_STATE:
            first = t
        # Later transitions win, as they would setting the fields one by one.
        if t.node_id:
            node_id = t.node_id
        if t.worker_id:
            worker_id = t.worker_id
        if t.worker_pid:
            worker_pid = t.worker_pid
        if t.error_type:
            error_type = t.error_type
        if t.error_message:
            error_message = t.error_message
    parts = [wire.raw(wire.TASK_ID, spec.task_id), wire.number(wire.ATTEMPT, last.attempt),
             wire.text(wire.STATE, last.state), wire.double(wire.TIME, last.time),
             wire.text(wire.FUNCTION_NAME, spec.function_name),
             wire.raw(wire.JOB_ID, spec.job_id), wire.text(wire.NODE_ID, node_id),
             wire.text(wire.WORKER_ID, worker_id), wire.number(wire.WORKER_PID, worker_pid),
             wire.text(wire.ERROR_TYPE, error_type),
             wire.text(wire.ERROR_MESSAGE, error_message),
             wire.raw(wire.ACTOR_ID, spec.actor_id),
             wire.text(wire.KIND, _KINDS.get(spec.kind, "NORMAL_TASK"))]
    if first is not None:  # where the task came from, and its trace
        parts += (wire.text(wire.CALL_SITE, spec.call_site),
                  wire.raw(wire.PARENT_TASK_ID, spec.parent_task_id),
                  wire.text(wire.TRACE_ID, trace_context.trace_id_hex(spec)),
                  wire.double_map(wire.RESOURCES, spec.resources))
    parts.append(wire.double_map(wire.STATE_TIMES, state_times))
    if first is not None:
        parts.append(wire.fixed64(wire.SUBMIT_SPAN_ID, spec.parent_span_id))
    return b"".join(parts)
