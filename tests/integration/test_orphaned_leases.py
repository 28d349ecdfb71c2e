"""A driver that leaves, killed or cleanly, does not starve the next one (a real cluster
started with the CLI, drivers in their own processes).

Killed holding leases: the raylet notices the lessee is gone, kills the workers still
running its tasks and grants the freed resources to the requests waiting. Shut down
cleanly after bursts of tasks: it gives every lease back, and withdraws its requests
still waiting, so the next driver finds the same warm workers idle. Ended without
shutdown() while its tasks run and more wait for a worker: it exits at once all the
same, giving its leases back (their workers, still running its tasks, are stopped).
"""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from cli_support import isolated_root, run_json, start_head
from multinode_support import log_events, wait_for

pytestmark = pytest.mark.integration

# Fills both CPUs with tasks that never end, with more queued behind them (so lease
# requests are waiting in the raylet too), then waits to be killed.
HOLDER = textwrap.dedent("""
    import sys, time
    import tracedray as ray

    ray.init(address="auto")

    @ray.remote
    def forever():
        time.sleep(3600)

    refs = [forever.remote() for _ in range(12)]
    print("SUBMITTED", flush=True)
    sys.stdin.readline()
""")

# Bursts of empty tasks, then a clean exit.
BURSTS = textwrap.dedent("""
    import tracedray as ray

    ray.init(address="auto")

    @ray.remote
    def empty():
        return None

    for _ in range(3):
        ray.get([empty.remote() for _ in range(500)], timeout=120)
    ray.shutdown()
""")

# The next driver: runs `tasks` tasks within `timeout_s`.
NEXT = textwrap.dedent("""
    import sys
    import tracedray as ray

    tasks, timeout_s = int(sys.argv[1]), float(sys.argv[2])
    ray.init(address="auto")

    @ray.remote
    def one():
        return 1

    try:
        print("DONE", sum(ray.get([one.remote() for _ in range(tasks)], timeout=timeout_s)),
              flush=True)
    finally:
        ray.shutdown()
""")


# Both CPUs run its tasks, four more wait behind them (their lease requests wait in the
# raylet); then the script ends without shutdown(), by an exception or plainly.
LEAVES_TASKS_RUNNING = textwrap.dedent("""
    import os, sys, time
    import tracedray as ray

    ray.init(address="auto")
    started = sys.argv[1]

    @ray.remote
    def long():
        open(os.path.join(started, str(os.getpid())), "w").close()
        time.sleep(600)

    refs = [long.remote() for _ in range(6)]
    deadline = time.monotonic() + 60
    while len(os.listdir(started)) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(os.listdir(started)) == 2
    print("ENDING", time.time(), flush=True)
    {ending}
""")
ENDINGS = {"raises": "ray.get(refs, timeout=0.5)  # GetTimeoutError",
           "ends": "ray.wait(refs, num_returns=len(refs), timeout=0.5)"}


def _run_driver(folder: Path, name: str, script: str, *args: str) -> None:
    path = folder / f"{name}.py"
    path.write_text(script)
    driver = subprocess.run([sys.executable, str(path), *args], capture_output=True,
                            text=True, timeout=120)
    assert driver.returncode == 0, driver.stderr[-3000:]
    if script is NEXT:
        assert f"DONE {args[0]}" in driver.stdout


def _workers() -> dict[int, dict[str, object]]:
    return {w["pid"]: w for w in run_json("list", "workers")}


def test_leases_of_a_killed_driver_go_to_the_next_driver(tmp_path: Path) -> None:
    with isolated_root(tmp_path):
        start_head()  # 2 CPUs
        (session,) = tmp_path.glob("session_2*")
        (tmp_path / "holder.py").write_text(HOLDER)
        holder = subprocess.Popen([sys.executable, str(tmp_path / "holder.py")],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        try:
            assert holder.stdout is not None and holder.stdout.readline().strip() == "SUBMITTED"
            wait_for(lambda: [w["state"] for w in _workers().values()].count("LEASED") == 2,
                     60, "the holder to lease both workers")
        finally:
            holder.send_signal(signal.SIGKILL)
            holder.wait()

        # Hung for ever before leases were reclaimed.
        _run_driver(tmp_path, "next", NEXT, "200", "60")

        reclaimed = log_events(session, "lease.reclaimed")
        assert len(reclaimed) == 2, reclaimed
        assert all(r["lessee_pid"] == holder.pid and r["level"] == "warning" for r in reclaimed)
        assert all(r["why"] == f"process {holder.pid} is gone" for r in reclaimed)
        workers = _workers()
        meaning = f"killed by the raylet: the process holding its lease died (pid {holder.pid} "
        for record in reclaimed:
            worker = workers[record["worker_pid"]]
            assert worker["state"] == "DEAD" and worker["exit_signal"] == "SIGKILL", worker
            assert str(worker["exit_meaning"]).startswith(meaning), worker
        # Intended exits, not crashes: info level, with the lessee named.
        exits = {r["worker_pid"]: r for r in log_events(session, "worker.exit")}
        for record in reclaimed:
            exit_record = exits[record["worker_pid"]]
            assert exit_record["level"] == "info", exit_record
            assert exit_record["reason"].startswith(f"lessee died: pid {holder.pid} "), exit_record
        (node,) = run_json("status")["nodes"]
        assert node["leases_reclaimed"] == 2


def test_a_clean_exit_leaves_its_workers_to_the_next_driver(tmp_path: Path) -> None:
    with isolated_root(tmp_path):
        start_head()  # 2 CPUs
        (session,) = tmp_path.glob("session_2*")
        _run_driver(tmp_path, "bursts", BURSTS)
        before = _workers()

        _run_driver(tmp_path, "next", NEXT, "200", "60")

        assert log_events(session, "lease.reclaimed") == []
        after = _workers()  # the same workers, none died nor was started since
        assert set(after) == set(before), (before, after)
        assert all(w["state"] == "IDLE" for w in after.values()), after
        (node,) = run_json("status")["nodes"]
        assert node["leases_reclaimed"] == 0 and node["pending"] == 0


@pytest.mark.parametrize("ending", sorted(ENDINGS))
def test_a_driver_ending_without_shutdown_exits_and_gives_its_leases_back(
        tmp_path: Path, ending: str) -> None:
    with isolated_root(tmp_path):
        start_head()  # 2 CPUs
        (session,) = tmp_path.glob("session_2*")
        script, started = tmp_path / "leaver.py", tmp_path / "started"
        script.write_text(LEAVES_TASKS_RUNNING.format(ending=ENDINGS[ending]))
        started.mkdir()
        # Hung at exit for as long as its tasks ran: a pool thread waited for a lease,
        # and Python joins the pool before atexit would have run the shutdown.
        leaver = subprocess.run([sys.executable, str(script), str(started)],
                                capture_output=True, text=True, timeout=60)
        exit_took = time.time() - float(leaver.stdout.split("ENDING")[1].split()[0])
        assert leaver.returncode == (1 if ending == "raises" else 0), leaver.stderr[-3000:]
        assert ("GetTimeoutError" in leaver.stderr) == (ending == "raises"), leaver.stderr
        assert exit_took < 10, exit_took  # about 1 s: 0.5 s in get() or wait(), the shutdown

        # At once: the workers still running its tasks were not handed on to run the
        # next driver's task after them.
        _run_driver(tmp_path, "next", NEXT, "1", "15")

        assert log_events(session, "lease.reclaimed") == []  # given back, not reclaimed
        running = log_events(session, "lease.returned_running")
        assert sorted(r["worker_pid"] for r in running) == sorted(
            int(p.name) for p in started.iterdir()), running
        assert len({r["lessee_pid"] for r in running}) == 1, running
        exits = {r["worker_pid"]: r for r in log_events(session, "worker.exit")}
        for record in running:  # intended exits, not crashes
            exit_record = exits[record["worker_pid"]]
            assert exit_record["level"] == "info", exit_record
            assert exit_record["reason"].startswith(
                f"lessee left its tasks running: pid {record['lessee_pid']} "), exit_record
        (node,) = run_json("status")["nodes"]
        assert node["leases_reclaimed"] == 0 and node["pending"] == 0
