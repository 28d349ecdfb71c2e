from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tracedray import telemetry
from tracedray.telemetry.append_file import read_data
from tracedray.telemetry.spool_convert import sync_traces_dir

OTEL_VARIABLES = (
    "OTEL_SDK_DISABLED", "OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES", "OTEL_TRACES_SAMPLER",
    "OTEL_TRACES_SAMPLER_ARG", "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_PROTOCOL",
    "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "TRACEDRAY_TRACE_FILES",
)


@pytest.fixture(autouse=True)
def clean_telemetry(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Each test starts unconfigured, with no OTEL_* variables leaking in from the host."""
    for name in OTEL_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    telemetry.shutdown()
    yield
    telemetry.shutdown()


def _run_python(code: str, *, env: dict[str, str] | None = None,
               timeout: float = 60) -> subprocess.CompletedProcess[str]:
    child_env = {k: v for k, v in os.environ.items() if k not in OTEL_VARIABLES}
    child_env.update(env or {})
    return subprocess.run([sys.executable, "-c", code], env=child_env, capture_output=True,
                          text=True, timeout=timeout, check=False)


def _sigkill_after(code: str, ready_line: str) -> int:
    """Run ``code`` until it prints ``ready_line``, then SIGKILL it; returns its pid.

    The code should block afterwards (e.g. ``sys.stdin.read()``) so that no flush or
    exit handler can run before the kill.
    """
    child = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == ready_line
        child.send_signal(signal.SIGKILL)
        assert child.wait(timeout=30) == -signal.SIGKILL
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    return child.pid


def _trace_lines(session_dir: Path) -> list[str]:
    lines: list[str] = []
    sync_traces_dir(session_dir / "traces")  # what every reader does first: spools -> lines
    for path in sorted((session_dir / "traces").glob("*.jsonl")):
        lines.extend(read_data(path).decode().splitlines())
    return lines


@pytest.fixture
def run_python():  # type: ignore[no-untyped-def]
    """Run Python code in a fresh interpreter with a clean OTEL_* environment."""
    return _run_python


@pytest.fixture
def trace_lines():  # type: ignore[no-untyped-def]
    """All lines of all trace files under a session directory."""
    return _trace_lines


@pytest.fixture
def sigkill_after():  # type: ignore[no-untyped-def]
    """Run code in a child until it prints a line, then SIGKILL it (returns the pid)."""
    return _sigkill_after

