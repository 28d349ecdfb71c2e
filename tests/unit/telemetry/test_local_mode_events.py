"""Local mode's hooks record the spans a cluster records for the same events."""

from __future__ import annotations

from pathlib import Path

from opentelemetry.trace import StatusCode

from tracedray import telemetry
from tracedray.core import ids
from tracedray.telemetry import otlp_json
from tracedray.telemetry.local_mode_events import LocalModeEvents


def test_local_mode_spans(tmp_path: Path) -> None:
    telemetry.configure("driver", session_dir=tmp_path)
    events = LocalModeEvents("n1", "w1")
    task_id, job_id, actor_id = ids.new_task_id(), ids.new_job_id(), ids.new_actor_id()
    object_id = ids.object_id_for(task_id, 1)
    with events.object_put(object_id, "a.py:1") as put:
        put.stored(5)
    with events.object_get(object_id.hex()) as got:
        got.found(5)
    events.object_free(object_id, 5)
    with events.actor_create(actor_id, "C", "c"):
        pass
    with events.task_submit(task_id, "C.f", "actor_method", "a.py:2", job_id,
                            actor_id) as submission:
        carrier = submission.carrier()
    with events.task_execute(task_id, "C.f", "actor_method", actor_id, carrier) as execution:
        current = telemetry.current_trace_ids()
        execution.failed(ValueError("boom"), "Traceback: boom")
    telemetry.force_flush()
    entries, _ = otlp_json.read_trace_dir(tmp_path / "traces")
    spans = {span.name: span for span in otlp_json.to_readable_spans(entries)}
    assert dict(spans["object.put"].attributes) == {
        "tracedray.object.id": object_id.hex(), "tracedray.object.call_site": "a.py:1",
        "tracedray.node.id": "n1", "tracedray.object.size": 5,
        "tracedray.object.location": "inline"}
    assert dict(spans["object.get"].attributes) == {
        "tracedray.object.id": object_id.hex(), "tracedray.object.count": 1,
        "tracedray.node.id": "n1", "tracedray.object.size": 5}
    assert dict(spans["object.free"].attributes)["tracedray.object.location"] == "inline"
    assert dict(spans["actor.create"].attributes) == {
        "tracedray.actor.id": actor_id.hex(), "tracedray.actor.class": "C",
        "tracedray.actor.name": "c", "tracedray.node.id": "n1"}
    assert dict(spans["task.submit"].attributes) == {
        "tracedray.task.id": task_id.hex(), "tracedray.task.function": "C.f",
        "tracedray.task.kind": "actor_method", "tracedray.task.call_site": "a.py:2",
        "tracedray.job.id": job_id.hex(), "tracedray.task.max_retries": 0,
        "tracedray.actor.id": actor_id.hex()}
    execute = spans["task.execute"]
    assert execute.parent is not None
    assert execute.parent.span_id == spans["task.submit"].context.span_id
    assert current is not None and current[1] == format(execute.context.span_id, "016x")
    assert execute.status.status_code is StatusCode.ERROR
    assert dict(execute.attributes)["tracedray.worker.id"] == "w1"
