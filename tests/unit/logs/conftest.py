from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tracedray import logs, telemetry
from tracedray.telemetry.append_file import read_data


@pytest.fixture(autouse=True)
def detached_logs(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Leave the process's loggers writing nowhere after each test."""
    monkeypatch.delenv("TRACEDRAY_LOG_LEVEL", raising=False)
    monkeypatch.delenv("OTEL_SDK_DISABLED", raising=False)
    yield
    logs.uninstall_output_capture()
    telemetry.shutdown()
    logs.configure("test-detached", session_dir=None)


@pytest.fixture
def read_log() -> Callable[[Path], list[dict[str, Any]]]:
    def read(session_dir: Path) -> list[dict[str, Any]]:
        (path,) = (session_dir / "logs").glob("*.jsonl")
        return [json.loads(line) for line in read_data(path).decode().splitlines()]

    return read
