"""Task state transitions coalesced into one GCS event per task attempt (pure)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

from tracedray._proto.v1 import common_pb2, gcs_pb2
from tracedray.core import auth, rpc
from tracedray.core.gcs.client import GcsClient
from tracedray.core.gcs.server import Gcs
from tracedray.core.worker.task_events import (
    FIRST_STATE,
    HOLD_CALL_S,
    SEND_BATCH,
    TaskEventBuffer,
    _Transition,
    coalesce,
)


def _spec(task_id: bytes, attempt: int = 0) -> common_pb2.TaskSpec:
    spec = common_pb2.TaskSpec(task_id=task_id, job_id=b"\x01\x00\x00\x00",
                               function_name="mod.fn", kind=common_pb2.ACTOR_METHOD,
                               actor_id=b"actor", call_site="x.py:3", attempt=attempt,
                               parent_task_id=b"parent", resources={"CPU": 1.0})
    spec.trace_id, spec.parent_span_id, spec.trace_flags = bytes([0xAB] * 16), 0xCD << 56, 1
    return spec


def _t(spec: common_pb2.TaskSpec, state: str, at: float, **details: object) -> _Transition:
    fields = {"node_id": "", "worker_id": "", "worker_pid": 0, "error_type": "",
              "error_message": ""} | details
    return _Transition(spec, spec.attempt, state, at, **fields)  # type: ignore[arg-type]


def _parsed(encoded: list[bytes]) -> list[gcs_pb2.TaskEvent]:
    return [gcs_pb2.TaskEvent.FromString(event) for event in encoded]


def test_one_event_per_attempt_with_the_last_state_and_every_state_time() -> None:
    first, second, retry = _spec(b"t1"), _spec(b"t2"), _spec(b"t1", attempt=1)
    events = _parsed(coalesce([
        _t(first, FIRST_STATE, 1.0), _t(second, FIRST_STATE, 1.5),
        _t(first, "SUBMITTED_TO_WORKER", 2.0, node_id="n1", worker_id="w1", worker_pid=7),
        _t(first, "FAILED", 3.0, error_type="WorkerCrashedError", error_message="died"),
        _t(retry, "SUBMITTED_TO_WORKER", 4.0, node_id="n2"),
    ]))
    by_key = {(e.task_id, e.attempt): e for e in events}
    assert sorted(by_key) == [(b"t1", 0), (b"t1", 1), (b"t2", 0)]
    failed = by_key[(b"t1", 0)]
    assert (failed.state, failed.time) == ("FAILED", 3.0)
    assert dict(failed.state_times) == {FIRST_STATE: 1.0, "SUBMITTED_TO_WORKER": 2.0,
                                        "FAILED": 3.0}
    assert (failed.node_id, failed.worker_id, failed.worker_pid) == ("n1", "w1", 7)
    assert (failed.error_type, failed.error_message) == ("WorkerCrashedError", "died")
    assert (failed.function_name, failed.kind, failed.actor_id) == (
        "mod.fn", "ACTOR_TASK", b"actor")
    # What only the first state carries: where it came from and its trace.
    assert (failed.call_site, failed.parent_task_id, failed.trace_id) == (
        "x.py:3", b"parent", "ab" * 16)
    assert dict(failed.resources) == {"CPU": 1.0}
    later = by_key[(b"t1", 1)]
    assert later.call_site == "" and later.node_id == "n2" and later.state == "SUBMITTED_TO_WORKER"
    assert by_key[(b"t2", 0)].state == FIRST_STATE


class CountingClient(GcsClient):
    def __init__(self, address: str) -> None:
        super().__init__(address)
        self.batches: list[int] = []

    def add_encoded_task_events(self, events: Sequence[bytes]) -> None:
        self.batches.append(len(events))
        super().add_encoded_task_events(events)


def test_a_backlog_goes_to_the_gcs_in_bounded_batches(tmp_path: Path) -> None:
    """A burst's backlog reaches a real GCS as several calls of at most SEND_BATCH events
    (the GCS parses and merges one bounded batch at a time), and every task arrives."""
    auth.configure(auth.new_token())  # what the server expects and the client presents
    gcs = Gcs(session_dir=tmp_path, storage_url="memory")
    gcs.start()
    try:
        client = CountingClient(f"127.0.0.1:{gcs.port}")
        buffer = TaskEventBuffer(client)
        total = 2 * SEND_BATCH + 7
        for i in range(total):
            buffer.record(_spec(i.to_bytes(8, "big")), FIRST_STATE)
        buffer.flush()
        assert client.batches == [SEND_BATCH, SEND_BATCH, 7]
        assert buffer.sent == total
        assert len(client.get_tasks().tasks) == total
    finally:
        gcs.stop()
        rpc.close_all_channels()
        auth.reset()


def test_events_a_gcs_outage_kept_back_reach_the_gcs_that_comes_back(tmp_path: Path) -> None:
    auth.configure(auth.new_token())
    first = Gcs(session_dir=tmp_path, storage_url="memory")
    first.start()
    port = first.port
    try:
        client = GcsClient(f"127.0.0.1:{port}", reconnect_s=0.3)
        buffer = TaskEventBuffer(client)
        first.stop()  # the GCS is gone: the flush fails after 0.3 s and keeps the events
        for i in range(SEND_BATCH + 3):
            buffer.record(_spec(i.to_bytes(8, "big")), FIRST_STATE)
        buffer.flush()
        assert buffer.sent == 0
        again = Gcs(session_dir=tmp_path / "again", storage_url="memory", port=port)
        again.start()
        try:
            buffer.flush()
            assert buffer.sent == SEND_BATCH + 3
            assert len(client.get_tasks().tasks) == SEND_BATCH + 3
        finally:
            again.stop()
    finally:
        rpc.close_all_channels()
        auth.reset()


class _Gcs:
    """What a buffer sends (a GCS client's add_encoded_task_events)."""

    def __init__(self) -> None:
        self.events: list[gcs_pb2.TaskEvent] = []

    def add_encoded_task_events(self, events: Sequence[bytes]) -> None:
        self.events.extend(_parsed(list(events)))


def _holding(at: float) -> tuple[TaskEventBuffer, _Gcs, common_pb2.TaskSpec]:
    gcs = _Gcs()
    buffer = TaskEventBuffer(gcs)  # type: ignore[arg-type]
    spec = _spec(b"call")
    spec.submitted_at = at
    buffer.hold_first(spec, at)
    return buffer, gcs, spec


def test_a_call_its_actor_answered_costs_its_caller_no_event() -> None:
    buffer, gcs, _ = _holding(time.time())
    buffer.flush(periodic=True)
    assert gcs.events == []  # young: held for the actor
    buffer.reported_by_actor([b"call"])
    buffer.flush()
    assert gcs.events == []  # the actor reported it


def test_a_call_still_waiting_after_the_hold_is_sent_so_list_tasks_shows_it() -> None:
    at = time.time() - HOLD_CALL_S - 0.1
    buffer, gcs, _ = _holding(at)
    buffer.flush(periodic=True)
    [event] = gcs.events
    assert (event.state, dict(event.state_times)) == (FIRST_STATE, {FIRST_STATE: at})
    assert event.call_site == "x.py:3" and event.trace_id  # the first state's description


def test_a_state_the_caller_records_itself_brings_the_held_first_state_along() -> None:
    at = time.time()
    buffer, gcs, spec = _holding(at)
    buffer.record(spec, "FAILED", error_type="ActorDiedError")  # the actor never saw it
    buffer.flush(periodic=True)
    [event] = gcs.events
    assert event.state == "FAILED" and set(event.state_times) == {FIRST_STATE, "FAILED"}
    assert event.state_times[FIRST_STATE] == at


def test_a_final_flush_sends_every_held_first_state() -> None:
    buffer, gcs, _ = _holding(time.time())
    buffer.flush()  # shutdown: nothing may stay behind
    assert [e.state for e in gcs.events] == [FIRST_STATE]


def test_a_call_its_caller_could_not_send_at_once_is_in_the_next_flush() -> None:
    """Its actor is not reachable yet: a caller that died before sending it would leave
    no trace of it, were its first state still held for the actor."""
    buffer, gcs, _ = _holding(time.time())
    buffer.release_held([b"call", b"never-held"])
    buffer.flush(periodic=True)
    [event] = gcs.events
    assert event.state == FIRST_STATE and event.call_site == "x.py:3"
    buffer.reported_by_actor([b"call"])  # answered later: nothing more to send
    buffer.flush()
    assert len(gcs.events) == 1


def _normal(task_id: bytes) -> common_pb2.TaskSpec:
    spec = _spec(task_id)
    spec.kind, spec.actor_id = common_pb2.NORMAL, b""
    return spec


def test_a_task_dispatched_before_the_next_flush_takes_its_first_state_along() -> None:
    gcs = _Gcs()
    buffer = TaskEventBuffer(gcs)  # type: ignore[arg-type]
    sent_at_once, queued = _normal(b"at-once"), _normal(b"queued")
    buffer.record_first(sent_at_once, 5.0)
    buffer.record_first(queued, 6.0)
    assert buffer.take_first(b"at-once") == 5.0  # its worker records it
    assert buffer.take_first(b"at-once") == 0.0
    buffer.flush(periodic=True)
    [event] = gcs.events  # the queued task's, from its caller
    assert event.task_id == b"queued" and dict(event.state_times) == {FIRST_STATE: 6.0}
    assert event.call_site == "x.py:3"
    assert buffer.take_first(b"queued") == 0.0  # flushed: its worker records only the rest


def test_a_state_recorded_before_the_dispatch_follows_the_first_in_one_event() -> None:
    gcs = _Gcs()
    buffer = TaskEventBuffer(gcs)  # type: ignore[arg-type]
    spec = _normal(b"task")
    buffer.record_first(spec, 5.0)
    buffer.record(spec, "FAILED", at=6.0, error_type="RaySystemError")  # never dispatched
    buffer.flush()
    [event] = gcs.events
    assert event.state == "FAILED" and dict(event.state_times) == {FIRST_STATE: 5.0,
                                                                   "FAILED": 6.0}
