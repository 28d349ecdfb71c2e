"""``job_tasks.merge`` (fields copied by name, a record's first event on a short path)
folds any sequence of events into the same record as the field-by-field merge it
replaced, kept here as the reference."""

from __future__ import annotations

import random

from tracedray._proto.v1 import gcs_pb2
from tracedray.core.gcs import job_tasks

TERMINAL = job_tasks.TERMINAL
STATES = ["PENDING_ARGS_AVAIL", "SUBMITTED_TO_WORKER", "RUNNING", "FINISHED", "FAILED",
          "CANCELLED", ""]


def reference_merge(record: gcs_pb2.TaskRecord, event: gcs_pb2.TaskEvent) -> None:
    takes = job_tasks.takes_state(record, event)
    if event.job_end and not takes:
        return
    if event.function_name:
        record.function_name = event.function_name
    if event.call_site:
        record.call_site = event.call_site
    if event.parent_task_id:
        record.parent_task_id = event.parent_task_id
    if event.trace_id:
        record.trace_id = event.trace_id
    if event.submit_span_id:
        record.submit_span_id = event.submit_span_id
    if event.resources:
        record.resources.update(event.resources)
    if event.actor_id:
        record.actor_id = event.actor_id
    verdict_held = job_tasks.failed_by_job_end(record)
    if takes:
        if verdict_held:
            record.error_type = record.error_message = ""
        record.state = event.state
        record.attempt = max(record.attempt, event.attempt)
    fields = ("node_id", "worker_id", "worker_pid") + (
        ("error_type", "error_message") if takes or not verdict_held else ())
    for field in fields:
        value = getattr(event, field)
        if value:
            setattr(record, field, value)
    duplicate = any(e.state == event.state and e.attempt == event.attempt
                    and e.time == event.time for e in record.events)
    if not duplicate and (len(record.events) < job_tasks.MAX_EVENTS_PER_TASK
                          or event.state in TERMINAL):
        record.events.append(event)


def _random_event(rng: random.Random) -> gcs_pb2.TaskEvent:
    def maybe(value: object) -> object:
        return value if rng.random() < 0.5 else type(value)()

    event = gcs_pb2.TaskEvent(
        task_id=b"t" * 16, job_id=b"j" * 4, state=rng.choice(STATES),
        time=float(rng.randint(0, 6)), attempt=rng.randint(0, 2),
        function_name=maybe(rng.choice(["m.f", "m.g"])), call_site=maybe("x.py:1"),
        parent_task_id=maybe(b"p" * 16), trace_id=maybe("ab" * 16),
        submit_span_id=maybe(rng.randint(1, 9)), actor_id=maybe(b"a" * 16),
        node_id=maybe(rng.choice(["n1", "n2"])), worker_id=maybe(rng.choice(["w1", "w2"])),
        worker_pid=maybe(rng.randint(1, 3)), error_type=maybe(rng.choice(["E", "OWNER_DIED"])),
        error_message=maybe(rng.choice(["boom", "owner died: …"])),
        job_end=rng.random() < 0.15)
    if rng.random() < 0.5:
        event.resources["CPU"] = rng.choice([0.0, 1.0])
    event.state_times[event.state or "X"] = event.time
    return event


def test_merge_gives_the_reference_record_for_random_histories() -> None:
    rng = random.Random(28)
    for _ in range(3000):
        events = [_random_event(rng) for _ in range(rng.randint(1, 8))]
        if rng.random() < 0.05:  # past the cap on events kept
            events = [_random_event(rng) for _ in range(job_tasks.MAX_EVENTS_PER_TASK + 4)]
        start = dict(task_id=b"t" * 16, job_id=b"j" * 4, kind="ACTOR_TASK")
        ours, reference = gcs_pb2.TaskRecord(**start), gcs_pb2.TaskRecord(**start)
        for event in events:
            job_tasks.merge(ours, event)
            reference_merge(reference, event)
            assert ours == reference, (events, ours, reference)
