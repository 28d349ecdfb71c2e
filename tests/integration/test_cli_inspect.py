"""`tracedray memory`, `logs`, `list`, `get`, `summary` and `status` against a real cluster
started with `tracedray start --head` and a driver (another process) that holds objects."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from cli_support import Driver, isolated_root, line_of, run, run_json, start_head


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Driver]]:
    root = tmp_path_factory.mktemp("cli-inspect")
    with isolated_root(root):
        address = start_head()
        driver = Driver(root)
        try:
            yield address, driver
        finally:
            driver.stop()


def test_memory_shows_driver_refs_with_call_sites(cluster: tuple[str, Driver]) -> None:
    _, driver = cluster
    rows = run_json("memory")
    mine = {row["object_ref"]: row for row in rows if row["pid"] == driver.pid}
    put, result = mine[driver.ids["put"]], mine[driver.ids["result"]]
    assert set(put) == {"ip", "pid", "type", "call_site", "object_ref", "size",
                        "reference_type", "status", "node_id"}
    assert put["type"] == "driver" and put["ip"] == "127.0.0.1"
    assert put["call_site"].startswith(f"cli_driver.py:{line_of('PUT_LINE')} ")
    assert put["size"] >= 2_000_000 and put["reference_type"] == "LOCAL_REFERENCE"
    # A task result carries the line of the .remote() that made it.
    assert result["call_site"].startswith(f"cli_driver.py:{line_of('REMOTE_LINE')} ")
    assert result["size"] >= 300_000 and result["status"] == "FINISHED"


def test_memory_table_groups_units_and_counts_left_out(cluster: tuple[str, Driver]) -> None:
    _, driver = cluster
    out = run("memory", "--group-by", "stack-trace", "--units", "MB").stdout
    assert f"call site cli_driver.py:{line_of('PUT_LINE')}" in out
    assert "1.91 MB" in out  # the 2,000,000-byte array (+ header) in MB
    limited = run("memory", "--num-entries", "1", "--format", "json")
    assert len(__import__("json").loads(limited.stdout)) == 1
    assert "left out" in limited.stderr


def test_memory_bad_option_is_an_error(cluster: tuple[str, Driver]) -> None:
    result = run("memory", "--sort-by", "colour", code=1)
    assert "--sort-by 'colour'" in result.stderr


def test_memory_stats_only_reports_store_use(cluster: tuple[str, Driver]) -> None:
    (node,) = run_json("memory", "--stats-only")
    assert node["store_capacity"] == 200 << 20
    assert node["store_used"] >= 2_300_000 and node["objects"] >= 2
    assert {"spilled_bytes", "spilled_objects", "restored_bytes", "restored_objects"} <= set(node)


def test_logs_task_shows_what_it_printed(cluster: tuple[str, Driver]) -> None:
    _, driver = cluster
    out = run("logs", "--task", driver.ids["task"]).stdout
    assert "making 300000 bytes" in out
    assert "counter at" not in out  # another task's output


def test_logs_unknown_task_suggests_close_ids(cluster: tuple[str, Driver]) -> None:
    _, driver = cluster
    full = driver.ids["task"]
    typo = full[:-1] + ("0" if full[-1] != "0" else "1")  # a prefix would be enough
    result = run("logs", "--task", typo, code=1)
    assert f"no task with id {typo}" in result.stderr
    assert driver.ids["task"] in result.stderr


def test_logs_actor_json_and_tail(cluster: tuple[str, Driver]) -> None:
    _, driver = cluster
    lines = run("logs", "--actor", driver.ids["actor"], "--format", "json").stdout.splitlines()
    assert any('"counter at 1"' in line for line in lines)
    assert len(run("logs", "--tail", "2").stdout.splitlines()) == 2


def test_list_get_summary_tasks(cluster: tuple[str, Driver]) -> None:
    _, driver = cluster
    tasks = run_json("list", "tasks")
    ours = next(t for t in tasks if t["task_id"] == driver.ids["task"])
    assert ours["name"].endswith("make") and ours["state"] == "FINISHED"
    got = run_json("get", "task", driver.ids["task"][:10])  # a unique prefix is enough
    assert got["task_id"] == driver.ids["task"]
    assert [e["state"] for e in got["events"]][-1] == "FINISHED"
    summary = {row["func_or_class_name"]: row for row in run_json("summary", "tasks")}
    make = next(row for name, row in summary.items() if name.endswith("make"))
    assert make["state_counts"] == {"FINISHED": 1}


def test_list_limit_is_never_silent(cluster: tuple[str, Driver]) -> None:
    result = run("list", "tasks", "--limit", "1", "--format", "json")
    assert len(__import__("json").loads(result.stdout)) == 1
    assert "showing 1 of" in result.stderr and "left out" in result.stderr


def test_list_filter_on_unknown_key_is_an_error(cluster: tuple[str, Driver]) -> None:
    result = run("list", "tasks", "--filter", "colour=red", code=1)
    assert "cannot filter on 'colour'" in result.stderr


def test_get_unknown_actor_suggests(cluster: tuple[str, Driver]) -> None:
    _, driver = cluster
    wrong = driver.ids["actor"][:-2] + "zz"
    result = run("get", "actor", wrong, code=1)
    assert f"no actor with id {wrong}" in result.stderr and driver.ids["actor"] in result.stderr


def test_list_nodes_workers_jobs_actors_objects(cluster: tuple[str, Driver]) -> None:
    _, driver = cluster
    (node,) = run_json("list", "nodes")
    assert node["state"] == "ALIVE" and node["resources"]["CPU"] == 2 and node["pid"] > 0
    workers = run_json("list", "workers")
    assert workers and all(w["node_id"] == node["node_id"] for w in workers)
    jobs = run_json("list", "jobs")
    assert any(j["driver_pid"] == driver.pid and j["state"] == "RUNNING" for j in jobs)
    actors = run_json("list", "actors")
    assert [a["actor_id"] for a in actors] == [driver.ids["actor"]]
    holders = run_json("get", "object", driver.ids["put"])
    assert [h["pid"] for h in holders] == [driver.pid]


def test_status_reports_nodes_and_store(cluster: tuple[str, Driver]) -> None:
    address, _ = cluster
    status = run_json("status")
    assert status["address"] == address
    (node,) = status["nodes"]
    assert node["state"] == "ALIVE" and node["object_store_used"] > 0
    assert sum(node["workers"].values()) >= 1
    table = run("status").stdout
    assert "ALIVE" in table and "head" in table and "pending work" in table


def test_python_state_api(cluster: tuple[str, Driver]) -> None:
    from tracedray.util import state

    _, driver = cluster
    tasks = state.list_tasks(limit=1)
    assert len(tasks) == 1 and tasks.total >= 2 and tasks.left_out == tasks.total - 1
    assert state.get_task(driver.ids["task"])["state"] == "FINISHED"  # type: ignore[index]
    assert state.get_task("00" * 16) is None
    objects = state.summarize_objects()
    assert sum(row["objects"] for row in objects) >= 2


def test_not_running_says_where_it_looked(tmp_path: Path) -> None:
    with isolated_root(tmp_path):
        result = run("status", code=1)
        assert "no tracedray session found under" in result.stderr
        assert str(tmp_path) in result.stderr
