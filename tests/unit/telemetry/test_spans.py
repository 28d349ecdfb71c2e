from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from opentelemetry.trace.status import StatusCode

from tracedray import telemetry
from tracedray.telemetry import attributes as attrs
from tracedray.telemetry import otlp_json


def _spans(session_dir: Path) -> list:
    resource_spans, warnings = otlp_json.read_trace_dir(session_dir / "traces")
    assert warnings == []
    return otlp_json.to_readable_spans(resource_spans)


def test_resource_attributes_present(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES",
                       "deployment.environment.name=ci,tracedray.component=spoofed")
    telemetry.configure("raylet", session_dir=tmp_path, node_id="node1", session_id="sess1",
                        extra_resource={"custom.key": 5})
    with telemetry.span("node.start"):
        pass
    (span,) = _spans(tmp_path)
    resource = dict(span.resource.attributes)
    for key in ("service.name", "service.version", "service.instance.id", "host.name",
                "host.ip", "process.pid", "process.runtime.name", "process.runtime.version",
                "os.type"):
        assert resource[key], key
    assert resource["service.name"] == "tracedray"
    assert resource["process.pid"] == os.getpid()
    assert resource[attrs.RESOURCE_NODE_ID] == "node1"
    assert resource[attrs.RESOURCE_SESSION_ID] == "sess1"
    # A user variable may add keys but never overwrite the identity the CLI joins on.
    assert resource[attrs.RESOURCE_COMPONENT] == "raylet"
    assert resource["deployment.environment.name"] == "ci"
    assert resource["custom.key"] == 5
    assert (tmp_path / "traces" / f"raylet-{os.getpid()}.jsonl").exists()


def test_service_name_variable_wins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "service.name=from-attributes")
    monkeypatch.setenv("OTEL_SERVICE_NAME", "from-service-name")
    telemetry.configure("driver", session_dir=tmp_path)
    with telemetry.span("x"):
        pass
    assert _spans(tmp_path)[0].resource.attributes["service.name"] == "from-service-name"


def test_each_span_is_one_otlp_line_written_at_end(trace_lines, tmp_path: Path) -> None:
    telemetry.configure("driver", session_dir=tmp_path)
    with telemetry.span("task.submit", {attrs.TASK_ID: "ab" * 12}):
        with telemetry.span("task.schedule"):
            pass
        # the inner span is on disk before the outer one ends
        assert len(trace_lines(tmp_path)) == 1
    lines = trace_lines(tmp_path)
    assert len(lines) == 2
    for line in lines:
        assert set(json.loads(line)) == {"resourceSpans"}
    schedule, submit = _spans(tmp_path)
    assert schedule.parent is not None and schedule.parent.span_id == submit.context.span_id
    assert submit.attributes[attrs.TASK_ID] == "ab" * 12
    stats = telemetry.statistics()
    # Counted in the spool, whose records are a fraction of the JSON lines they become.
    assert stats.spans_written == 2
    assert 0 < stats.bytes_written < sum(len(x) + 1 for x in lines) / 2


def test_configure_is_idempotent(tmp_path: Path) -> None:
    telemetry.configure("driver", session_dir=tmp_path, node_id="n")
    first = telemetry.tracer()
    telemetry.configure("driver", session_dir=tmp_path, node_id="n")
    assert telemetry.tracer() is first


def test_record_error_sets_status_type_and_event(tmp_path: Path) -> None:
    telemetry.configure("worker", session_dir=tmp_path)

    class TaskFailed(Exception):
        pass

    with pytest.raises(TaskFailed), telemetry.span("task.execute"):
        raise TaskFailed("bad input")
    remote = telemetry.start_span("task.get")
    telemetry.record_error(remote, ValueError("remote"), traceback_str="Traceback: remote one")
    remote.end()
    execute, get = _spans(tmp_path)
    assert execute.status.status_code is StatusCode.ERROR
    assert execute.status.description == "TaskFailed: bad input"
    assert execute.attributes[attrs.ERROR_TYPE].endswith(
        "test_record_error_sets_status_type_and_event.<locals>.TaskFailed")
    (event,) = execute.events
    assert event.name == "exception"
    assert event.attributes[attrs.EXCEPTION_MESSAGE] == "bad input"
    assert "raise TaskFailed" in event.attributes[attrs.EXCEPTION_STACKTRACE]
    assert get.attributes[attrs.ERROR_TYPE] == "ValueError"
    assert get.events[0].attributes[attrs.EXCEPTION_STACKTRACE] == "Traceback: remote one"


def test_clean_exit_inside_a_span_is_not_an_error(tmp_path: Path) -> None:
    telemetry.configure("worker", session_dir=tmp_path)
    with pytest.raises(SystemExit), telemetry.span("task.execute"):
        raise SystemExit(0)
    assert _spans(tmp_path)[0].status.status_code is StatusCode.UNSET


def test_sdk_disabled_produces_no_spans(trace_lines, tmp_path: Path,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_SDK_DISABLED", "true")
    telemetry.configure("driver", session_dir=tmp_path)
    assert not telemetry.enabled()
    with telemetry.span("task.submit") as span:
        assert not span.is_recording()
        assert telemetry.current_trace_ids() is None
        assert telemetry.carrier_from_current() == {}
    telemetry.start_span("object.put").end()
    assert not (tmp_path / "traces").exists() or trace_lines(tmp_path) == []
    assert telemetry.statistics().spans_written == 0


def test_trace_files_variable_turns_files_off(trace_lines, tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRACEDRAY_TRACE_FILES", "false")
    telemetry.configure("driver", session_dir=tmp_path)
    with telemetry.span("task.submit") as span:
        assert span.is_recording()
    assert trace_lines(tmp_path) == [] if (tmp_path / "traces").exists() else True
    assert telemetry.statistics().trace_file == ""


def test_sampler_variable_is_honoured(trace_lines, tmp_path: Path,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_TRACES_SAMPLER", "always_off")
    telemetry.configure("driver", session_dir=tmp_path)
    with telemetry.span("task.submit") as span:
        assert not span.is_recording()
    assert trace_lines(tmp_path) == []


def test_before_configure_everything_is_a_no_op() -> None:
    assert not telemetry.enabled()
    with telemetry.span("task.submit") as span:
        assert not span.is_recording()
    telemetry.force_flush()
    assert telemetry.carrier_from_current() == {}


def test_carrier_round_trip_in_process(tmp_path: Path) -> None:
    telemetry.configure("driver", session_dir=tmp_path)
    assert telemetry.context_from_carrier({}) is None
    assert telemetry.context_from_carrier({"traceparent": "garbage"}) is None
    with telemetry.span("task.submit"):
        carrier = telemetry.carrier_from_current()
        ids = telemetry.current_trace_ids()
    assert ids is not None
    assert carrier["traceparent"].split("-")[1:3] == list(ids)
    context = telemetry.context_from_carrier(carrier)
    with telemetry.span("task.execute", context=context):
        pass
    execute, submit = sorted(_spans(tmp_path), key=lambda s: s.name)
    assert execute.context.trace_id == submit.context.trace_id
    assert execute.parent.span_id == submit.context.span_id
