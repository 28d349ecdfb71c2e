"""The session's trace index (telemetry/trace_index.py): keys found in lines, the writer's
progress through growing files, lookups with the unindexed tail, a corrupt index."""

from __future__ import annotations

import json
import os
import sqlite3
import stat
from pathlib import Path

import pytest

from tracedray.telemetry import index_reader
from tracedray.telemetry import trace_index as ti

TASK_A = "aa" * 16
TASK_B = "ab" * 16
TRACE = "0f" * 16


def span_line(task_id: str, trace_id: str = TRACE, start: int = 10, end: int = 20) -> str:
    span = {"traceId": trace_id, "spanId": "01" * 8, "name": "task.execute",
            "startTimeUnixNano": str(start), "endTimeUnixNano": str(end),
            "attributes": [{"key": "tracedray.task.id", "value": {"stringValue": task_id}},
                           {"key": "tracedray.actor.id", "value": {"stringValue": "cc" * 8}}]}
    return json.dumps({"resourceSpans": [{"resource": {"attributes": []},
                                          "scopeSpans": [{"spans": [span]}]}]},
                      separators=(",", ":"))


def log_line(event: str, **fields: str) -> str:
    return json.dumps({"timestamp": "2026-01-01T00:00:00.000001Z", "event": event, **fields},
                      separators=(",", ":"))


def session(tmp_path: Path) -> Path:
    for kind in ti.KINDS:
        (tmp_path / kind).mkdir()
    return tmp_path


def append(path: Path, *lines: str) -> None:
    with open(path, "a") as out:
        out.write("".join(line + "\n" for line in lines))


def test_span_line_keys_name_every_id_and_the_trace() -> None:
    keys = ti.span_line_keys(span_line(TASK_A.upper()).encode())
    assert keys == {ti.key("task", TASK_A), ti.key("actor", "cc" * 8), ti.key("trace", TRACE)}
    assert ti.span_line_times(span_line(TASK_A, start=5, end=9).encode()) == (5, 9)
    store = span_line(TASK_A).replace('"name":"task.execute"', '"name":"object.seal"')
    assert ti.name_key("object.") in ti.span_line_keys(store.encode())


def test_log_line_keys_and_clock_lines() -> None:
    assert ti.log_line_keys(log_line("x", task_id=TASK_A, actor_id="dd").encode()) == {
        ti.key("task", TASK_A), ti.key("actor", "dd")}
    assert ti.CLOCK_KEY in ti.log_line_keys(log_line("node.clock_offset").encode())
    assert ti.names_node(log_line("x", node_id="abc").encode())
    assert ti.log_line_time(log_line("x").encode()) == 1767225600000001000


def test_complete_lines_leave_a_line_being_written() -> None:
    data = b'{"a":1}\n\n{"b":2}\n{"c":'
    assert list(ti.complete_lines(data, 100)) == [(100, b'{"a":1}'), (109, b'{"b":2}')]
    assert ti.complete_end(data) == 17
    assert ti.complete_end(b'{"a":1}\n\0\0\n') == 8  # a reserved tail ends the data


def test_writer_indexes_new_lines_only_and_reader_reads_only_them(tmp_path: Path) -> None:
    root = session(tmp_path)
    traces = root / "traces" / "worker-42.jsonl"
    append(traces, span_line(TASK_A), *(span_line(f"{i:032x}") for i in range(50)))
    writer = ti.IndexWriter(root)
    first = writer.update()
    assert first.lines == 51 and not first.pending
    assert writer.update().lines == 0  # nothing new
    append(traces, span_line(TASK_A, start=30, end=40))
    assert writer.update().lines == 1
    index, why = index_reader.open_index(root)
    assert index is not None, why
    found = list(index.lines(ti.TRACES, [ti.key("task", TASK_A)]))
    assert [name for name, _ in found] == ["worker-42.jsonl"] * 2
    assert index.statistics().lines_read == 2  # of 52
    assert index.ids_with_prefix("task", TASK_A[:6]) == [TASK_A]
    assert index.ids_with_prefix("task", TASK_A[:5]) == [TASK_A]  # half a byte too
    assert index.resolve("task", TASK_A[:6]) == TASK_A
    assert index.resolve("task", "0000") == "0000"  # 50 tasks start so: left as it is
    assert index.similar_ids("task", TASK_A[:16] + "0" * 16) == [TASK_A]  # a mistyped end
    assert index.files_of_pid(ti.TRACES, 42) == [traces]
    index.close()
    writer.close()


def test_reader_scans_what_the_writer_has_not_indexed(tmp_path: Path) -> None:
    root = session(tmp_path)
    logs = root / "logs" / "driver-7.jsonl"
    append(logs, log_line("a", node_id="ab12"), log_line("b", task_id=TASK_A))
    writer = ti.IndexWriter(root)
    writer.update()
    append(logs, log_line("c", task_id=TASK_A), log_line("d", task_id=TASK_B))
    with open(logs, "a") as out:
        out.write('{"half":')  # still being written
    index, _ = index_reader.open_index(root, up_to_date=False)  # as in a read-only session
    assert index is not None
    events = [json.loads(raw)["event"] for _, raw in index.lines(ti.LOGS, [ti.key("task", TASK_A)])]
    assert events == ["b", "c"]
    assert index.statistics().tail_lines_scanned == 2
    clock = [json.loads(raw)["event"] for _, raw in index.lines(ti.LOGS, [ti.CLOCK_KEY])]
    assert clock == ["a"]  # the first line naming the node, once per file
    index.close()
    writer.close()


def test_budget_leaves_the_rest_pending(tmp_path: Path) -> None:
    root = session(tmp_path)
    append(root / "traces" / "worker-1.jsonl", *(span_line(f"{i:032x}") for i in range(100)))
    writer = ti.IndexWriter(root)
    update = writer.update(max_bytes=2000)
    assert update.pending and 0 < update.lines < 100
    while writer.update(max_bytes=2000).pending:
        pass
    conn = sqlite3.connect(ti.index_path(root))
    assert conn.execute("SELECT count(*) FROM lines").fetchone() == (100,)
    conn.close()
    writer.close()


def test_an_update_indexes_every_file_in_one_transaction(tmp_path: Path) -> None:
    """The files' keys share the index's pages: one commit for all of them rewrites
    each page once. A failure part-way rolls every file back, and the next update
    indexes them all."""
    root = session(tmp_path)
    append(root / "traces" / "driver-1.jsonl", span_line(TASK_A))
    append(root / "traces" / "worker-2.jsonl", span_line(TASK_B))
    append(root / "logs" / "worker-2.jsonl", log_line("x", task_id=TASK_A))
    writer = ti.IndexWriter(root)
    statements: list[str] = []
    conn = writer._connection(ti.IndexUpdate())
    conn.set_trace_callback(statements.append)
    update = writer.update()
    assert update.lines == 3 and not update.pending and not update.error
    assert [s for s in statements if s.startswith(("BEGIN", "COMMIT"))] == [
        "BEGIN IMMEDIATE", "COMMIT"]
    statements.clear()
    assert writer.update().lines == 0 and statements == [  # nothing new: nothing written
        "SELECT kind, name, indexed_to FROM files"]
    conn.set_trace_callback(None)
    append(root / "traces" / "driver-1.jsonl", span_line(TASK_B))
    append(root / "logs" / "worker-2.jsonl", "{not json but a line}")
    def trouble() -> None:
        raise OSError("disk trouble")

    conn.create_function("trouble", 0, trouble)
    conn.execute("CREATE TEMP TRIGGER fail BEFORE INSERT ON lines WHEN NEW.file_id = "
                 "(SELECT id FROM files WHERE kind = 'logs') BEGIN SELECT trouble(); END")
    failed = writer.update()  # the traces file went in first, then the logs file failed
    assert "user-defined function raised exception" in failed.error and failed.lines == 0
    assert conn.execute("SELECT count(*) FROM lines").fetchone() == (3,)  # none of the new
    conn.execute("DROP TRIGGER fail")
    assert writer.update().lines == 2
    writer.close()


def test_a_truncated_file_is_indexed_again(tmp_path: Path) -> None:
    root = session(tmp_path)
    path = root / "traces" / "worker-1.jsonl"
    append(path, span_line(TASK_A), span_line(TASK_B))
    writer = ti.IndexWriter(root)
    writer.update()
    path.write_text(span_line(TASK_B) + "\n")
    writer.update()
    index, _ = index_reader.open_index(root)
    assert index is not None
    assert list(index.lines(ti.TRACES, [ti.key("task", TASK_A)])) == []
    assert len(list(index.lines(ti.TRACES, [ti.key("task", TASK_B)]))) == 1
    index.close()
    writer.close()


def test_no_index_and_a_corrupt_index_are_reported_not_raised(tmp_path: Path) -> None:
    root = session(tmp_path)
    index, why = index_reader.open_index(root)
    assert index is None and "no trace index" in why
    ti.index_path(root).write_bytes(b"not a database, just bytes" * 100)
    index, why = index_reader.open_index(root, up_to_date=False)
    assert index is None and "unusable" in why
    append(root / "traces" / "worker-1.jsonl", span_line(TASK_A))
    update = ti.IndexWriter(root).update()  # the writer builds it anew
    assert update.rebuilt and update.lines == 1
    assert (root / (ti.INDEX_NAME + ".corrupt")).exists()
    index, why = index_reader.open_index(root)
    assert index is not None, why
    index.close()


def test_create_index_makes_the_session_indexed(tmp_path: Path) -> None:
    root = session(tmp_path)
    assert ti.create_index(root) == ""
    index, why = index_reader.open_index(root, up_to_date=False)
    assert index is not None, why
    append(root / "traces" / "worker-1.jsonl", span_line(TASK_A))  # no writer has run
    assert len(list(index.lines(ti.TRACES, [ti.key("task", TASK_A)]))) == 1
    assert index.statistics().tail_lines_scanned == 1
    assert index.ids_with_prefix("task", TASK_A[:4]) == []
    index.close()
    index, _ = index_reader.open_index(root)  # a reader that may write catches up first
    assert index is not None
    assert index.ids_with_prefix("task", TASK_A[:4]) == [TASK_A]
    assert len(list(index.lines(ti.TRACES, [ti.key("task", TASK_A)]))) == 1
    assert index.statistics().tail_lines_scanned == 0
    index.close()


def test_create_index_is_owner_only_whatever_the_umask(tmp_path: Path) -> None:
    root = session(tmp_path)
    previous = os.umask(0o022)  # a CLI or driver that starts a node keeps the user's umask
    try:
        assert ti.create_index(root) == ""
    finally:
        os.umask(previous)
    assert stat.S_IMODE((root / ti.INDEX_NAME).stat().st_mode) == 0o600


def test_a_reader_that_may_write_rebuilds_a_corrupt_index_and_says_so(tmp_path: Path) -> None:
    root = session(tmp_path)
    append(root / "traces" / "worker-1.jsonl", span_line(TASK_A))
    ti.index_path(root).write_bytes(b"garbage" * 1000)
    index, note = index_reader.open_index(root)
    assert index is not None and "rebuilt" in note
    assert index.ids_with_prefix("task", TASK_A[:8]) == [TASK_A]
    index.close()


def test_an_index_damaged_after_it_opened_is_read_around(tmp_path: Path) -> None:
    root = session(tmp_path)
    append(root / "traces" / "worker-1.jsonl", *(span_line(f"{i:032x}") for i in range(400)),
           span_line(TASK_A))
    writer = ti.IndexWriter(root)
    while writer.update().pending:
        pass
    writer.close()  # the last connection: everything is in the main file
    index, why = index_reader.open_index(root, up_to_date=False)
    assert index is not None, why
    path = ti.index_path(root)
    data = bytearray(path.read_bytes())
    data[8192:] = b"\x5a" * (len(data) - 8192)
    path.write_bytes(bytes(data))
    found = list(index.lines(ti.TRACES, [ti.key("task", TASK_A)]))
    assert len(found) == 1 and index.errors  # scanned, and said so
    index.close()


def test_keys_move_on_level_by_level_and_are_found_in_any(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """New keys wait in ``recent_keys`` until MERGE_ROWS of them are there, then move to
    ``mid_keys`` at once, and from there to ``keys`` once it holds MID_ROWS; a reader
    finds a line, a prefix and a dropped file's absence whichever table holds its keys."""
    monkeypatch.setattr(ti, "MERGE_ROWS", 10)
    monkeypatch.setattr(ti, "MID_ROWS", 20)
    root = session(tmp_path)
    path = root / "traces" / "worker-1.jsonl"
    append(path, span_line(TASK_A))  # 3 keys: task, actor, trace
    writer = ti.IndexWriter(root)
    assert writer.update().merged == 0
    conn = sqlite3.connect(ti.index_path(root))

    def counts() -> tuple[int, ...]:
        return tuple(conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]  # noqa: S608
                     for table in ti.KEY_TABLES)

    assert counts() == (0, 0, 3)
    append(path, *(span_line(f"{i:032x}") for i in range(3)))  # 9 more: 12 >= 10
    assert writer.update().merged == 12
    assert counts() == (0, 12, 0)  # a row per key and line
    append(path, *(span_line(f"{i:032x}") for i in range(3, 6)))  # 9: still recent
    writer.update()
    assert counts() == (0, 12, 9)
    append(path, span_line(TASK_B))  # 12 recent >= 10 -> 24 mid >= 20 -> keys
    assert writer.update().merged == 12 + 24
    assert counts() == (24, 0, 0)
    append(path, span_line(TASK_A, start=30, end=40))
    writer.update()
    assert counts() == (24, 0, 3)  # TASK_A's keys in two tables now
    index, _ = index_reader.open_index(root, up_to_date=False)
    assert index is not None
    found = list(index.lines(ti.TRACES, [ti.key("task", TASK_A), ti.key("task", TASK_B)]))
    assert [json.loads(raw)["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
            ["startTimeUnixNano"] for _, raw in found] == ["10", "10", "30"]
    assert len(list(index.lines(ti.TRACES, [ti.key("trace", TRACE)]))) == 9  # each once
    assert index.ids_with_prefix("task", "a") == [TASK_A, TASK_B]
    assert index.statistics().tail_lines_scanned == 0
    index.close()
    assert writer.forget(ti.TRACES, path.name, path.stat().st_size, "test") == ""
    assert counts() == (0, 0, 0)
    conn.close()
    writer.close()
