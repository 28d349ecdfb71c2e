from __future__ import annotations

import sys
import threading
from pathlib import Path

from tracedray import logs, telemetry


def test_printed_lines_are_attributed_to_the_task(tmp_path: Path, read_log) -> None:
    telemetry.configure("worker", session_dir=tmp_path)
    logs.configure("worker", session_dir=tmp_path)
    seen: list[tuple[str, str, dict]] = []
    original_stdout = sys.stdout
    logs.install_output_capture(lambda stream, line, ctx: seen.append((stream, line, dict(ctx))))
    try:
        with telemetry.span("task.execute") as span, \
                logs.task_context(task_id="t-9", task_name="square"):
            print("hello", 42)
            print("to stderr", file=sys.stderr)
            sys.stdout.write("part one, ")
            sys.stdout.write("part two\nsecond line\n")
            sys.stdout.write("no newline yet")
            sys.stdout.flush()
        print("outside")
    finally:
        logs.uninstall_output_capture()
    assert sys.stdout is original_stdout
    outputs = [line for line in read_log(tmp_path) if line["event"] == "task.output"]
    assert [(o["stream"], o["line"]) for o in outputs] == [
        ("stdout", "hello 42"), ("stderr", "to stderr"), ("stdout", "part one, part two"),
        ("stdout", "second line"), ("stdout", "no newline yet"), ("stdout", "outside")]
    trace_id = format(span.get_span_context().trace_id, "032x")
    for record in outputs[:-1]:
        assert record["task_id"] == "t-9" and record["trace_id"] == trace_id
    assert "task_id" not in outputs[-1]
    assert seen[0] == ("stdout", "hello 42", {"task_id": "t-9", "task_name": "square",
                                              "attempt": "0"})
    assert logs.statistics().captured_lines >= 6


def test_partial_lines_do_not_mix_across_threads(tmp_path: Path, read_log) -> None:
    logs.configure("worker", session_dir=tmp_path)
    logs.install_output_capture()
    first_half_written = threading.Event()
    try:
        def other() -> None:
            with logs.task_context(task_id="thread"):
                sys.stdout.write("thread-")
                first_half_written.set()
                sys.stdout.write("line\n")

        sys.stdout.write("main-")
        thread = threading.Thread(target=other)
        thread.start()
        thread.join()
        assert first_half_written.is_set()
        sys.stdout.write("line\n")
    finally:
        logs.uninstall_output_capture()
    lines = [(r["line"], r.get("task_id")) for r in read_log(tmp_path)
             if r["event"] == "task.output"]
    assert lines == [("thread-line", "thread"), ("main-line", None)]


def test_a_failing_callback_never_reaches_the_printer(tmp_path: Path, read_log) -> None:
    logs.configure("worker", session_dir=tmp_path)

    def broken(stream: str, line: str, ctx: object) -> None:
        raise RuntimeError("callback bug")

    logs.install_output_capture(broken)
    try:
        print("still fine")
    finally:
        logs.uninstall_output_capture()
    assert [r["line"] for r in read_log(tmp_path) if r["event"] == "task.output"] == [
        "still fine"]
