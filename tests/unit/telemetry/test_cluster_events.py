"""The hooks the processes report their lifecycle events through record the contract's
spans and lines: names, attributes, errors, parents, and lines inside their spans."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from opentelemetry.trace import StatusCode

from tracedray import telemetry
from tracedray.core import ids
from tracedray.exceptions import RaySystemError
from tracedray.telemetry import cluster_events, otlp_json


class _Lines:
    """A logger that keeps each line with the span ids current when it was written."""

    def __init__(self) -> None:
        self.lines: list[tuple[str, str, dict[str, Any], tuple[str, str] | None]] = []

    def info(self, event: str, *args: object, **fields: Any) -> None:
        self.lines.append(("info", event, fields, telemetry.current_trace_ids()))

    def warning(self, event: str, *args: object, **fields: Any) -> None:
        self.lines.append(("warning", event, fields, telemetry.current_trace_ids()))

    def error(self, event: str, *args: object, **fields: Any) -> None:
        self.lines.append(("error", event, fields, telemetry.current_trace_ids()))


def _spans(session_dir: Path) -> dict[str, Any]:
    telemetry.force_flush()
    entries, warnings = otlp_json.read_trace_dir(session_dir / "traces")
    assert not warnings
    return {span.name: span for span in otlp_json.to_readable_spans(entries)}


def test_raylet_events(tmp_path: Path) -> None:
    telemetry.configure("raylet", session_dir=tmp_path)
    lines = _Lines()
    events = cluster_events.RayletEvents(lines)
    with events.node_start("n1", "10.0.0.1") as start:
        start.version_drift(["python 3.11 != 3.12"])
    events.node_started("n1", "10.0.0.1:7", {"CPU": 2.0}, 100, ["python 3.11 != 3.12"])
    events.worker_started("w1", 42, "n1", 9)
    task_id = ids.new_task_id()
    events.worker_exited(worker_id="w1", worker_pid=42, node_id="n1", exit_code=None,
                         exit_signal="SIGKILL", meaning="killed", memory_fields={"cause": "oom"},
                         slot={"task_id": task_id.hex(), "attempt": 1, "function": "f",
                               "started_at": 2.5},
                         actor_id=b"\1" * 16, reason="", unexpected=True, parent=None)
    object_id = ids.object_id_for(task_id, 1)
    with events.object_transfer(object_id, "n2", "n1") as transfer:
        transfer.received(1000, 2)
    events.object_transferred(object_id, 1000, "n2", 2, 0.1234567)
    restart = events.gcs_restart("sqlite", "10.0.0.1:6379", 5, "SIGKILL")
    restart.attempt_failed(1, RaySystemError("port busy"), 0.5)
    restart.restarted(6, 2, 1.23456)
    spans = _spans(tmp_path)
    gcs_restart = spans["gcs.restart"]
    assert gcs_restart.status.status_code is StatusCode.ERROR  # its first attempt failed
    assert dict(gcs_restart.attributes) == {
        "tracedray.gcs.storage": "sqlite", "tracedray.gcs.address": "10.0.0.1:6379",
        "tracedray.gcs.old_pid": 5, "tracedray.gcs.exit": "SIGKILL",
        "tracedray.gcs.new_pid": 6, "tracedray.gcs.restart_attempts": 2,
        "error.type": "tracedray.exceptions.RaySystemError"}
    assert dict(spans["node.start"].attributes) == {
        "tracedray.node.id": "n1", "tracedray.node.ip": "10.0.0.1",
        "tracedray.node.version_drift": ("python 3.11 != 3.12",)}
    assert dict(spans["worker.start"].attributes) == {
        "tracedray.worker.id": "w1", "tracedray.worker.pid": 42, "tracedray.node.id": "n1"}
    exit_span = spans["worker.exit"]
    assert exit_span.status.status_code is StatusCode.ERROR
    attributes = dict(exit_span.attributes)
    assert attributes["tracedray.task.id"] == task_id.hex()
    assert attributes["tracedray.task.started_unix_nano"] == 2_500_000_000
    assert attributes["tracedray.exit.cause"] == "oom"
    assert attributes["tracedray.actor.id"] == (b"\1" * 16).hex()
    assert "tracedray.exit.reason" not in attributes  # nobody stopped it
    assert dict(spans["object.transfer"].attributes) == {
        "tracedray.object.id": object_id.hex(), "tracedray.transfer.from_node": "n2",
        "tracedray.transfer.to_node": "n1", "tracedray.transfer.bytes": 1000,
        "tracedray.transfer.streams": 2}
    assert [(level, event) for level, event, _, _ in lines.lines] == [
        ("info", "node.start"), ("warning", "node.version_drift"), ("info", "worker.start"),
        ("warning", "worker.exit"), ("info", "object.transfer"), ("warning", "gcs.died"),
        ("error", "gcs.restart_failed"), ("info", "gcs.restarted")]
    assert lines.lines[-1][2] == {"gcs_pid": 6, "old_pid": 5, "downtime_s": 1.235,
                                  "attempts": 2, "address": "10.0.0.1:6379"}
    assert lines.lines[3][2] == {
        "worker_id": "w1", "worker_pid": 42, "exit_code": None, "signal": "SIGKILL",
        "meaning": "killed", "reason": "unexpected", "running_task": task_id.hex(),
        "cause": "oom"}
    assert lines.lines[4][2]["duration_s"] == 0.123457


def test_gcs_events_write_their_lines_inside_their_spans(tmp_path: Path) -> None:
    telemetry.configure("gcs", session_dir=tmp_path)
    lines = _Lines()
    events = cluster_events.GcsEvents(lines)
    job_id = ids.new_job_id()
    with events.job_finish(job_id, "FAILED", "driver died", 7, finished=False):
        pass
    events.node_dead("n1", "10.0.0.1", 8, "missed heartbeats")
    submit = telemetry.start_span("task.submit")
    submit_ids = telemetry.carrier_for(submit)["traceparent"].split("-")
    task_id = ids.new_task_id()
    events.task_failed_at_job_end(
        task_id=task_id, attempt=0, function="f", state="FAILED", job_id=job_id,
        actor_id=b"", error_type="OwnerDiedError", reason="its job ended",
        trace_id=submit_ids[1], submit_span_id=int(submit_ids[2], 16), at=3.0)
    submit.end()
    with events.actor_create(b"\2" * 16, "Counter", "c",
                             telemetry.carrier_for(submit)) as created:
        created.placed("n1", 9)
    with events.release_unused(2, 1) as release:
        release.answered(1, [5], ["n2"])
    events.unused_released(2, 1, 1, [5], [6], {"n2": "unreachable"})
    spans = _spans(tmp_path)
    assert dict(spans["job.finish"].attributes) == {
        "tracedray.job.id": job_id.hex(), "tracedray.job.state": "FAILED",
        "tracedray.job.end_reason": "driver died"}
    job_end = spans["task.job_end"]
    assert job_end.status.status_code is StatusCode.ERROR
    assert job_end.parent is not None and job_end.parent.span_id == submit.get_span_context(
        ).span_id
    assert job_end.start_time == job_end.end_time == 3_000_000_000
    assert "tracedray.actor.id" not in dict(job_end.attributes)
    create = spans["actor.create"]
    assert create.parent is not None and create.parent.span_id == submit.get_span_context(
        ).span_id
    assert dict(create.attributes) == {
        "tracedray.actor.id": (b"\2" * 16).hex(), "tracedray.actor.class": "Counter",
        "tracedray.actor.name": "c", "tracedray.node.id": "n1", "tracedray.worker.pid": 9}
    assert dict(spans["actor.release_unused"].attributes)["tracedray.gcs.nodes_unanswered"] \
        == ("n2",)
    by_event = {event: (level, fields, span_ids) for level, event, fields, span_ids
                in lines.lines}
    for event, span_name in (("job.finish", "job.finish"), ("node.dead", "node.dead")):
        level, _, span_ids = by_event[event]
        assert level == "warning"
        assert span_ids is not None
        assert span_ids[1] == format(spans[span_name].context.span_id, "016x")
    assert by_event["task.job_end"][1]["trace_id"] == submit_ids[1]
    assert by_event["actor.release_unused"][0] == "warning"  # a node did not answer
    assert by_event["actor.release_unused"][1]["adopted_worker_pids"] == [6]


def test_owner_events(tmp_path: Path) -> None:
    telemetry.configure("driver", session_dir=tmp_path)
    lines = _Lines()
    events = cluster_events.OwnerEvents(lines)
    events.task_infeasible("task f", {"GPU": 1.0}, [{"CPU": 2.0}], 1, 61.04)
    with events.node_lost_objects("n1", "missed heartbeats", 3):
        pass
    task_id = ids.new_task_id()
    object_id = ids.object_id_for(task_id, 1)
    with events.object_reconstruct(object_id, task_id, "f", 1, "node died"):
        pass
    spans = _spans(tmp_path)
    assert dict(spans["task.infeasible"].attributes) == {
        "tracedray.task.resources": "{'GPU': 1.0}",
        "tracedray.cluster.resources": "[{'CPU': 2.0}]", "tracedray.waited_s": 61.0}
    assert dict(spans["node.lost_objects"].attributes) == {
        "tracedray.node.id": "n1", "tracedray.node.death_reason": "missed heartbeats",
        "tracedray.object.count": 3}
    assert dict(spans["object.reconstruct"].attributes) == {
        "tracedray.object.id": object_id.hex(), "tracedray.task.id": task_id.hex(),
        "tracedray.task.function": "f", "tracedray.task.attempt": 1,
        "tracedray.object.reconstruction_cause": "node died"}
    assert [(event, span_ids is not None) for _, event, _, span_ids in lines.lines] == [
        ("task.infeasible", True), ("node.dead_seen", True), ("object.reconstruct", True)]
    assert lines.lines[0][2]["waited_s"] == 61.0


def test_store_and_flush_events(tmp_path: Path) -> None:
    telemetry.configure("raylet", session_dir=tmp_path)
    lines = _Lines()
    store = cluster_events.StoreEvents(lines, "n1", 1000)
    with store.object_spill("ab", 10, 90, "/spill/ab"):
        pass
    store.spilled("ab", 10, "/spill/ab", 90)
    with store.object_evict("cd", 20, 70):
        pass
    gcs = cluster_events.GcsEvents(lines)
    gcs.flushed(storage="sqlite", entries=5, size=500, rss_before=3, rss_after=2,
                tables={"tasks": 5}, hot_entries={"tasks": 7, "actors": 1},
                start_ns=1_000, duration_s=0.5)
    gcs.flush_failed("sqlite", RaySystemError("disk full"))
    telemetry.force_flush()
    entries, _ = otlp_json.read_trace_dir(tmp_path / "traces")
    spans = otlp_json.to_readable_spans(entries)
    by_name = {span.name: span for span in spans}
    assert dict(by_name["object.spill"].attributes) == {
        "tracedray.object.id": "ab", "tracedray.object.size": 10, "tracedray.node.id": "n1",
        "tracedray.store.used": 90, "tracedray.store.capacity": 1000,
        "tracedray.spill.path": "/spill/ab"}
    assert dict(by_name["object.evict"].attributes)["tracedray.store.used"] == 70
    flushes = [span for span in spans if span.name == "gcs.flush"]
    assert dict(flushes[0].attributes) == {
        "tracedray.gcs.flush.entries": 5, "tracedray.gcs.flush.bytes": 500,
        "tracedray.gcs.memory_before": 3, "tracedray.gcs.memory_after": 2,
        "tracedray.gcs.hot_entries": 8, "tracedray.gcs.storage": "sqlite",
        "tracedray.gcs.table": ("tasks",)}
    assert flushes[0].end_time - flushes[0].start_time == 500_000_000
    assert flushes[1].status.status_code is StatusCode.ERROR
    assert [(level, event) for level, event, _, _ in lines.lines] == [
        ("info", "object spilled"), ("info", "gcs.flush"), ("error", "gcs.flush_failed")]
    assert lines.lines[1][2] == {
        "entries": 5, "bytes": 500, "duration_s": 0.5, "memory_before": 3, "memory_after": 2,
        "storage": "sqlite", "tables": {"tasks": 5}, "hot_entries": {"tasks": 7, "actors": 1}}
