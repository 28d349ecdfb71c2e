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


def test_start_test_hides_what_ended_before_and_its_descendants(tmp_path: Path) -> None:
    from opentelemetry import trace

    telemetry.configure("driver", session_dir=tmp_path)
    collected = FinishedSpans(lambda: tmp_path / "traces")
    with telemetry.span("task.submit") as earlier:  # an earlier test's task, not waited for
        pass
    earlier_context = trace.set_span_in_context(
        trace.NonRecordingSpan(earlier.get_span_context()))
    collected.start_test()
    # the leftover task runs now, and submits a task of its own
    with telemetry.span("task.execute", context=earlier_context) as leftover, \
            telemetry.span("task.submit"):
        pass
    leftover_context = trace.set_span_in_context(
        trace.NonRecordingSpan(leftover.get_span_context()))
    with telemetry.span("object.get", context=leftover_context):  # a grandchild, later
        pass
    with telemetry.span("object.put"):  # this test's own
        pass
    spans = collected.get_finished_spans()
    assert [span.name for span in spans] == ["object.put"], spans.tree()
    assert collected.statistics().hidden_earlier_work == 3
    # clear() keeps its meaning: a mark in time, and a task submitted before it still
    # shows its execution after it (that is this test's work)
    with telemetry.span("task.submit") as mine:
        pass
    collected.clear()
    mine_context = trace.set_span_in_context(trace.NonRecordingSpan(mine.get_span_context()))
    with telemetry.span("task.execute", context=mine_context):
        pass
    assert [span.name for span in collected.get_finished_spans()] == ["task.execute"]
    assert collected.one("task.execute").parent.span_id == mine.get_span_context().span_id


def test_reads_are_incremental_and_a_new_folder_starts_afresh(tmp_path: Path) -> None:
    folders = {"now": tmp_path / "one"}
    for name in ("one", "two"):
        (tmp_path / name).mkdir()
    telemetry.configure("driver", session_dir=tmp_path / "one")
    collected = FinishedSpans(lambda: folders["now"] / "traces")
    with telemetry.span("object.put"):
        pass
    assert collected.names() == {"object.put": 1}
    assert collected.names() == {"object.put": 1}  # read again: counted once
    telemetry.configure("driver", session_dir=tmp_path / "two")
    folders["now"] = tmp_path / "two"
    with telemetry.span("object.get"):
        pass
    assert collected.names() == {"object.get": 1}
