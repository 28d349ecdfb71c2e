"""OTLP export from the session files (telemetry/agent_export.py and its pure parts)."""

from __future__ import annotations

import fcntl
import json
import os
from pathlib import Path

import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from otlp_sink import closed_port, free_port, otlp_sink

from tracedray.telemetry import endpoint_check, otlp_json, otlp_requests
from tracedray.telemetry.agent_export import (
    SessionExporter,
    agent_serves,
    complete_lines,
    destination_dir,
)
from tracedray.telemetry.export_config import (
    CONSOLE,
    GRPC,
    HTTP_PROTOBUF,
    OTLP,
    ExportConfig,
    export_config,
)

TRACE = "5b8efff798038103d269b633813fc60c"


# --- configuration, from the environment -------------------------------------------------
def test_nothing_is_exported_without_an_endpoint_or_an_exporter() -> None:
    assert export_config({}).otlp_targets == ()
    assert export_config({}).traces_exporters == ()


def test_an_endpoint_means_otlp_traces_over_grpc_and_logs_only_when_asked() -> None:
    config = export_config({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4317"})
    assert config.traces_exporters == (OTLP,) and config.logs is None
    assert config.traces is not None
    assert (config.traces.protocol, config.traces.endpoint, config.traces.insecure) == (
        GRPC, "collector:4317", True)
    logs = export_config({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4317",
                          "OTEL_LOGS_EXPORTER": "otlp"}).logs
    assert logs is not None and logs.endpoint == "collector:4317"


def test_otel_traces_exporter_none_and_console_win_over_an_endpoint() -> None:
    endpoint = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4317"}
    assert export_config({**endpoint, "OTEL_TRACES_EXPORTER": "none"}).traces is None
    console = export_config({**endpoint, "OTEL_TRACES_EXPORTER": "console"})
    assert console.traces_exporters == (CONSOLE,) and console.traces is None
    both = export_config({"OTEL_TRACES_EXPORTER": "otlp, console"})
    assert both.traces_exporters == (OTLP, CONSOLE)
    assert both.traces is not None and both.traces.endpoint == "localhost:4317"  # spec default
    odd = export_config({"OTEL_TRACES_EXPORTER": "zipkin"})
    assert odd.traces_exporters == () and "zipkin" in odd.notes[0]


def test_http_endpoints_follow_the_exporter_spec() -> None:
    generic = export_config({"OTEL_EXPORTER_OTLP_ENDPOINT": "https://c:4318/base/",
                             "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
                             "OTEL_LOGS_EXPORTER": "otlp"})
    assert generic.traces is not None and generic.logs is not None
    assert generic.traces.protocol == HTTP_PROTOBUF
    assert generic.traces.endpoint == "https://c:4318/base/v1/traces"
    assert generic.logs.endpoint == "https://c:4318/base/v1/logs"
    assert generic.traces.host_port == ("c", 4318)
    specific = export_config({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://t:9/custom",
                              "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/json",
                              "OTEL_EXPORTER_OTLP_HEADERS": "api-key=a%20b,X-Team=obs",
                              "OTEL_EXPORTER_OTLP_TIMEOUT": "2500",
                              "OTEL_EXPORTER_OTLP_COMPRESSION": "gzip"}).traces
    assert specific is not None
    assert (specific.endpoint, specific.protocol) == ("http://t:9/custom", "http/json")
    assert specific.headers == (("api-key", "a b"), ("x-team", "obs"))
    assert (specific.timeout_s, specific.gzip) == (2.5, True)


def test_grpc_security_follows_the_scheme_then_otel_exporter_otlp_insecure() -> None:
    def insecure(environ: dict[str, str]) -> bool:
        target = export_config(environ).traces
        assert target is not None
        return target.insecure

    assert not insecure({"OTEL_EXPORTER_OTLP_ENDPOINT": "https://c:4317",
                         "OTEL_EXPORTER_OTLP_INSECURE": "true"})
    assert insecure({"OTEL_EXPORTER_OTLP_ENDPOINT": "c:4317",
                     "OTEL_EXPORTER_OTLP_INSECURE": "true"})
    assert not insecure({"OTEL_EXPORTER_OTLP_ENDPOINT": "c:4317"})


# --- lines as requests ---------------------------------------------------------------------
def _trace_line(span_ids: list[int], name: str = "task.execute") -> bytes:
    spans = ",".join(otlp_json.record_span_json(int(TRACE, 16), span_id, 0x11, name, 1, 10,
                                                20, {"tracedray.task.id": "ab"}, 0, "", (), "")
                     for span_id in span_ids)
    prefix = ('{"resourceSpans":[{"resource":{"attributes":[{"key":"service.name","value":'
              '{"stringValue":"tracedray"}}]},"scopeSpans":[{"scope":{"name":"tracedray"},'
              '"spans":[')
    return (prefix + spans + "]}]}]}").encode()


def test_a_trace_line_becomes_the_request_the_sdk_would_send_for_its_spans() -> None:
    line = _trace_line([0xA1, 0xA2])
    batch = otlp_requests.traces_batch([line, b"not json"])
    assert batch.items == 2 and len(batch.unreadable) == 1
    ours = otlp_requests.proto_request(batch, ExportTraceServiceRequest())
    entries = json.loads(line)["resourceSpans"]
    sdk = encode_spans(otlp_json.to_readable_spans(entries))
    ours_spans = [s for rs in ours.resource_spans for ss in rs.scope_spans for s in ss.spans]
    sdk_spans = [s for rs in sdk.resource_spans for ss in rs.scope_spans for s in ss.spans]
    for span in ours_spans + sdk_spans:
        # The files keep neither the parent's is-remote flags nor an unset status; the
        # SDK sends both (flags for any span, an absent status as "unset").
        span.ClearField("flags")
        if not span.status.ListFields():
            span.ClearField("status")
    assert ours_spans == sdk_spans


def test_a_log_line_becomes_a_log_record_with_its_trace_context() -> None:
    line = {"timestamp": "2026-11-26T14:09:38.810493Z", "level": "warning",
            "event": "task.failed", "component": "worker", "host": "h", "ip": "10.0.0.2",
            "pid": 42, "node_id": "n1", "trace_id": TRACE, "span_id": "eee19b7ec3c1b174",
            "task_id": "t1", "versions": {"python": "3.11"}, "attempt": 2}
    batch = otlp_requests.logs_batch([json.dumps(line).encode()], "svc")
    (entry,) = batch.body["resourceLogs"]
    resource = {a["key"]: a["value"] for a in entry["resource"]["attributes"]}
    assert resource["service.name"] == {"stringValue": "svc"}
    assert resource["process.pid"] == {"intValue": "42"}
    assert resource["tracedray.component"] == {"stringValue": "worker"}
    (record,) = entry["scopeLogs"][0]["logRecords"]
    assert record["timeUnixNano"] == "1795702178810493000"
    assert (record["severityNumber"], record["severityText"]) == (13, "WARNING")
    assert record["body"] == {"stringValue": "task.failed"}
    assert (record["traceId"], record["spanId"]) == (TRACE, "eee19b7ec3c1b174")
    attributes = {a["key"]: a["value"] for a in record["attributes"]}
    assert set(attributes) == {"task_id", "versions", "attempt"}
    assert attributes["versions"] == {
        "kvlistValue": {"values": [{"key": "python", "value": {"stringValue": "3.11"}}]}}


def test_only_complete_lines_before_a_nul_tail_are_data() -> None:
    assert complete_lines(b'{"a":1}\n{"b"') == b'{"a":1}\n'
    assert complete_lines(b'{"a":1}\n\0\0\0') == b'{"a":1}\n'
    assert complete_lines(b'{"a"') == b""


# --- the exporter against a receiver -------------------------------------------------------
def _config(port: int, logs: bool = False) -> ExportConfig:
    return export_config({"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{port}",
                          **({"OTEL_LOGS_EXPORTER": "otlp"} if logs else {})})


def _session(tmp_path: Path) -> Path:
    for folder in ("traces", "logs"):
        (tmp_path / folder).mkdir(exist_ok=True)
    return tmp_path


def _append(path: Path, data: bytes) -> None:
    with path.open("ab") as handle:
        handle.write(data)


def _exporter(session: Path, port: int, warnings: list[str] | None = None, **kwargs: object,
              ) -> SessionExporter:
    seen = [] if warnings is None else warnings
    return SessionExporter(session, _config(port, bool(kwargs.pop("logs", False))),
                           warn=lambda event, fields: seen.append(event), **kwargs)  # type: ignore[arg-type]


def test_every_line_goes_once_even_across_a_restart(tmp_path: Path) -> None:
    session = _session(tmp_path)
    _append(session / "traces" / "worker-1.jsonl", _trace_line([1, 2]) + b"\n")
    _append(session / "traces" / "driver-2.jsonl", _trace_line([3]) + b"\n" + _trace_line([4]))
    with otlp_sink() as sink:
        exporter = _exporter(session, sink.port)
        assert not exporter.export_once()  # driver-2's last line has no newline yet
        assert sink.span_ids() == {f"{i:016x}" for i in (1, 2, 3)}
        _append(session / "traces" / "driver-2.jsonl", b"\n")
        assert exporter.export_once()
        stats = exporter.statistics()
        assert (stats.spans_exported, stats.failed_attempts, stats.dropped) == (4, 0, 0)
        assert stats.pending_bytes == 0 and not stats.endpoint_down
        exporter.close()
        # A new agent resumes from the cursors: what went out does not go again.
        _append(session / "traces" / "worker-1.jsonl", _trace_line([5]) + b"\n")
        again = _exporter(session, sink.port)
        assert again.export_once()
        again.close()
        assert sorted(span.span_id for span in sink.spans) == [
            f"{i:016x}" for i in (1, 2, 3, 4, 5)]


def test_every_line_goes_once_across_a_rotation_and_a_compression(tmp_path: Path) -> None:
    from tracedray.telemetry.rotation import Limits
    from tracedray.telemetry.rotation_io import Rotator

    session = _session(tmp_path)
    current = session / "traces" / "worker-1.jsonl"
    _append(current, _trace_line([1, 2]) + b"\n")
    rotate_now = Limits(rotation_bytes=1, backup_count=10, compress_delay_s=1e9,
                        session_max_bytes=1 << 40)
    with otlp_sink() as sink:
        exporter = _exporter(session, sink.port)
        assert exporter.export_once()
        _append(current, _trace_line([3]) + b"\n")  # not exported before it rotates
        rotator = Rotator(session, rotate_now)
        assert rotator.run_once().rotated == 1
        rotator.close()
        _append(current, _trace_line([4]) + b"\n")  # the new current file
        assert exporter.export_once()
        assert sorted(span.span_id for span in sink.spans) == [
            f"{i:016x}" for i in (1, 2, 3, 4)]
        # Compressed before it was all sent (the endpoint was down): read uncompressed.
        _append(current, _trace_line([5]) + b"\n")
        rotator = Rotator(session, rotate_now)
        assert rotator.run_once().rotated == 1
        rotator.close()
        compress_now = Rotator(session, Limits(1 << 30, 10, 0.0, 1 << 40))
        assert compress_now.run_once().compressed == 2
        compress_now.close()
        assert exporter.export_once()
        exporter.close()
        assert sorted(span.span_id for span in sink.spans) == [
            f"{i:016x}" for i in (1, 2, 3, 4, 5)]


def test_a_dead_endpoint_loses_nothing_and_backs_off(tmp_path: Path) -> None:
    session = _session(tmp_path)
    _append(session / "traces" / "worker-1.jsonl", _trace_line([1]) + b"\n")
    port = free_port()
    warnings: list[str] = []
    exporter = _exporter(session, port, warnings)
    assert not exporter.export_once()
    stats = exporter.statistics()
    assert stats.endpoint_down and stats.failed_attempts == 1 and stats.dropped == 0
    assert stats.pending_bytes > 0 and stats.last_error
    assert exporter.waiting_s() > 0 and not exporter.export_once()  # backing off: no try
    assert exporter.statistics().failed_attempts == 1
    assert warnings == ["telemetry.export_failed"]
    with otlp_sink(port) as sink:
        exporter._retry_at = 0.0  # the backoff is over
        assert exporter.export_once()
        assert sink.span_ids() == {f"{1:016x}"}
    assert warnings == ["telemetry.export_failed", "telemetry.export_resumed"]
    assert not exporter.statistics().endpoint_down
    exporter.close()


def test_a_file_another_agent_holds_is_left_to_it_and_lines_that_are_not_json_dropped(
        tmp_path: Path) -> None:
    session = _session(tmp_path)
    _append(session / "traces" / "worker-1.jsonl", _trace_line([1]) + b"\n")
    _append(session / "traces" / "worker-2.jsonl", b"garbage\n" + _trace_line([2]) + b"\n")
    with otlp_sink() as sink:
        exporter = _exporter(session, sink.port)
        target = _config(sink.port).traces
        assert target is not None
        cursor = destination_dir(session, target) / "traces" / "worker-1.jsonl.offset"
        fd = os.open(cursor, os.O_RDWR | os.O_CREAT)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            exporter.export_once()
            assert sink.span_ids() == {f"{2:016x}"}
        finally:
            os.close(fd)
        exporter.export_once()
        assert sink.span_ids() == {f"{1:016x}", f"{2:016x}"}
        assert exporter.statistics().dropped == 1
        exporter.close()


def test_logs_go_as_log_records_and_only_pid_limits_the_files(tmp_path: Path) -> None:
    session = _session(tmp_path)
    record = {"timestamp": "2026-11-26T14:09:38Z", "level": "info", "event": "task.execute",
              "component": "driver", "pid": 7, "trace_id": TRACE, "span_id": "00000000000000a1"}
    _append(session / "logs" / "driver-7.jsonl", json.dumps(record).encode() + b"\n\0\0")
    _append(session / "logs" / "worker-8.jsonl", json.dumps(record).encode() + b"\n")
    _append(session / "traces" / "driver-7.jsonl", _trace_line([0xA1]) + b"\n")
    _append(session / "traces" / "worker-8.jsonl", _trace_line([0xB1]) + b"\n")
    with otlp_sink() as sink:
        exporter = _exporter(session, sink.port, logs=True, only_pid=7)
        assert exporter.export_once()
        exporter.close()
        assert sink.span_ids() == {"00000000000000a1"}
        (log,) = sink.logs
        assert (log.body, log.trace_id, log.span_id) == ("task.execute", TRACE,
                                                         "00000000000000a1")
        assert log.resource["process.pid"] == 7
    assert exporter.statistics().logs_exported == 1


def test_an_exporter_tells_drivers_it_serves_the_folder_while_it_lives(tmp_path: Path) -> None:
    session = _session(tmp_path)
    target = _config(4317).traces
    assert target is not None
    assert not agent_serves(session, target)
    exporter = _exporter(session, 4317)
    assert agent_serves(session, target)
    exporter.close()
    assert not agent_serves(session, target)


# --- the driver's warning -----------------------------------------------------------------
def test_a_dead_endpoint_is_reported_once_on_stderr(monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(endpoint_check, "_warned", False)
    environ = {"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{closed_port()}"}
    logged: list[str] = []
    for _ in range(2):
        thread = endpoint_check.check_in_background(environ, lambda e, f: logged.append(e))
        if thread is not None:
            thread.join(10)
    err = capsys.readouterr().err
    assert err.count("tracedray: OTLP endpoint http://127.0.0.1:") == 1, err
    assert "unreachable" in err and "kept in the session files" in err
    assert logged == ["telemetry.otlp_unreachable"]


def test_a_live_endpoint_is_not_reported(monkeypatch: pytest.MonkeyPatch,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(endpoint_check, "_warned", False)
    with otlp_sink() as sink:
        thread = endpoint_check.check_in_background(
            {"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{sink.port}"})
        assert thread is not None
        thread.join(10)
    assert capsys.readouterr().err == ""


def test_an_endpoint_with_trace_files_off_is_reported(monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(endpoint_check, "_warned", False)
    with otlp_sink() as sink:
        thread = endpoint_check.check_in_background(
            {"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{sink.port}",
             "TRACEDRAY_TRACE_FILES": "false"})
        assert thread is not None
        thread.join(10)
    assert "TRACEDRAY_TRACE_FILES=false: spans are not recorded" in capsys.readouterr().err
