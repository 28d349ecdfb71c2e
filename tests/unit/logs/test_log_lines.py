from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tracedray import logs, telemetry
from tracedray.exceptions import ConfigError
from tracedray.telemetry.append_file import read_data

REQUIRED = ("timestamp", "level", "event", "component", "host", "ip", "pid", "node_id",
            "versions")
UTC_Z = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$")


def test_every_line_has_the_required_fields(tmp_path: Path, read_log) -> None:
    logs.configure("raylet", session_dir=tmp_path, node_id="node-1", session_id="s")
    log = logs.get_logger("test")
    log.info("object.put", size=10)
    log.warning("store.pressure")
    lines = read_log(tmp_path)
    assert [line["event"] for line in lines] == ["process.start", "object.put",
                                                 "store.pressure"]
    for line in lines:
        for key in REQUIRED:
            assert key in line, (key, line)
        assert UTC_Z.match(line["timestamp"]), line["timestamp"]
        assert line["component"] == "raylet" and line["node_id"] == "node-1"
        assert line["pid"] == os.getpid()
        assert line["versions"]["tracedray"] and line["versions"]["python"]
    assert lines[1]["level"] == "info" and lines[2]["level"] == "warning"
    assert lines[1]["size"] == 10
    assert (tmp_path / "logs" / f"raylet-{os.getpid()}.jsonl").exists()


def test_process_start_describes_the_process(tmp_path: Path, read_log) -> None:
    logs.configure("driver", session_dir=tmp_path, config={"num_cpus": 2})
    start = read_log(tmp_path)[0]
    assert start["event"] == "process.start"
    assert start["argv"] == sys.argv
    assert start["cwd"] == os.getcwd()
    assert start["executable"] == sys.executable
    assert start["user"]
    assert start["config"] == {"num_cpus": 2}
    assert start["packages"]["structlog"] and start["packages"]["opentelemetry-sdk"]
    assert start["host"] and start["ip"]


def test_configure_is_idempotent(tmp_path: Path, read_log) -> None:
    logs.configure("driver", session_dir=tmp_path)
    logs.configure("driver", session_dir=tmp_path)
    assert [line["event"] for line in read_log(tmp_path)] == ["process.start"]


def test_task_context_and_trace_ids(tmp_path: Path, read_log) -> None:
    telemetry.configure("worker", session_dir=tmp_path)
    logs.configure("worker", session_dir=tmp_path)
    logs.set_process_context(worker_id="w-1")
    log = logs.get_logger()
    with telemetry.span("task.execute") as span, \
            logs.task_context(job_id="j-1", task_id="t-1", task_name="f", attempt=2):
        with logs.task_context(actor_id="a-1"):
            log.info("inner")
        log.info("outer")
    log.info("after")
    inner, outer, after = read_log(tmp_path)[1:]
    context = span.get_span_context()
    assert inner["trace_id"] == format(context.trace_id, "032x")
    assert inner["span_id"] == format(context.span_id, "016x")
    assert inner["task_id"] == "t-1" and inner["actor_id"] == "a-1"
    assert inner["job_id"] == "j-1" and inner["attempt"] == 2 and inner["worker_id"] == "w-1"
    assert "actor_id" not in outer and outer["task_id"] == "t-1"
    assert "task_id" not in after and "trace_id" not in after
    assert after["worker_id"] == "w-1"


def test_task_context_is_per_thread(tmp_path: Path, read_log) -> None:
    logs.configure("worker", session_dir=tmp_path)
    log = logs.get_logger()
    inside = threading.Event()
    release = threading.Event()

    def other_thread() -> None:
        with logs.task_context(task_id="from-thread"):
            inside.set()
            release.wait(10)

    thread = threading.Thread(target=other_thread)
    thread.start()
    assert inside.wait(10)
    log.info("main.thread")
    release.set()
    thread.join()
    assert "task_id" not in read_log(tmp_path)[-1]


def test_level_filter_and_bad_level(tmp_path: Path, read_log,
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRACEDRAY_LOG_LEVEL", "warning")
    logs.configure("gcs", session_dir=tmp_path)
    log = logs.get_logger()
    log.info("dropped")
    log.error("kept")
    assert [line["event"] for line in read_log(tmp_path)] == ["kept"]
    monkeypatch.setenv("TRACEDRAY_LOG_LEVEL", "loud")
    with pytest.raises(ConfigError):
        logs.configure("gcs", session_dir=tmp_path / "other")
    monkeypatch.delenv("TRACEDRAY_LOG_LEVEL")


def test_logging_never_raises(tmp_path: Path, read_log) -> None:
    logs.configure("driver", session_dir=tmp_path)
    log = logs.get_logger()
    log.info("odd.values", value=object(), data=b"\xff", nested={"s": {1, 2}})
    log.info("bad %s %s", "interpolation")  # too few arguments
    try:
        raise KeyError("k")
    except KeyError:
        log.exception("with.traceback")
    events = {line["event"]: line for line in read_log(tmp_path)}
    assert "odd.values" in events
    assert "KeyError" in events["with.traceback"]["exception"]
    assert events["with.traceback"]["level"] == "error"


def test_console_echo_uses_the_short_form(tmp_path: Path, capfd) -> None:
    logs.configure("driver", session_dir=tmp_path, console_level="warning")
    log = logs.get_logger()
    log.info("quiet")
    log.warning("loud", key="v")
    err = capfd.readouterr().err
    assert "quiet" not in err
    assert re.search(r"\d\d:\d\d:\d\d warning \[driver\] loud .*key=v", err)


def _run(code: str, session_dir: Path) -> subprocess.CompletedProcess[str]:
    setup = ("import pathlib\nfrom tracedray import logs\n"
             f"logs.configure('worker', session_dir=pathlib.Path({str(session_dir)!r}))\n")
    return subprocess.run([sys.executable, "-c", setup + code], capture_output=True,
                          text=True, timeout=60, check=False)


def _events(session_dir: Path) -> list[dict]:
    (path,) = (session_dir / "logs").glob("*.jsonl")
    return [json.loads(line) for line in read_data(path).decode().splitlines()]


def test_process_exit_is_the_last_line(tmp_path: Path) -> None:
    assert _run("logs.get_logger().info('work')\n", tmp_path).returncode == 0
    lines = _events(tmp_path)
    assert [line["event"] for line in lines] == ["process.start", "work", "process.exit"]
    assert lines[-1]["exit_code"] == 0 and lines[-1]["run_time_s"] > 0


def test_unhandled_exception_exits_with_code_1(tmp_path: Path) -> None:
    assert _run("raise RuntimeError('x')\n", tmp_path).returncode == 1
    assert _events(tmp_path)[-1]["exit_code"] == 1


def test_explicit_exit_record_before_os_exit(tmp_path: Path) -> None:
    result = _run("import os\nlogs.record_process_exit(7)\nlogs.record_process_exit(8)\n"
                  "os._exit(7)\n", tmp_path)
    assert result.returncode == 7
    exits = [line for line in _events(tmp_path) if line["event"] == "process.exit"]
    assert [line["exit_code"] for line in exits] == [7]


def test_telemetrys_own_warnings_are_log_lines(tmp_path: Path, read_log,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """Telemetry sits below logs and reports through ``telemetry.diagnostics``: a
    failed exporter and the OTel SDK's own warnings still become JSON lines."""
    import logging

    from tracedray.telemetry import diagnostics

    logs.configure("driver", session_dir=tmp_path)
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "console")
    telemetry.configure("driver", session_dir=tmp_path)
    diagnostics.warn("telemetry.export_failed", {"endpoint": "http://x:4317"})
    logging.getLogger("opentelemetry.sdk.trace.export").warning("batch %s dropped", 7)
    by_event = {line["event"]: line for line in read_log(tmp_path)}
    failed = by_event["telemetry.export_failed"]
    assert (failed["level"], failed["logger"], failed["endpoint"]) == (
        "warning", "tracedray.telemetry", "http://x:4317")
    sdk = by_event["otel.sdk"]
    assert (sdk["level"], sdk["message"]) == ("warning", "batch 7 dropped")
    assert sdk["logger"] == "opentelemetry.sdk.trace.export"


def test_a_later_line_is_the_line_logged_where_its_moment_was_taken(
        tmp_path: Path, read_log, monkeypatch: pytest.MonkeyPatch) -> None:
    import time

    logs.configure("driver", session_dir=tmp_path)
    telemetry.configure("driver", session_dir=tmp_path)
    fields = {"task_id": "cd", "function": "f", "call_site": "x.py:1", "attempt": 0}
    given_ids = {"trace_id": "1" * 32, "span_id": "2" * 16}
    log = logs.get_logger("tracedray.core.submission")
    with logs.task_context(task_id="ab" * 8, attempt=2), telemetry.span("outer"):
        # Its moment is taken now (time, task context, and the current span's ids for
        # fields that will name none); its fields come later.
        at, task, ids = time.time(), logs.info_context(), logs.current_trace_ids()
        log.info("task.submit", **fields)
        log.info("task.submit", **fields, **given_ids)
    assert task is not None and ids is not None

    def write() -> None:
        logs.write_info_at("tracedray.core.submission", "task.submit", at, task, ids,
                           **fields)
        logs.write_info_at("tracedray.core.submission", "task.submit", at, task, None,
                           **fields, **given_ids)

    writer = threading.Thread(target=write)
    writer.start()
    writer.join()
    *_, direct, direct_given, later, later_given = read_log(tmp_path)
    assert direct["trace_id"] and direct["span_id"]  # the line inside the span names it
    for now, deferred in ((direct, later), (direct_given, later_given)):
        assert list(deferred) == list(now)  # the same keys in the same order
        assert deferred.pop("timestamp") <= now.pop("timestamp")  # taken first
        assert deferred == now
    monkeypatch.setenv("TRACEDRAY_LOG_LEVEL", "warning")
    logs.configure("driver", session_dir=tmp_path / "quiet")
    assert logs.info_context() is None
