"""A driver that leaves, killed or cleanly, does not starve the next one (a real cluster
started with the CLI, drivers in their own processes).

Killed holding leases: the raylet notices the lessee is gone, kills the workers still
running its tasks and grants the freed resources to the requests waiting. Shut down
cleanly after bursts of tasks: it gives every lease back, and withdraws its requests
still waiting, so the next driver finds the same warm workers idle. Ended without
shutdown() while its tasks run and more wait for a worker: it exits at once all the
same, giving its leases back (their workers, still running its tasks, are stopped).
Ended, cleanly or not, while an actor of its waited for a CPU: the GCS declares the
actor dead and withdraws its creation, so no worker is started for it once the CPU frees.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from cli_support import PINGS_KEPT, isolated_root, run_json, start_head, workers_by_pid
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

# A task holds the node's only CPU; an actor that needs one is created meanwhile (its
# creation waits in the raylet), with `options`; on a line from stdin the script ends,
# as `ending` says.
LEAVES_ACTOR_WAITING = textwrap.dedent("""
    import os, sys, time
    import tracedray as ray

    ray.init(address="auto", namespace="waiting")
    started = sys.argv[1]

    @ray.remote
    def hold():
        open(started, "w").close()
        time.sleep(600)

    @ray.remote(num_cpus=1)
    class Waiting:
        def ping(self):
            return "pong"

    task = hold.remote()
    deadline = time.monotonic() + 60
    while not os.path.exists(started) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert os.path.exists(started)
    actor = Waiting.options({options}).remote()
    print("WAITING", actor._actor_id.hex(), flush=True)
    sys.stdin.readline()
    {ending}
""")
ACTOR_ENDINGS = {"shutdown": "ray.shutdown()", "no_shutdown": "pass  # the exit hook's shutdown"}

def _run_driver(folder: Path, name: str, script: str, *args: str) -> str:
    path = folder / f"{name}.py"
    path.write_text(script)
    driver = subprocess.run([sys.executable, str(path), *args], capture_output=True,
                            text=True, timeout=120)
    assert driver.returncode == 0, driver.stderr[-3000:]
    if script is NEXT:
        assert f"DONE {args[0]}" in driver.stdout
    return driver.stdout


def test_leases_of_a_killed_driver_go_to_the_next_driver(tmp_path: Path) -> None:
    with isolated_root(tmp_path):
        start_head()  # 2 CPUs
        (session,) = tmp_path.glob("session_2*")
        (tmp_path / "holder.py").write_text(HOLDER)
        holder = subprocess.Popen([sys.executable, str(tmp_path / "holder.py")],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        try:
            assert holder.stdout is not None and holder.stdout.readline().strip() == "SUBMITTED"
            wait_for(lambda: [w["state"] for w in workers_by_pid().values()].count("LEASED") == 2,
                     60, "the holder to lease both workers")
        finally:
            holder.send_signal(signal.SIGKILL)
            holder.wait()

        # Hung for ever before leases were reclaimed.
        _run_driver(tmp_path, "next", NEXT, "200", "60")

        reclaimed = log_events(session, "lease.reclaimed")
        assert len(reclaimed) == 2, reclaimed
        assert all(r["lessee_pid"] == holder.pid and r["level"] == "warning" for r in reclaimed)
        # A probe between the SIGKILL and this process's wait() sees a zombie.
        died = (f"process {holder.pid} is gone",
                f"process {holder.pid} exited (a zombie, not yet reaped)")
        assert all(r["why"] in died for r in reclaimed), reclaimed
        workers = workers_by_pid()
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
        before = workers_by_pid()

        _run_driver(tmp_path, "next", NEXT, "200", "60")

        assert log_events(session, "lease.reclaimed") == []
        after = workers_by_pid()  # the same workers, none died nor was started since
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


def _leave_actor_waiting(folder: Path, ending: str, options: str = "") -> str:
    """Run LEAVES_ACTOR_WAITING until its actor's creation waits in the raylet, then let
    it end; returns the actor's id."""
    script = folder / "waiter.py"
    script.write_text(LEAVES_ACTOR_WAITING.format(ending=ending, options=options))
    driver = subprocess.Popen([sys.executable, str(script), str(folder / "started")],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert driver.stdin is not None and driver.stdout is not None
        line = driver.stdout.readline()
        assert line.startswith("WAITING"), line
        wait_for(lambda: run_json("status")["nodes"][0]["pending"] == 1, 30,
                 "the actor's creation to wait in the raylet for the CPU")
        driver.stdin.write("\n")
        driver.stdin.flush()
        assert driver.wait(timeout=60) == 0
        return line.split()[1]
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()


@pytest.mark.parametrize("ending", sorted(ACTOR_ENDINGS))
def test_an_actor_waiting_for_a_cpu_when_its_job_ends_gets_no_worker(
        tmp_path: Path, ending: str) -> None:
    with isolated_root(tmp_path):
        start_head(num_cpus=1)
        (session,) = tmp_path.glob("session_2*")
        actor_id = _leave_actor_waiting(tmp_path, ACTOR_ENDINGS[ending])

        # Timed out before: once the task's worker was stopped, its CPU went to a worker
        # started for the dead actor, which kept it.
        _run_driver(tmp_path, "next", NEXT, "1", "20")

        (actor,) = [a for a in run_json("list", "actors") if a["actor_id"] == actor_id]
        assert actor["state"] == "DEAD" and "finished" in actor["death_cause"], actor
        # The job's end withdrew the request before the task's CPU came free: no worker
        # was ever granted to the actor.
        assert [w for w in workers_by_pid().values() if w["actor_id"] == actor_id] == []
        (withdrawn,) = [r for r in log_events(session, "actor.creation_withdrawn")
                        if r["actor_id"] == actor_id]
        assert withdrawn["level"] == "info" and withdrawn["requests_withdrawn"] == 1, withdrawn
        assert withdrawn["killed_worker_pids"] == [] and "finished" in withdrawn["cause"]
        (node,) = run_json("status")["nodes"]
        assert "ACTOR" not in node["workers"] and node["pending"] == 0, node
        assert node["resources_available"]["CPU"] == 1, node


def test_a_detached_actor_waiting_for_a_cpu_outlives_its_job(tmp_path: Path) -> None:
    with isolated_root(tmp_path):
        start_head(num_cpus=1)
        (session,) = tmp_path.glob("session_2*")
        actor_id = _leave_actor_waiting(tmp_path, "ray.shutdown()",
                                        options='name="kept", lifetime="detached"')

        # Its creation went on once the job's task freed the CPU.
        assert "PING pong" in _run_driver(tmp_path, "pings", PINGS_KEPT, "waiting")

        (actor,) = [a for a in run_json("list", "actors") if a["actor_id"] == actor_id]
        assert actor["state"] == "ALIVE" and actor["is_detached"], actor
        assert log_events(session, "actor.creation_withdrawn") == []
        assert [w["state"] for w in workers_by_pid().values() if w["actor_id"] == actor_id] == [
            "ACTOR"]
