"""Rotation, compression and retention acted out on a session folder (rotation_io.py):
the index keeps naming a line through its file's rotation and compression, forgets a
dropped part and says so, and the OTLP export cursor follows its file into the part."""

from __future__ import annotations

import json
from pathlib import Path

from tracedray.telemetry import index_reader, line_file
from tracedray.telemetry import trace_index as ti
from tracedray.telemetry.rotation import Limits
from tracedray.telemetry.rotation_io import Rotator

TASK_A = "aa" * 16
TASK_B = "bb" * 16


def log_line(task_id: str, number: int) -> str:
    return json.dumps({"timestamp": "2026-01-01T00:00:00.000001Z", "event": "task.output",
                       "task_id": task_id, "line": f"{number} " + "x" * 200},
                      separators=(",", ":")) + "\n"


def lines_of(root: Path, task_id: str) -> list[tuple[str, bytes]]:
    index, _ = index_reader.open_index(root)
    assert index is not None
    try:
        return list(index.lines(ti.LOGS, [ti.key("task", task_id)]))
    finally:
        index.close()


def test_a_line_stays_found_through_rotation_compression_and_is_gone_after_a_drop(
        tmp_path: Path) -> None:
    for kind in ti.KINDS:
        (tmp_path / kind).mkdir()
    ti.create_index(tmp_path)
    current = tmp_path / "logs" / "worker-7.jsonl"
    current.write_text("".join(log_line(TASK_A, n) for n in range(50)))
    cursor = tmp_path / "export" / "abc" / "logs" / "worker-7.jsonl.offset"
    cursor.parent.mkdir(parents=True)
    cursor.write_text(f"{1000:020d}\n")
    rotator = Rotator(tmp_path, Limits(rotation_bytes=4096, backup_count=10,
                                      compress_delay_s=0.0, session_max_bytes=1 << 40))
    try:
        first = rotator.run_once()
        assert (first.rotated, first.compressed, first.warnings) == (1, 0, [])
        part = tmp_path / "logs" / "worker-7.000001.jsonl"
        assert part.exists() and not current.exists()
        # The cursor went with the file: the part goes on from 1000, a new file from 0.
        assert (cursor.parent / "worker-7.000001.jsonl.offset").read_text().strip() == \
            f"{1000:020d}"
        with open(current, "a") as out:
            out.write(log_line(TASK_B, 0))
        second = rotator.run_once()
        assert second.compressed == 1 and not part.exists()
        assert (tmp_path / "logs" / "worker-7.000001.jsonl.zst").exists()
        found = lines_of(tmp_path, TASK_A)
        assert [name for name, _ in found] == ["worker-7.000001.jsonl"] * 50
        assert all(json.loads(raw)["task_id"] == TASK_A for _, raw in found)
        later = [json.loads(raw)["line"] for _, raw in lines_of(tmp_path, TASK_B)]
        assert later == ["0 " + "x" * 200]
        assert ti.pid_of("worker-7.000001.jsonl") == 7
    finally:
        rotator.close()

    tight = Rotator(tmp_path, Limits(rotation_bytes=1 << 20, backup_count=10,
                                     compress_delay_s=0.0, session_max_bytes=1))
    try:
        dropped = tight.run_once().dropped
        assert [(d.kind, d.name, d.reason) for d in dropped] == [
            ("logs", "worker-7.000001.jsonl", "session_max_bytes")]
        assert tight.statistics().dropped == 1
    finally:
        tight.close()
    assert line_file.stored_path(tmp_path / "logs" / "worker-7.000001.jsonl") is None
    assert lines_of(tmp_path, TASK_A) == []
    assert len(lines_of(tmp_path, TASK_B)) == 1  # the current file is never dropped
    index, _ = index_reader.open_index(tmp_path)
    assert index is not None
    try:
        note = index.gone(ti.LOGS)
    finally:
        index.close()
    assert "1 older logs part(s)" in note and "50 lines" in note and "gone" in note
