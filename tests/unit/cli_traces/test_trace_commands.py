"""The `trace` and `timeline` commands through Typer's CliRunner, on hand-made sessions."""

from __future__ import annotations

import json
import socket

from cli_traces_builders import TASK, TRACE, sigkill_retry_scenario
from typer.testing import CliRunner

from tracedray.cli.app import app

runner = CliRunner()


def write(session) -> None:
    sigkill_retry_scenario().write_session(session.traces_dir, session.logs_dir)


def test_trace_tells_the_sigkill_and_the_retry(session_root):
    write(session_root)
    result = runner.invoke(app, ["trace", TASK])
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "FINISHED" in out and f"trace {TRACE}" in out
    assert "submitted by driver pid 100 on head (10.0.0.1) from demo.py:12 in main" in out
    assert "worker pid 201 died: SIGKILL (exit 137): killed by the OS, often the OOM killer; " \
           "node memory was 96% used" in out
    assert "retry: attempt 1 of 4" in out and "stdout: done" in out
    assert out.index("SIGKILL") < out.index("retry") < out.index("stdout: done")


def test_trace_json_format(session_root):
    write(session_root)
    result = runner.invoke(app, ["trace", TASK, "--format", "json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["task_id"] == TASK and data["final_state"] == "FINISHED"
    assert [a["outcome"] for a in data["attempts"]] == ["worker_died", "returned"]


def test_unknown_task_suggests_close_matches(session_root):
    write(session_root)
    typo = TASK[:16] + "1" * (len(TASK) - 16)
    result = runner.invoke(app, ["trace", typo])
    assert result.exit_code == 1
    assert f"no task with id {typo}; did you mean: {TASK}?" in result.stderr
    prefix = runner.invoke(app, ["trace", TASK[:8], "--format", "json"])  # a unique prefix
    assert prefix.exit_code == 0, prefix.output
    assert json.loads(prefix.stdout)["task_id"] == TASK
    as_json = runner.invoke(app, ["trace", "beef", "--format", "json"])
    assert as_json.exit_code == 1
    assert json.loads(as_json.stdout)["error"] == "no task with id beef"


def test_no_session_says_where_it_looked(tmp_path, monkeypatch):
    monkeypatch.setenv("TRACEDRAY_TEMP_DIR", str(tmp_path / "empty"))
    result = runner.invoke(app, ["trace", TASK])
    assert result.exit_code == 1
    assert "no tracedray session found under" in result.stderr
    assert str(tmp_path / "empty") in result.stderr.replace("\n", "")
    timeline = runner.invoke(app, ["timeline"])
    assert timeline.exit_code == 1 and "no tracedray session found" in timeline.stderr


def test_address_picks_the_session(session_root):
    write(session_root)
    assert runner.invoke(app, ["trace", TASK, "--address", "127.0.0.1:6380"]).exit_code == 0
    missing = runner.invoke(app, ["trace", TASK, "--address", "10.9.9.9:1"])
    assert missing.exit_code == 1
    assert "no session folder for a cluster at 10.9.9.9:1" in missing.stderr


def test_dead_jaeger_warns_and_falls_back_to_files(session_root, monkeypatch):
    write(session_root)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    monkeypatch.setenv("TRACEDRAY_JAEGER_URL", url)
    result = runner.invoke(app, ["trace", TASK])
    assert result.exit_code == 0, result.output
    assert f"Jaeger at {url} did not answer" in result.stderr
    assert "falling back to the session files" in result.stderr
    assert f"{url}/trace/{TRACE}" in result.stdout and "SIGKILL" in result.stdout


def test_live_jaeger_is_read_when_the_files_are_empty(session_root, jaeger):
    jaeger.serve("/api/v3/services", "api_v3_services.json")
    jaeger.serve("/api/v3/traces?tracedray-worker", "api_v3_find_traces_task.json")
    result = runner.invoke(app, ["trace", TASK, "--jaeger", jaeger.url])
    assert result.exit_code == 0, result.output
    assert "SIGKILL (exit 137)" in result.stdout
    assert any(path == "/api/v3/traces" for path, _ in jaeger.requests)


def test_jaeger_is_asked_for_the_indexed_trace_alone(session_root, jaeger):
    from tracedray.telemetry.trace_index import create_index

    write(session_root)
    create_index(session_root.root)  # (the unindexed case too: this is about the index)
    jaeger.serve(f"/api/v3/traces/{TRACE}", "api_v3_get_trace_minimal.json")
    result = runner.invoke(app, ["trace", TASK, "--jaeger", jaeger.url])
    assert result.exit_code == 0, result.output
    assert [path for path, _ in jaeger.requests] == [f"/api/v3/traces/{TRACE}"]
    assert "SIGKILL" in result.stdout


def test_timeline_writes_chrome_trace(session_root, tmp_path):
    write(session_root)
    target = tmp_path / "timeline.json"
    result = runner.invoke(app, ["timeline", "--output", str(target)])
    assert result.exit_code == 0, result.output
    document = json.loads(target.read_text())
    phases = {event["ph"] for event in document["traceEvents"]}
    assert {"M", "X", "s", "f"} <= phases
    assert "wrote" in result.stderr and str(target) in result.stderr.replace("\n", "")
    only = runner.invoke(app, ["timeline", "--task", TASK, "--output", "-"])
    assert only.exit_code == 0
    assert json.loads(only.stdout)["otherData"]["task_id"] == TASK
    unknown = runner.invoke(app, ["timeline", "--task", TASK[:16] + "1" * 8, "-o", "-"])
    assert unknown.exit_code == 1 and f"did you mean: {TASK}" in unknown.stderr
    prefix = runner.invoke(app, ["timeline", "--task", TASK[:6], "-o", "-"])
    assert prefix.exit_code == 0 and json.loads(prefix.stdout)["otherData"]["task_id"] == TASK
