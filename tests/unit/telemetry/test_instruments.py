"""The hooks the core reports its hot events through record the contract's spans."""

from __future__ import annotations

from pathlib import Path

from tracedray import telemetry
from tracedray.core import ids
from tracedray.telemetry import instruments, otlp_json


def test_packed_id_fields_fit_the_runtimes_ids() -> None:
    # struct cuts a longer id short without a word: the fields must match core/ids.py.
    assert instruments.TASK_ID_BYTES == ids.TASK_ID_BYTES == len(ids.new_task_id())
    assert instruments.OBJECT_ID_BYTES == ids.OBJECT_ID_BYTES == len(
        ids.object_id_for(ids.new_task_id(), 1))


def _spans(session_dir: Path) -> dict[str, dict[str, object]]:
    telemetry.force_flush()
    entries, warnings = otlp_json.read_trace_dir(session_dir / "traces")
    assert not warnings
    return {span.name: dict(span.attributes or {})
            for span in otlp_json.to_readable_spans(entries)}


class _Lines:
    def __init__(self) -> None:
        self.lines: list[tuple[str, dict[str, object]]] = []

    def info(self, event: str, *args: object, **fields: object) -> None:
        self.lines.append((event, fields))


def test_the_hooks_record_the_spans_and_lines_of_the_contract(tmp_path: Path) -> None:
    telemetry.configure("driver", session_dir=tmp_path)
    task_id, job_id = ids.new_task_id(), ids.new_job_id()
    object_id = ids.object_id_for(task_id, 1)
    lines = _Lines()
    hooks = instruments.Instruments(lines)
    submit = instruments.task_submitted(task_id, "f", "normal", "a.py:3", job_id, 2)
    dispatch = instruments.task_dispatched(
        instruments.dispatch_shape({"tracedray.node.id": "n1", "tracedray.worker.pid": 7}),
        task_id, 1, parent=submit)  # type: ignore[arg-type]
    assert dispatch is not None
    telemetry.finish_spans([dispatch])
    telemetry.finish_span(submit)
    hooks.object_put(object_id, 10, "inline", "a.py:4", "n1", start_ns=1)
    hooks.object_got([object_id], 10, start_ns=1)
    instruments.object_sealed(object_id.hex(), 10, "", False, "n1", 30, 100, 1, 2)
    execute = instruments.execution_shape("f", "normal", "n1", "w1")
    assert execute is instruments.execution_shape("f", "normal", "n1", "w1")  # one per function
    spans = _spans(tmp_path)
    assert spans["task.submit"] == {
        "tracedray.task.id": task_id.hex(), "tracedray.task.function": "f",
        "tracedray.task.kind": "normal", "tracedray.task.call_site": "a.py:3",
        "tracedray.job.id": job_id.hex(), "tracedray.task.max_retries": 2}
    assert spans["task.dispatch"] == {"tracedray.task.id": task_id.hex(),
                                      "tracedray.task.attempt": 1,
                                      "tracedray.node.id": "n1", "tracedray.worker.pid": 7}
    assert spans["object.put"] == {
        "tracedray.object.id": object_id.hex(), "tracedray.object.size": 10,
        "tracedray.object.call_site": "a.py:4", "tracedray.object.location": "inline",
        "tracedray.node.id": "n1"}
    assert spans["object.get"] == {"tracedray.object.count": 1,
                                   "tracedray.object.id": object_id.hex(),
                                   "tracedray.object.size": 10}
    assert spans["object.seal"] == {
        "tracedray.object.id": object_id.hex(), "tracedray.object.size": 10,
        "tracedray.node.id": "n1", "tracedray.store.used": 30, "tracedray.store.capacity": 100,
        "tracedray.object.call_site": "", "tracedray.object.copy": "secondary"}
    assert lines.lines == [
        ("object.put", {"object_id": object_id.hex(), "size": 10, "location": "inline",
                        "call_site": "a.py:4"}),
        ("object.get", {"object_id": object_id.hex(), "count": 1, "size": 10})]


def test_telemetry_off_records_nothing_but_the_lines(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("OTEL_SDK_DISABLED", "true")
    telemetry.configure("driver", session_dir=tmp_path)
    lines = _Lines()
    task_id = ids.new_task_id()
    assert not instruments.task_submitted(task_id, "f", "normal", "a.py:3", b"\0" * 4,
                                          0).is_recording()
    instruments.Instruments(lines).object_put(ids.object_id_for(task_id, 1), 3, "inline",
                                              "a.py:4", "n1", start_ns=1)
    assert [event for event, _ in lines.lines] == ["object.put"]
    assert not list((tmp_path / "traces").glob("*.jsonl")) or _spans(tmp_path) == {}


class _LinesWithSpan(_Lines):
    """Also notes the span current when each line is written (the log's trace ids)."""

    def __init__(self) -> None:
        super().__init__()
        self.span_ids: list[tuple[str, str] | None] = []

    def info(self, event: str, *args: object, **fields: object) -> None:
        super().info(event, *args, **fields)
        self.span_ids.append(telemetry.current_trace_ids())


def test_a_leases_first_dispatch_records_the_decision_and_its_line_inside(
        tmp_path: Path) -> None:
    telemetry.configure("driver", session_dir=tmp_path)
    task_id, job_id = ids.new_task_id(), ids.new_job_id()
    lines = _LinesWithSpan()
    submit = instruments.task_submitted(task_id, "f", "normal", "a.py:3", job_id, 2)
    decision = {"tracedray.scheduling.reason": "fits here", "tracedray.node.id": "n1"}
    worker = {"tracedray.node.id": "n1", "tracedray.worker.pid": 7,
              "tracedray.scheduling.reason": "reused lease"}
    dispatch = instruments.lease_first_dispatch(task_id, 1, decision, worker, parent=submit)
    assert dispatch is not None
    instruments.Instruments(lines).lease_decided(dispatch, task_id, job_id, 1, "n1", 7,
                                                 "lease-1", decision)
    dispatch_ids = telemetry.carrier_for(dispatch)
    telemetry.finish_span(dispatch)
    telemetry.finish_span(submit)
    spans = _spans(tmp_path)
    common = {"tracedray.task.id": task_id.hex(), "tracedray.task.attempt": 1}
    assert spans["task.schedule"] == {**common, **decision}
    # the dispatch names its worker and the raylet's reason, not a reused lease's
    assert spans["task.dispatch"] == {**common, "tracedray.node.id": "n1",
                                      "tracedray.worker.pid": 7,
                                      "tracedray.scheduling.reason": "fits here"}
    assert lines.lines == [("task.dispatch", {
        "task_id": task_id.hex(), "job_id": job_id.hex(), "attempt": 1, "node_id": "n1",
        "worker_pid": 7, "lease_id": "lease-1", "reason": "fits here"})]
    (line_ids,) = lines.span_ids
    assert line_ids is not None and line_ids[1] in dispatch_ids["traceparent"]
