"""The reader half of the tracedray_spans fixture (the end-to-end test is the runtime's)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tracedray import telemetry
from tracedray.testing.pytest_plugin import FinishedSpans


def test_spans_from_other_processes_and_clear(tmp_path: Path, run_python) -> None:
    code = ("import pathlib\nfrom tracedray import telemetry\n"
            f"telemetry.configure('raylet', session_dir=pathlib.Path({str(tmp_path)!r}))\n"
            "with telemetry.span('worker.start'):\n    pass\n")
    assert run_python(code).returncode == 0
    telemetry.configure("driver", session_dir=tmp_path)
    with telemetry.span("task.submit"):
        pass
    collected = FinishedSpans(lambda: tmp_path / "traces")
    spans = collected.get_finished_spans()
    assert sorted(span.name for span in spans) == ["task.submit", "worker.start"]
    assert {span.resource.attributes["tracedray.component"] for span in spans} == {
        "raylet", "driver"}
    collected.clear()
    assert collected.get_finished_spans() == ()
    with telemetry.span("object.put"):
        pass
    assert [span.name for span in collected.get_finished_spans()] == ["object.put"]
    assert collected.warnings == []


def test_no_session_means_no_spans() -> None:
    collected = FinishedSpans(lambda: None)
    collected.clear()
    assert collected.get_finished_spans() == ()


def test_plugin_import_stays_light() -> None:
    code = ("import sys\nimport tracedray.testing.pytest_plugin\n"
            "heavy = [m for m in ('grpc', 'opentelemetry.sdk', 'tracedray.telemetry')"
            " if m in sys.modules]\nprint(heavy)\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=60, check=True)
    assert result.stdout.strip() == "[]"
