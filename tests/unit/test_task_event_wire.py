"""Task events written in protobuf's wire format parse back as the messages they stand
for (task_event_wire.py, task_events.coalesce): every field, whatever its size."""

from __future__ import annotations

import random

from tracedray._proto.v1 import common_pb2, gcs_pb2
from tracedray.core.protocol import task_event_wire as wire
from tracedray.core.worker.task_events import FIRST_STATE, _Transition, coalesce


def test_a_varint_is_protobufs_for_every_size_and_for_a_negative_int32() -> None:
    for n in (0, 1, 127, 128, 300, 16383, 16384, 2**31 - 1, 2**63):
        event = gcs_pb2.TaskEvent(submit_span_id=n)
        assert wire.fixed64(wire.SUBMIT_SPAN_ID, n) == event.SerializeToString()
    for n in (1, 127, 128, 300, 2**31 - 1, -1, -(2**31)):
        assert wire.number(wire.WORKER_PID, n) == \
            gcs_pb2.TaskEvent(worker_pid=n).SerializeToString()


def _spec(rng: random.Random, index: int) -> common_pb2.TaskSpec:
    spec = common_pb2.TaskSpec(
        task_id=rng.randbytes(rng.choice([0, 8, 24])), job_id=rng.randbytes(4),
        function_name="módulo.fn" * rng.randint(0, 40), call_site=f"x.py:{index}",
        kind=rng.choice([common_pb2.NORMAL, common_pb2.ACTOR_METHOD,
                         common_pb2.ACTOR_CREATION]),
        actor_id=rng.choice([b"", rng.randbytes(16)]), attempt=rng.randint(0, 3),
        parent_task_id=rng.choice([b"", rng.randbytes(24)]),
        resources={name: rng.choice([0.0, 0.5, 1.0, 1e9]) for name in
                   rng.sample(["CPU", "GPU", "memory", "custom/ü"], rng.randint(0, 3))})
    if rng.random() < 0.8:
        spec.trace_id = rng.randbytes(16)
        spec.parent_span_id = rng.getrandbits(64)
    return spec


def _expected(group: list[_Transition]) -> gcs_pb2.TaskEvent:
    """The message one attempt's transitions stand for, built field by field."""
    spec, last = group[0].spec, group[-1]
    event = gcs_pb2.TaskEvent(
        task_id=spec.task_id, attempt=last.attempt, function_name=spec.function_name,
        job_id=spec.job_id, actor_id=spec.actor_id, state=last.state, time=last.time,
        kind={common_pb2.NORMAL: "NORMAL_TASK", common_pb2.ACTOR_METHOD: "ACTOR_TASK",
              common_pb2.ACTOR_CREATION: "ACTOR_CREATION_TASK"}[spec.kind])
    for t in group:
        event.state_times[t.state] = t.time
        if t.state == FIRST_STATE:
            event.call_site, event.parent_task_id = spec.call_site, spec.parent_task_id
            event.trace_id = spec.trace_id.hex() if len(spec.trace_id) == 16 else ""
            event.submit_span_id = spec.parent_span_id
            event.resources.update(spec.resources)
        for name in ("node_id", "worker_id", "worker_pid", "error_type", "error_message"):
            if getattr(t, name):
                setattr(event, name, getattr(t, name))
    return event


def test_coalesced_events_parse_back_as_the_messages_they_stand_for() -> None:
    rng = random.Random(7)
    states = [FIRST_STATE, "SUBMITTED_TO_WORKER", "RUNNING", "FINISHED", "FAILED", "RUNNING"]
    for index in range(300):
        spec = _spec(rng, index)
        group = [_Transition(spec, spec.attempt, state, rng.choice([0.0, rng.uniform(0, 2e9)]),
                             rng.choice(["", "node-" * rng.randint(1, 30)]),
                             rng.choice(["", "w1"]), rng.choice([0, 1, 4_000_000]),
                             rng.choice(["", "ValueError"]),
                             rng.choice(["", "é" * rng.randint(1, 3000)]))
                 for state in rng.sample(states, rng.randint(1, len(states)))]
        [encoded] = coalesce(group)
        assert gcs_pb2.TaskEvent.FromString(encoded) == _expected(group), index


def test_a_request_of_encoded_events_is_the_task_events_message() -> None:
    events = [gcs_pb2.TaskEvent(task_id=bytes([i]) * 20, state="RUNNING", time=float(i),
                                state_times={"RUNNING": float(i)}) for i in range(200)]
    request = wire.events_request(event.SerializeToString() for event in events)
    assert gcs_pb2.TaskEvents.FromString(request) == gcs_pb2.TaskEvents(events=events)
    assert wire.events_request([]) == b""
