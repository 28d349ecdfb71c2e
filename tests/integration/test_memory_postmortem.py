"""`tracedray memory` tells the truth about bytes: the timeline counts every object that
entered a store (puts, task returns, actor returns), and a stopped cluster still answers
from its session files (issue 21, points 3 and 7)."""

from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
from typer.testing import CliRunner

from tracedray.cli.app import app

MB = 1 << 20


def _cli(*args: str) -> str:
    result = CliRunner().invoke(app, list(args))
    assert result.exit_code == 0, result.output
    return result.stdout


def _line(function: Any, marker: str) -> int:
    lines, first = inspect.getsourcelines(function)
    return first + next(i for i, line in enumerate(lines) if marker in line)


def test_timeline_peak_counts_puts_task_returns_and_actor_returns(ray: Any) -> None:
    @ray.remote
    def make(megabytes: int) -> Any:
        return np.ones(megabytes * MB, dtype=np.uint8)

    @ray.remote
    class Maker:
        def make(self, megabytes: int) -> Any:
            return np.full(megabytes * MB, 7, dtype=np.uint8)

    maker = Maker.remote()
    puts = [ray.put(np.zeros(10 * MB, dtype=np.uint8)) for _ in range(4)]  # PUTS
    returns = [make.remote(8) for _ in range(3)]  # TASK RETURNS
    actor_returns = [maker.make.remote(6) for _ in range(2)]  # ACTOR RETURNS
    ray.get(returns + actor_returns)
    held_mb = 4 * 10 + 3 * 8 + 2 * 6
    worker = ray.api.calls.global_worker()
    worker.flush_background_work()
    address = ray.api.calls._require_cluster().gcs_address

    nodes = json.loads(_cli("memory", "--timeline", "--address", address, "--format", "json"))
    assert len(nodes) == 1, nodes
    peak = next(iter(nodes.values()))["peak"]
    assert abs(peak["used"] - held_mb * MB) <= 0.05 * held_mb * MB, (peak["used"] / MB, held_mb)
    this = Path(__file__).name
    test = test_timeline_peak_counts_puts_task_returns_and_actor_returns
    by_site = {site["call_site"]: site for site in peak["top_call_sites"]}
    expected = {f"{this}:{_line(test, '# PUTS')} in <listcomp>": (40, 4),
                f"{this}:{_line(test, '# TASK RETURNS')} in <listcomp>": (24, 3),
                f"{this}:{_line(test, '# ACTOR RETURNS')} in <listcomp>": (12, 2)}
    for site, (megabytes, count) in expected.items():
        assert site in by_site, (site, sorted(by_site))
        assert by_site[site]["objects"] == count
        assert abs(by_site[site]["bytes"] - megabytes * MB) <= 0.05 * megabytes * MB
    del puts, returns, actor_returns


# A driver that starts its own cluster and dies of ObjectStoreFullError, taking the
# cluster with it (the story of issue 21): puts, task returns, then one put too many.
FULL_STORE_DRIVER = """
import numpy as np
import tracedray as ray

ray.init(num_cpus=1, object_store_memory=60 << 20, object_spilling=False)

@ray.remote
def make():
    return np.ones(8 << 20, dtype=np.uint8)

kept = [ray.put(np.zeros(10 << 20, dtype=np.uint8)) for _ in range(3)]  # PUT
results = [make.remote() for _ in range(2)]  # REMOTE
ray.get(results)
print("HELD", flush=True)
extra = ray.put(np.zeros(20 << 20, dtype=np.uint8))  # TOO MANY
"""


def _script_line(script: str, marker: str) -> int:
    return next(i for i, line in enumerate(script.splitlines(), start=1) if marker in line)


def _run_cli(*args: str) -> Any:
    return CliRunner().invoke(app, list(args))


def test_memory_answers_after_a_driver_died_of_a_full_store(
        no_leaks: None, tmp_path: Path, monkeypatch: Any) -> None:
    root = tmp_path / "root"
    script = tmp_path / "full_store.py"
    script.write_text(FULL_STORE_DRIVER)
    env = {**os.environ, "TRACEDRAY_TEMP_DIR": str(root)}
    done = subprocess.run([sys.executable, str(script)], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and "ObjectStoreFullError" in done.stderr, done.stderr[-3000:]
    assert "HELD" in done.stdout
    session = (root / "session_latest").resolve()
    monkeypatch.setenv("TRACEDRAY_TEMP_DIR", str(root))

    # The default: session_latest, whose cluster is gone.
    result = _run_cli("memory", "--format", "json")
    assert result.exit_code == 0, result.output
    assert "post-mortem view of session " + session.name in result.stderr
    assert "last known state as of 20" in result.stderr
    assert "refused 1 object(s) (ObjectStoreFullError)" in result.stderr
    rows = json.loads(result.stdout)
    sites = {f"full_store.py:{_script_line(FULL_STORE_DRIVER, marker)} in {where}": marker
             for marker, where in (("# PUT", "<listcomp>"), ("# REMOTE", "<listcomp>"),
                                   ("# TOO MANY", "<module>"))}
    by_marker: dict[str, list[dict[str, Any]]] = {marker: [] for marker in sites.values()}
    for row in rows:
        by_marker[sites[row["call_site"]]].append(row)
    assert [len(by_marker[m]) for m in ("# PUT", "# REMOTE", "# TOO MANY")] == [3, 2, 0], rows
    for row in rows:
        assert row["type"] == "driver" and row["reference_type"] == "OWNER"
        assert row["size"] >= 8 << 20
    assert "driver pid" in result.stderr and "holding 5 object(s)" in result.stderr
    returns = by_marker["# REMOTE"]
    assert {r["status"] for r in returns} == {"FINISHED"}
    assert len({r["pid"] for r in rows}) == 1 and rows[0]["pid"] > 0
    # The table form says the same, grouped by node.
    table = _run_cli("memory", "--session", str(session), "--group-by", "stack-trace")
    assert table.exit_code == 0, table.output
    assert "in <listcomp>" in table.stdout and "OWNER" in table.stdout

    stats = _run_cli("memory", "--stats-only", "--session", str(session), "--format", "json")
    assert stats.exit_code == 0, stats.output
    [node] = json.loads(stats.stdout)
    assert node["store_capacity"] == 60 << 20 and node["objects"] == 5
    assert node["store_used"] >= 46 << 20  # as the driver left it

    tasks = _run_cli("list", "tasks", "--session", str(session), "--format", "json")
    assert tasks.exit_code == 0, tasks.output
    assert "post-mortem view" in tasks.stderr
    made = [t for t in json.loads(tasks.stdout) if t["name"].endswith("make")]
    assert len(made) == 2 and {t["state"] for t in made} == {"FINISHED"}, made
    summary = _run_cli("summary", "tasks", "--session", str(session), "--format", "json")
    assert summary.exit_code == 0 and "make" in summary.stdout, summary.output
    jobs = _run_cli("list", "jobs", "--session", str(session), "--format", "json")
    assert jobs.exit_code == 0 and len(json.loads(jobs.stdout)) == 1, jobs.output
    one = _run_cli("get", "task", made[0]["task_id"][:10], "--session", str(session))
    assert one.exit_code == 0 and made[0]["task_id"] in one.stdout, one.output


def test_memory_and_list_answer_after_tracedray_stop(tmp_path: Path) -> None:
    """A driver attached to `tracedray start --head` holds objects; the cluster is
    stopped under it; the session's files still say who held what."""
    from cli_support import Driver, isolated_root, line_of, run, start_head

    with isolated_root(tmp_path / "root") as root:
        start_head()
        driver = Driver(tmp_path)
        try:
            run("stop")
            session = (root / "session_latest").resolve()
            result = _run_cli("memory", "--format", "json")
            assert result.exit_code == 0, result.output
            assert f"post-mortem view of session {session.name}: the cluster is not " \
                   "running" in result.stderr
            rows = {r["object_ref"]: r for r in json.loads(result.stdout)}
            put, made = rows[driver.ids["put"]], rows[driver.ids["result"]]
            assert put["call_site"] == f"cli_driver.py:{line_of('PUT_LINE')} in <module>"
            assert made["call_site"] == f"cli_driver.py:{line_of('REMOTE_LINE')} in <module>"
            assert put["pid"] == made["pid"] == driver.pid and put["type"] == "driver"
            assert put["size"] >= 2_000_000 and made["status"] == "FINISHED"

            tasks = {t["task_id"]: t for t in json.loads(
                _run_cli("list", "tasks", "--format", "json").stdout)}
            assert tasks[driver.ids["task"]]["state"] == "FINISHED"
            actors = json.loads(_run_cli("list", "actors", "--format", "json").stdout)
            assert [a["actor_id"] for a in actors] == [driver.ids["actor"]]
            nodes = json.loads(_run_cli("list", "nodes", "--format", "json").stdout)
            assert len(nodes) == 1 and nodes[0]["is_head"]
        finally:
            driver.process.kill()
            driver.process.wait(timeout=30)


HOLDING_DRIVER = """
import sys, time
import numpy as np
import tracedray as ray

ray.init(num_cpus=1, object_store_memory=100 << 20)
kept = [ray.put(np.zeros(5 << 20, dtype=np.uint8)) for _ in range(3)]  # KEPT
print("READY", flush=True)
time.sleep(600)
"""


def test_memory_answers_after_its_driver_was_sigkilled(no_leaks: None, tmp_path: Path) -> None:
    """SIGKILL a driver that started its own cluster: the cluster goes with it, and the
    session still says what the driver held when it died."""
    import signal
    import time

    import psutil

    root = tmp_path / "root"
    script = tmp_path / "holding.py"
    script.write_text(HOLDING_DRIVER)
    env = {**os.environ, "TRACEDRAY_TEMP_DIR": str(root)}
    driver = subprocess.Popen([sys.executable, str(script)], env=env, cwd=tmp_path,
                              stdout=subprocess.PIPE, text=True)
    assert driver.stdout is not None
    assert driver.stdout.readline().strip() == "READY"
    cluster = psutil.Process(driver.pid).children(recursive=True)
    driver.send_signal(signal.SIGKILL)
    driver.wait(timeout=30)
    gone, alive = psutil.wait_procs(cluster, timeout=60)
    assert not alive, f"the driver's cluster outlived it: {alive}"
    time.sleep(0.1)

    session = (root / "session_latest").resolve()
    result = _run_cli("memory", "--session", str(session), "--format", "json")
    assert result.exit_code == 0, result.output
    assert "post-mortem view of session" in result.stderr
    header = result.stderr
    assert f"driver pid {driver.pid}" in header and "3 object(s), 15.00 MB" in header, header
    # Its raylet may have seen it die (a zombie, or gone) before the cluster went, or not.
    assert "no end of it is recorded" in header or f"process {driver.pid} " in header, header
    rows = json.loads(result.stdout)
    site = f"holding.py:{_script_line(HOLDING_DRIVER, '# KEPT')} in <listcomp>"
    assert [(r["pid"], r["call_site"]) for r in rows] == [(driver.pid, site)] * 3, rows
