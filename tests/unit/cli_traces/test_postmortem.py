"""The post-mortem view: what a stopped cluster's files say was held, by whom, as of when."""

from __future__ import annotations

import json
from pathlib import Path

from cli_traces_builders import DRIVER, MS, NODE_A, RAYLET_A, T0, WORKER_1, Recorder
from typer.testing import CliRunner

from tracedray._proto.v1 import core_worker_pb2, gcs_pb2
from tracedray.cli import postmortem
from tracedray.cli.app import app
from tracedray.core.gcs.storage.sqlite import DB_FILE_NAME, SqliteStorage
from tracedray.telemetry import attributes as attr

MB = 1 << 20
TASK_T = "7" * 48  # a task id (24 bytes, as hex)
PUT_1 = "1" * 48 + "80000000"  # put ids: the index has its high bit set
PUT_2 = "2" * 48 + "80000000"
RETURN_1 = TASK_T + "00000001"  # the task's first return
RETURN_2 = "8" * 48 + "00000001"  # a return whose submission nobody recorded


def _seal(rec: Recorder, at_ms: float, oid: str, size: int, used: int, site: str) -> None:
    rec.span(RAYLET_A, "object.seal", at_ms, at_ms + 1, {
        attr.OBJECT_ID: oid, attr.OBJECT_SIZE: size, attr.NODE_ID: NODE_A,
        attr.STORE_USED: used, attr.STORE_CAPACITY: 100 * MB, attr.OBJECT_CALL_SITE: site,
        attr.OBJECT_COPY: "primary"})


def _free(rec: Recorder, at_ms: float, oid: str, size: int, used: int) -> None:
    rec.span(RAYLET_A, "object.free", at_ms, at_ms + 1, {
        attr.OBJECT_ID: oid, attr.OBJECT_SIZE: size, attr.NODE_ID: NODE_A,
        attr.STORE_USED: used, attr.STORE_CAPACITY: 100 * MB})


def died_of_a_full_store() -> Recorder:
    """The driver puts two objects and a task returns one; it frees its second put, the
    store refuses a 50 MB put, the driver exits with code 1 and its end frees the rest."""
    rec = Recorder()
    rec.span(DRIVER, "object.put", 0, 1, {attr.OBJECT_ID: PUT_1, attr.OBJECT_SIZE: 40 * MB,
                                          attr.OBJECT_LOCATION: "shm", attr.NODE_ID: NODE_A,
                                          attr.OBJECT_CALL_SITE: "job.py:4 in main"})
    _seal(rec, 0, PUT_1, 40 * MB, 40 * MB, "job.py:4 in main")
    rec.span(DRIVER, "object.put", 2, 3, {attr.OBJECT_ID: PUT_2, attr.OBJECT_SIZE: 5 * MB,
                                          attr.OBJECT_LOCATION: "shm", attr.NODE_ID: NODE_A,
                                          attr.OBJECT_CALL_SITE: "job.py:5 in main"})
    _seal(rec, 2, PUT_2, 5 * MB, 45 * MB, "job.py:5 in main")
    rec.span(DRIVER, "task.submit", 4, 5, {attr.TASK_ID: TASK_T,
                                           attr.TASK_CALL_SITE: "job.py:6 in main"})
    _seal(rec, 10, RETURN_1, 30 * MB, 75 * MB, "job.py:6 in main")
    _seal(rec, 11, RETURN_2, 1 * MB, 76 * MB, "job.py:7 in main")
    _free(rec, 20, PUT_2, 5 * MB, 71 * MB)  # the driver dropped it: freed before its end
    rec.log(RAYLET_A, 30, "object store full", object_id="9" * 56, size=50 * MB,
            node_id=NODE_A, used=71 * MB, capacity=100 * MB, reason="no room")
    rec.log(DRIVER, 40, "process.exit", exit_code=1, exit_code_source="exception")
    _free(rec, 41, PUT_1, 40 * MB, 31 * MB)  # caused by the driver's end: not counted
    _free(rec, 42, RETURN_1, 30 * MB, 1 * MB)
    rec.span(RAYLET_A, "worker.start", 1, 2, {attr.WORKER_ID: "w1", attr.WORKER_PID: 201,
                                              attr.NODE_ID: NODE_A})
    rec.span(RAYLET_A, "worker.exit", 45, 46, {attr.WORKER_ID: "w1", attr.WORKER_PID: 201,
                                               attr.EXIT_CODE: 0, attr.NODE_ID: NODE_A})
    return rec


def test_last_known_state_keeps_what_the_dead_owner_held(parse, tmp_path: Path) -> None:
    spans, records = parse(died_of_a_full_store(), tmp_path)
    state = postmortem.last_known_state(spans, records, {TASK_T: "FINISHED"})
    node = state.nodes[NODE_A]
    assert sorted(node.held) == sorted([PUT_1, RETURN_1, RETURN_2])
    assert node.used == 1 * MB and node.frees_after_owner_end == 2  # the store really emptied
    assert state.owner_of(PUT_1) == postmortem.Owner(100, "10.0.0.1", "driver", NODE_A)
    assert state.owner_of(RETURN_1) == state.owner_of(PUT_1)  # via the task's submission
    assert state.owner_of(RETURN_2) is None
    assert state.endings[(NODE_A, 100)].how == "exited with code 1"
    assert state.endings[(NODE_A, 201)].time_ns == T0 + 46 * MS  # the worker's exit span
    [(owner, ending, count, size)] = state.holders()  # RETURN_2's owner is not known
    assert (owner.pid, ending, count, size) == (100, state.endings[(NODE_A, 100)], 2, 70 * MB)
    assert [(r.size, r.used) for r in state.refusals] == [(50 * MB, 71 * MB)]
    assert state.as_of_ns == T0 + 46 * MS

    tables = postmortem.reference_tables(state)[NODE_A]
    rows = {row.object_id.hex(): (t.component, t.address.pid, row.reference_type,
                                  row.call_site, row.size, row.task_status)
            for t in tables for row in t.rows}
    assert rows == {
        PUT_1: ("driver", 100, "OWNER", "job.py:4 in main", 40 * MB, "FINISHED"),
        RETURN_1: ("driver", 100, "OWNER", "job.py:6 in main", 30 * MB, "FINISHED"),
        RETURN_2: ("unknown owner", 0, "OWNER", "job.py:7 in main", 1 * MB, ""),
    }
    lines = postmortem.header_lines(tmp_path, "the cluster is not running", state, "gcs ok")
    assert lines[0] == f"post-mortem view of session {tmp_path.name}: the cluster is not running"
    assert "as of 2026-01-01 00:00:00.046 UTC" in lines[1]
    assert "driver pid 100 ended at 2026-01-01 00:00:00.040 UTC (exited with code 1) holding " \
           "2 object(s)" in lines[2]
    assert "refused 1 object(s) (ObjectStoreFullError)" in lines[3]


def _stopped_session(session_root, tmp_path: Path) -> Path:
    died_of_a_full_store().write_session(session_root.traces_dir, session_root.logs_dir)
    session_root.address_file.write_text("127.0.0.1:9")  # nothing listens there
    storage = SqliteStorage(session_root.root / DB_FILE_NAME)
    storage.put("tasks", TASK_T, gcs_pb2.TaskRecord(
        task_id=bytes.fromhex(TASK_T), function_name="job.make", state="FINISHED",
        call_site="job.py:6 in main").SerializeToString())
    storage.put("nodes", NODE_A, gcs_pb2.NodeInfo(node_id=NODE_A, state="ALIVE", is_head=True,
                                                  object_store_capacity=100 * MB)
                .SerializeToString())
    storage.close()
    return session_root.root


def test_memory_list_and_stats_answer_from_a_stopped_session(session_root, tmp_path) -> None:
    root = _stopped_session(session_root, tmp_path)
    result = CliRunner().invoke(app, ["memory", "--format", "json"])
    assert result.exit_code == 0, result.output
    assert f"post-mortem view of session {root.name}: the cluster is not running: no GCS " \
           "answers at 127.0.0.1:9" in result.stderr
    rows = json.loads(result.stdout)
    assert sorted((r["object_ref"], r["pid"], r["status"]) for r in rows) == sorted([
        (PUT_1, 100, "FINISHED"), (RETURN_1, 100, "FINISHED"), (RETURN_2, 0, "")])
    stats = CliRunner().invoke(app, ["memory", "--stats-only", "--session", str(root),
                                     "--format", "json"])
    assert stats.exit_code == 0, stats.output
    [node] = json.loads(stats.stdout)
    # As the references show it: the objects the driver held when it ended.
    assert (node["node_id"], node["store_used"], node["objects"]) == (NODE_A, 71 * MB, 3)
    tasks = CliRunner().invoke(app, ["list", "tasks", "--session", str(root), "--format",
                                     "json"])
    assert tasks.exit_code == 0, tasks.output
    assert [(t["task_id"], t["state"]) for t in json.loads(tasks.stdout)] == [
        (TASK_T, "FINISHED")]
    workers = CliRunner().invoke(app, ["list", "workers", "--format", "json"])
    assert [(w["pid"], w["state"]) for w in json.loads(workers.stdout)] == [(201, "DEAD")]


def test_damaged_files_are_warnings_not_crashes(session_root, tmp_path) -> None:
    root = _stopped_session(session_root, tmp_path)
    database = root / DB_FILE_NAME
    database.write_bytes(b"SQLite format 3\x00" + b"\xff" * 300)  # a header, then garbage
    with open(next(session_root.traces_dir.glob("raylet-*.jsonl")), "a") as handle:
        handle.write('{"resourceSpans": [{"resource": {"attri')  # cut short by a crash
    result = CliRunner().invoke(app, ["memory", "--session", str(root), "--format", "json"])
    assert result.exit_code == 0, result.output
    assert "cannot read the GCS database" in result.stderr and "corrupt" in result.stderr
    assert len(json.loads(result.stdout)) == 3  # the traces still tell who held what
    tasks = CliRunner().invoke(app, ["list", "tasks", "--session", str(root)])
    assert tasks.exit_code == 0 and "tasks, actors, jobs and nodes are not known" in \
        tasks.stderr, tasks.output


def test_a_session_folder_that_is_not_one_is_a_clear_error(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["memory", "--session", str(tmp_path / "nope")])
    assert result.exit_code != 0 and "no such folder" in result.output


def test_read_only_open_neither_creates_nor_writes(tmp_path: Path) -> None:
    import pytest

    from tracedray.exceptions import RaySystemError

    with pytest.raises(RaySystemError, match="no GCS database"):
        SqliteStorage.open_read_only(tmp_path / DB_FILE_NAME)
    assert not (tmp_path / DB_FILE_NAME).exists()
    writer = SqliteStorage(tmp_path / DB_FILE_NAME)
    writer.put("jobs", "j1", b"x")
    reader = SqliteStorage.open_read_only(tmp_path / DB_FILE_NAME)
    assert list(reader.scan("jobs")) == [("j1", b"x")]  # sees the live writer's WAL
    with pytest.raises(RaySystemError):
        reader.put("jobs", "j2", b"y")
    reader.close()
    writer.close()
    for leftover in tmp_path.glob(DB_FILE_NAME + "-*"):
        leftover.unlink()
    # A database its GCS closed: read without a lock or a -wal/-shm file of our own.
    closed = SqliteStorage.open_read_only(tmp_path / DB_FILE_NAME)
    assert list(closed.scan("jobs")) == [("j1", b"x")]
    closed.close()
    assert [p.name for p in tmp_path.iterdir()] == [DB_FILE_NAME]


def test_reference_table_rows_are_the_memory_rows(parse, tmp_path: Path) -> None:
    from tracedray.core.protocol.state_rows import memory_rows

    spans, records = parse(died_of_a_full_store(), tmp_path)
    state = postmortem.last_known_state(spans, records)
    tables = [t for ts in postmortem.reference_tables(state).values() for t in ts]
    assert all(isinstance(t, core_worker_pb2.ReferenceTable) for t in tables)
    rows = memory_rows(tables)
    assert {(r["ip"], r["type"]) for r in rows if r["pid"] == 100} == {("10.0.0.1", "driver")}
    assert WORKER_1.pid not in {r["pid"] for r in rows}


def test_a_task_the_gcs_last_saw_running_ends_as_its_worker_s_span_says(parse, tmp_path):
    rec = Recorder()
    for attempt, error in ((0, "ValueError: boom"), (1, None)):
        rec.span(WORKER_1, "task.execute", 10 * attempt, 10 * attempt + 5,
                 {attr.TASK_ID: TASK_T, attr.TASK_ATTEMPT: attempt}, error=error)
    rec.span(WORKER_1, "task.execute", 0, 5, {attr.TASK_ID: "9" * 48, attr.TASK_ATTEMPT: 0},
             error="ValueError: boom")
    spans, _ = parse(rec, tmp_path)
    executed = postmortem.executed_states(spans)
    assert executed == {TASK_T: (1, "FINISHED"), "9" * 48: (0, "FAILED")}

    def record(task: str, state: str, attempt: int = 0) -> gcs_pb2.TaskRecord:
        return gcs_pb2.TaskRecord(task_id=bytes.fromhex(task), state=state, attempt=attempt)

    assert postmortem.reconcile_task(record(TASK_T, "RUNNING"), executed).state == "FINISHED"
    assert postmortem.reconcile_task(record("9" * 48, "SUBMITTED_TO_WORKER"),
                                     executed).state == "FAILED"
    # What the GCS knew to be final stays; so does a later attempt than the spans show.
    assert postmortem.reconcile_task(record(TASK_T, "CANCELLED"), executed).state == \
        "CANCELLED"
    assert postmortem.reconcile_task(record(TASK_T, "RUNNING", 2), executed).state == \
        "RUNNING"
