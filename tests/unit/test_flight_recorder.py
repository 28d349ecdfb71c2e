"""The flight-recorder slot: what a worker writes before each task, read back as the
raylet reads it after a SIGKILL."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tracedray.core.protocol.flight_recorder import FlightRecorder, read_slot

TRACE = ("cd" * 16, 2**64 - 1, 1, "vendor=x")


@pytest.mark.parametrize("state", [
    {"task_id": "ab" * 16, "attempt": 2, "function": "Pinger.ping", "trace": TRACE,
     "started_at": 1764230000.123456},
    {"task_id": "ab" * 16, "attempt": 0, "function": "m.f", "trace": None, "started_at": 1.5},
    # What orjson refuses (an int beyond 64 bits, a lone surrogate) the stdlib writes.
    {"task_id": "ab" * 16, "attempt": 0, "function": "Pïng.\udcff",
     "trace": ("cd" * 16, 2**70, 1, ""), "started_at": 2.0},
])
def test_a_slot_reads_back_as_written(tmp_path: Path, state: dict[str, Any]) -> None:
    recorder = FlightRecorder(tmp_path / "slot")
    recorder.record({"task_id": "x" * 1000, "attempt": 9})  # a longer one before
    recorder.record(state)
    expected = {**state, "trace": list(state["trace"]) if state["trace"] else None}
    assert read_slot(tmp_path / "slot") == expected
    recorder.clear()
    assert read_slot(tmp_path / "slot") == {}
