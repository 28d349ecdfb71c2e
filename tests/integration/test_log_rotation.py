"""Bounded disk on a real cluster (issue 24): a session driven past tiny rotation and
retention limits keeps working; its log and trace files rotate into parts that are
compressed (zstd, seekable) and still read by `trace` and `logs --task`; the session
limit drops the oldest parts, says so in the agent's log, and readers say that range is
gone instead of failing."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from tracedray.cli.app import app
from tracedray.cli.tracestore.logs import read_logs
from tracedray.core.session import SessionPaths
from tracedray.telemetry import line_file
from tracedray.telemetry.append_file import read_data

pytestmark = pytest.mark.integration

ROTATION_BYTES = 16 << 10
# Spools (reserved ahead of their data: ~1.5 MB for this cluster) and the index count too.
SESSION_MAX_BYTES = 3_000_000
PAD = "p" * 1500  # each volume task logs this much, so parts fill fast
WAIT_S = 60.0


@contextmanager
def rotating_cluster(monkeypatch: pytest.MonkeyPatch, **env: str) -> Iterator[Any]:
    import tracedray

    monkeypatch.setenv("TRACEDRAY_LOG_TO_DRIVER", "false")
    # A loaded machine must not put the agent's rounds off: rotation happens there.
    monkeypatch.setenv("TRACEDRAY_TELEMETRY_AGENT_MAX_DEFER_S", "0")
    monkeypatch.setenv("TRACEDRAY_LOG_ROTATION_BYTES", str(ROTATION_BYTES))
    for name, value in env.items():
        monkeypatch.setenv(f"TRACEDRAY_{name}", value)
    tracedray.init(num_cpus=2, object_store_memory=128 << 20)
    try:
        yield tracedray
    finally:
        tracedray.shutdown()


def _cli(*args: str) -> Any:
    result = CliRunner().invoke(app, list(args))
    assert result.exit_code == 0, result.output
    return result


def _until(what: str, check: Any) -> None:
    deadline = time.monotonic() + WAIT_S
    while not check():
        assert time.monotonic() < deadline, f"not within {WAIT_S}s: {what}"
        time.sleep(0.25)


def _holding(folder: Path, text: bytes) -> list[Path]:
    """The line files (by plain name) whose uncompressed lines hold ``text``."""
    return [path for path in line_file.line_files(folder) if text in line_file.read_all(path)]


def _compressed(path: Path) -> bool:
    return not path.exists() and line_file.stored_path(path) is not None


def _volume(ray: Any, batches: int, pad_bytes: int = len(PAD)) -> None:
    @ray.remote
    def pad(i: int) -> int:
        print(PAD[:1] * pad_bytes, i)
        return i

    for batch in range(batches):
        assert ray.get([pad.remote(batch * 20 + i) for i in range(20)]) == list(
            range(batch * 20, batch * 20 + 20))


def _marked(ray: Any, text: str) -> str:
    @ray.remote
    def marked(text: str) -> str:
        print(text)
        return text

    ref = marked.remote(text)
    assert ray.get(ref) == text
    return str(ref.task_id().hex())


def test_trace_and_logs_read_lines_that_live_in_compressed_parts(
        no_leaks: None, monkeypatch: pytest.MonkeyPatch) -> None:
    with rotating_cluster(monkeypatch, LOG_ROTATION_COMPRESS_DELAY_S="0") as ray:
        session: SessionPaths = ray.api.calls._require_cluster().session
        _volume(ray, 2)
        middle_id = _marked(ray, "middle-marker")
        _volume(ray, 4)
        _until("the middle task's log line in a compressed part", lambda: any(
            _compressed(p) for p in _holding(session.logs_dir, b"middle-marker")))
        _until("the middle task's spans in a compressed part", lambda: any(
            _compressed(p) for p in _holding(session.traces_dir, middle_id.encode())))
        out = _cli("logs", "--task", middle_id[:12]).stdout
        assert "middle-marker" in out
        story = json.loads(_cli("trace", middle_id, "--format", "json").stdout)
        assert story["task_id"] == middle_id and story["final_state"] == "FINISHED"
        assert [a["outcome"] for a in story["attempts"]] and story["trace_id"]
        timeline = _cli("timeline", "--task", middle_id, "--output", "-").stdout
        assert "task.execute" in timeline and middle_id in timeline
        assert _cli("memory", "--timeline", "--format", "json").exit_code == 0
        # Reading every file (a session without its index) finds the same line.
        scanned = read_logs(session.logs_dir, task_id=middle_id)
        assert "middle-marker" in {r.get("line") for r in scanned.records}, scanned.warnings


def test_over_the_session_limit_the_oldest_parts_go_and_readers_say_so(
        no_leaks: None, monkeypatch: pytest.MonkeyPatch) -> None:
    with rotating_cluster(monkeypatch, LOG_ROTATION_COMPRESS_DELAY_S="3600",
                          SESSION_MAX_BYTES=str(SESSION_MAX_BYTES)) as ray:
        session: SessionPaths = ray.api.calls._require_cluster().session
        first_id = _marked(ray, "first-marker")
        _until("the first task's line in a file", lambda: _holding(
            session.logs_dir, b"first-marker"))
        for _ in range(40):
            _volume(ray, 1, pad_bytes=8000)
            if not _holding(session.logs_dir, b"first-marker"):
                break
        _until("the first task's log line dropped", lambda: not _holding(
            session.logs_dir, b"first-marker"))

        def dropped() -> list[dict[str, Any]]:  # the agent's log says what it dropped
            return [json.loads(line) for path in line_file.line_files(session.logs_dir)
                    if path.name.startswith("agent-")
                    for line in read_data(path).splitlines()
                    if b"telemetry.retention_dropped" in line]

        _until("the agent's log line about what it dropped", dropped)
        assert {d["reason"] for d in dropped()} == {"session_max_bytes"}
        assert all(line_file.parse_name(d["file"]).number for d in dropped())  # parts only
        result = CliRunner().invoke(app, ["logs", "--task", first_id])
        assert "dropped" in result.output and "gone" in result.output, result.output
        # The session keeps working, and what it logs now is there.
        last_id = _marked(ray, "last-marker")
        assert "last-marker" in _cli("logs", "--task", last_id).stdout
