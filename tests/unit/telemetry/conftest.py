from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tracedray import telemetry
from tracedray.telemetry.append_file import read_data

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


def _trace_lines(session_dir: Path) -> list[str]:
    lines: list[str] = []
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
