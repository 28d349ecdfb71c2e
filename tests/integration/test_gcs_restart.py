"""SIGKILL of the GCS with Redis or the default SQLite storage: the head restarts it, no node,
job or actor is lost (nor, with Redis, any task record), creations in flight complete, and
drivers go on."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from tracedray.core.gcs.client import GcsClient
from tracedray.telemetry.append_file import read_data  # live files end in NULs
from tracedray.telemetry.spool_convert import sync_traces_dir
from tracedray.testing.redis_server import RedisServer

RESTART_DEADLINE_S = 30.0


def gcs_pids(session_dir: str) -> list[int]:
    """GCS processes of this session among our descendants (a restarted one is the raylet's)."""
    found = []
    for proc in psutil.Process().children(recursive=True):
        try:
            cmdline = proc.cmdline()
            if ("tracedray.core.gcs.main" in cmdline and session_dir in cmdline
                    and proc.status() != psutil.STATUS_ZOMBIE):
                found.append(proc.pid)
        except psutil.Error:
            continue
    return found


def wait_for_new_gcs(session_dir: str, old_pid: int) -> int:
    deadline = time.monotonic() + RESTART_DEADLINE_S
    while time.monotonic() < deadline:
        pids = [pid for pid in gcs_pids(session_dir) if pid != old_pid]
        if pids:
            return pids[0]
        time.sleep(0.05)
    raise AssertionError(f"no GCS restarted within {RESTART_DEADLINE_S}s")


def wait_until(predicate: Any, what: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def log_events(session_dir: str, component: str) -> list[dict[str, Any]]:
    events = []
    for path in Path(session_dir, "logs").glob(f"{component}*.jsonl"):
        for line in read_data(path).decode().splitlines():
            if line.strip():
                events.append(json.loads(line))
    return events


def span_names(session_dir: str) -> set[str]:
    names: set[str] = set()
    sync_traces_dir(Path(session_dir, "traces"))  # what every reader does first
    for path in Path(session_dir, "traces").glob("*.jsonl"):
        for line in read_data(path).decode().splitlines():
            if not line.strip():
                continue
            for resource in json.loads(line).get("resourceSpans", []):
                for scope in resource.get("scopeSpans", []):
                    names.update(span["name"] for span in scope.get("spans", []))
    return names


@pytest.fixture(params=["redis", "sqlite"])
def redis_cluster(request: pytest.FixtureRequest, no_leaks: None,
                  monkeypatch: pytest.MonkeyPatch
                  ) -> Iterator[tuple[Any, dict[str, Any], RedisServer | None]]:
    """A cluster whose GCS keeps its tables in Redis, or in the default embedded SQLite
    (whose small tables are written through too)."""
    import tracedray

    with contextlib.ExitStack() as stack:
        redis_server = stack.enter_context(RedisServer()) if request.param == "redis" else None
        if redis_server is not None:
            monkeypatch.setenv("TRACEDRAY_GCS_STORAGE", redis_server.url)
        else:
            monkeypatch.delenv("TRACEDRAY_GCS_STORAGE", raising=False)
        info = tracedray.init(num_cpus=2, object_store_memory=128 << 20)
        try:
            yield tracedray, info, redis_server
        finally:
            tracedray.shutdown()


def snapshot(gcs: GcsClient) -> dict[str, Any]:
    return {
        "nodes": {n.info.node_id: n.info.state for n in gcs.get_nodes()},
        "jobs": {j.job_id: j.state for j in gcs.get_jobs()},
        "actors": {a.actor_id: (a.state, a.name, a.pid, a.detached) for a in gcs.list_actors()},
        "tasks": {t.task_id: (t.state, t.function_name) for t in gcs.get_tasks().tasks},
    }


@pytest.mark.timeout(180)
def test_sigkill_of_the_gcs_with_redis_loses_nothing(
        redis_cluster: tuple[Any, dict[str, Any], RedisServer | None]) -> None:
    ray, info, redis_server = redis_cluster
    session_dir = info["session_dir"]

    @ray.remote
    class Counter:
        def __init__(self) -> None:
            self.n = 0

        def inc(self) -> int:
            self.n += 1
            return self.n

    @ray.remote
    def square(x: int) -> int:
        return x * x

    counter_class: Any = Counter
    counter = counter_class.options(name="survivor", lifetime="detached").remote()
    assert [ray.get(counter.inc.remote()) for _ in range(3)] == [1, 2, 3]
    assert ray.get([square.remote(i) for i in range(40)]) == [i * i for i in range(40)]

    gcs = GcsClient(info["address"])
    # Task events reach the GCS in batches: wait until every task is recorded finished.
    wait_until(lambda: sum(s == "FINISHED" for s, _ in snapshot(gcs)["tasks"].values()) >= 44,
               "the task records")
    before = snapshot(gcs)
    assert len(before["nodes"]) == 1 and len(before["jobs"]) == 1

    [old_pid] = gcs_pids(session_dir)
    os.kill(old_pid, signal.SIGKILL)
    killed_at = time.monotonic()
    # Work that does not need the GCS carries on meanwhile: an actor call goes straight to
    # the actor's worker and a task of an exported function only needs the raylet.
    assert ray.get(counter.inc.remote()) == 4
    assert ray.get(square.remote(7)) == 49

    new_pid = wait_for_new_gcs(session_dir, old_pid)
    assert new_pid != old_pid
    after = snapshot(gcs)  # the client retries UNAVAILABLE until the new GCS answers
    assert time.monotonic() - killed_at < RESTART_DEADLINE_S

    assert after["nodes"] == before["nodes"]
    assert after["jobs"] == before["jobs"]
    assert after["actors"] == before["actors"]  # still ALIVE, same worker pid
    if redis_server is not None:  # the embedded storage's task table is flushed-behind
        for task_id, record in before["tasks"].items():
            assert after["tasks"].get(task_id) == record

    # The named detached actor kept its state, found by name through the new GCS.
    again = ray.get_actor("survivor")
    assert ray.get(again.inc.remote()) == 5
    # New work, including a function exported after the restart, is recorded again.

    @ray.remote
    def cube(x: int) -> int:
        return x ** 3

    ref = cube.remote(3)
    assert ray.get(ref) == 27
    wait_until(lambda: any(name.endswith("cube") for _, name in
                           snapshot(gcs)["tasks"].values()), "the new task's record")

    raylet_events = {e["event"] for e in log_events(session_dir, "raylet")}
    assert {"gcs.died", "gcs.restarted"} <= raylet_events
    gcs_events = [e for e in log_events(session_dir, "gcs") if e.get("pid") == new_pid]
    assert any(e["event"] == "gcs.recovered" for e in gcs_events)
    ray.kill(again)


@pytest.mark.timeout(120)
def test_restarted_gcs_is_stopped_with_the_cluster(
        redis_cluster: tuple[Any, dict[str, Any], RedisServer | None]) -> None:
    """The supervisor owns the GCS it started: shutdown() leaves no GCS behind (no_leaks)."""
    ray, info, _ = redis_cluster
    session_dir = info["session_dir"]
    [old_pid] = gcs_pids(session_dir)
    os.kill(old_pid, signal.SIGKILL)
    new_pid = wait_for_new_gcs(session_dir, old_pid)
    GcsClient(info["address"]).get_nodes()  # answers
    ray.shutdown()
    assert not psutil.pid_exists(new_pid) or psutil.Process(new_pid).status() == "zombie"
    assert "gcs.restart" in span_names(session_dir)


# --- an actor's creation under way when the GCS dies -----------------------------------
# The restarted GCS recovers the actor as PENDING_CREATION and places it again. What the
# GCS before it had asked a raylet for — a request waiting for a CPU, or a worker granted
# and running __init__ — must not survive as a second worker of the same actor: one that
# holds a CPU for ever and, had it finished __init__, a second instance nobody calls.

SETTLED_WITHIN_S = 15.0


def raylet_stats() -> Any:
    import tracedray.api.calls

    return tracedray.api.calls.global_worker().raylet.node_stats()


def live_workers_of(actor_hex: str) -> list[int]:
    return sorted(w.pid for w in raylet_stats().workers
                  if w.actor_id == actor_hex and w.state != "DEAD")


def restart_gcs(info: dict[str, Any]) -> int:
    """SIGKILL the GCS; returns the new one's pid once it answers."""
    session_dir = info["session_dir"]
    [old_pid] = gcs_pids(session_dir)
    os.kill(old_pid, signal.SIGKILL)
    new_pid = wait_for_new_gcs(session_dir, old_pid)
    GcsClient(info["address"]).get_nodes()  # retries until the new GCS answers
    return new_pid


def assert_settles(actor_hex: str, actor_pid: int) -> None:
    """The actor's one worker, holding one of the 2 CPUs; nothing waits, nothing else holds."""
    expected = {"actor workers": [actor_pid], "pending leases": 0, "free CPUs": 1.0}

    def state() -> dict[str, Any]:
        stats = raylet_stats()
        return {"actor workers": live_workers_of(actor_hex),
                "pending leases": stats.pending_leases,
                "free CPUs": stats.resources_available["CPU"]}

    deadline = time.monotonic() + SETTLED_WITHIN_S
    while state() != expected and time.monotonic() < deadline:
        time.sleep(0.05)
    assert state() == expected


def init_runs(path: Path) -> list[str]:
    return path.read_text().split() if path.exists() else []


@pytest.mark.timeout(120)
def test_a_creation_waiting_for_a_cpu_when_the_gcs_dies_gets_one_worker(
        redis_cluster: tuple[Any, dict[str, Any], RedisServer | None], tmp_path: Path) -> None:
    ray, info, _ = redis_cluster
    runs = tmp_path / "init-runs"

    @ray.remote(num_cpus=1)
    class Counted:
        def __init__(self, runs: str = "") -> None:
            if runs:
                with open(runs, "a") as out:
                    out.write(f"{os.getpid()}\n")

        def pid(self) -> int:
            return os.getpid()

    # Actors hold the CPUs (a task's caller may keep a spare lease request waiting too,
    # which would blur the count of waiting requests).
    actor_class: Any = Counted
    holders = [actor_class.remote() for _ in range(2)]
    ray.get([holder.pid.remote() for holder in holders], timeout=30)
    actor = actor_class.remote(str(runs))
    actor_hex = actor._actor_id.hex()
    wait_until(lambda: raylet_stats().pending_leases == 1,
               "the actor's creation to wait in the raylet for a CPU")

    restart_gcs(info)
    for holder in holders:
        ray.kill(holder)
    pid = ray.get(actor.pid.remote(), timeout=30)
    assert_settles(actor_hex, pid)
    assert init_runs(runs) == [str(pid)]


@pytest.mark.timeout(120)
def test_a_creation_running_init_when_the_gcs_dies_goes_on_on_its_worker(
        redis_cluster: tuple[Any, dict[str, Any], RedisServer | None], tmp_path: Path) -> None:
    """The restarted GCS adopts the worker the GCS before was creating the actor on: no
    second worker starts, and __init__ runs once."""
    ray, info, _ = redis_cluster
    runs, release = tmp_path / "init-runs", tmp_path / "release"

    @ray.remote(num_cpus=1)
    class Slow:
        def __init__(self, runs: str, release: str) -> None:
            while not os.path.exists(release):
                time.sleep(0.02)
            with open(runs, "a") as out:
                out.write(f"{os.getpid()}\n")

        def pid(self) -> int:
            return os.getpid()

    actor_class: Any = Slow
    actor = actor_class.remote(str(runs), str(release))
    actor_hex = actor._actor_id.hex()
    wait_until(lambda: live_workers_of(actor_hex), "a worker granted to the actor")
    [first] = live_workers_of(actor_hex)

    restart_gcs(info)
    session_dir = info["session_dir"]

    def releases() -> list[dict[str, Any]]:
        return [e for e in log_events(session_dir, "gcs") if e["event"] == "actor.release_unused"]

    # Said by the new GCS (a log line and a span) before it places anything.
    wait_until(releases, "the new GCS to release what it does not use")
    (released,) = releases()
    assert released["adopted_worker_pids"] == [first], released
    assert released["killed_worker_pids"] == [] and released["actors_to_place"] == 1
    release.touch()
    pid = ray.get(actor.pid.remote(), timeout=30)
    assert pid == first
    assert_settles(actor_hex, pid)
    assert init_runs(runs) == [str(pid)]
    assert "actor.release_unused" in span_names(session_dir)
