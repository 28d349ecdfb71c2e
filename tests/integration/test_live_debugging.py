"""Live debugging on a real two-node cluster: `tracedray stack` labels each stuck task's
and actor method's stack with its ids, on every node, and reports a stopped worker
without waiting for it; a task far slower than its siblings is flagged `task.slow`
with its stack (and in `list tasks`); `top --once` shows the running function."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import cloudpickle
import pexpect
import pytest
from cli_support import run, run_json
from multinode_support import Cluster, log_events, started_nodes, wait_for

import tracedray as ray

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # workers cannot import tests


def marker_wait_for_file(path: str) -> int:
    while not os.path.exists(path):
        time.sleep(0.05)
    return 1


@ray.remote(resources={"b": 1})
def maybe_stuck(path: str) -> int:
    return marker_wait_for_file(path)


@ray.remote
class Waiter:
    def __init__(self) -> None:
        self.event = threading.Event()

    def wait_here(self) -> str:
        self.event.wait(120)
        return "released"

    def release(self) -> None:
        self.event.set()


@ray.remote
class AsyncWaiter:
    def __init__(self) -> None:
        self.event = asyncio.Event()

    async def wait_async(self) -> str:
        await self.event.wait()
        return "released"

    async def release(self) -> None:
        self.event.set()


class Scene:
    def __init__(self, cluster: Cluster, release_file: Path) -> None:
        self.cluster = cluster
        self.address = cluster.address
        self.release_file = release_file
        done = release_file.with_suffix(".done")
        done.touch()
        # Siblings that finish at once on node b set the function's usual duration.
        assert ray.get([maybe_stuck.remote(str(done)) for _ in range(3)]) == [1, 1, 1]
        self.stuck = maybe_stuck.remote(str(release_file))
        self.waiter = Waiter.options(resources={"head": 1}, max_concurrency=2).remote()
        self.waiting = self.waiter.wait_here.remote()
        self.async_waiter = AsyncWaiter.options(resources={"head": 1}).remote()
        self.waiting_async = self.async_waiter.wait_async.remote()
        self.async_task_id = self.waiting_async.task_id().hex()
        self.task_id = self.stuck.task_id().hex()
        self.method_task_id = self.waiting.task_id().hex()
        self.actor_id = self.waiter._actor_id.hex()

    def stack(self, *args: str) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = run_json("stack", "--address", self.address, *args)
        return rows

    def threads_of(self, rows: list[dict[str, Any]], task_id: str
                   ) -> list[tuple[dict[str, Any], dict[str, Any], dict[str, Any]]]:
        return [(node, process, thread) for node in rows for process in node["processes"]
                for thread in process["threads"]
                if thread["task"] and thread["task"]["task_id"] == task_id]


@pytest.fixture(scope="module")
def scene(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scene]:
    folder = tmp_path_factory.mktemp("live")
    with pytest.MonkeyPatch.context() as monkeypatch:
        # Inherited by every worker: an attempt is slow after 1 s (and 10x its siblings).
        monkeypatch.setenv("TRACEDRAY_HUNG_TASK_WARN_S", "1")
        with started_nodes(monkeypatch, {"num_cpus": 2, "resources": {"head": 2}},
                           {"b": {"num_cpus": 1, "resources": {"b": 1}}}) as cluster:
            ray.init(address=cluster.address)
            try:
                scene = Scene(cluster, folder / "release")
                wait_for(lambda: all(scene.threads_of(rows, task) for rows in [scene.stack()]
                                     for task in (scene.task_id, scene.method_task_id,
                                                  scene.async_task_id)),
                         60, "the stuck task and the actor methods running")
                yield scene
                scene.release_file.touch()
                scene.waiter.release.remote()
                scene.async_waiter.release.remote()
                assert ray.get([scene.stuck, scene.waiting, scene.waiting_async],
                               timeout=60) == [1, "released", "released"]
            finally:
                ray.shutdown()


def test_stack_labels_a_stuck_task_and_an_actor_method_on_two_nodes(scene: Scene) -> None:
    rows = scene.stack()
    [(node, process, thread)] = scene.threads_of(rows, scene.task_id)
    assert node["node_id"] == scene.cluster.node_id("b")
    assert "marker_wait_for_file" in [f["function"] for f in thread["frames"]]
    task = thread["task"]
    assert task["function"].endswith("maybe_stuck")
    assert task["attempt"] == 0
    assert len(task["trace_id"]) == 32
    assert task["running_for_s"] > 0
    assert process["component"] == "worker" and process["pid"] > 0

    [(node, process, thread)] = scene.threads_of(rows, scene.method_task_id)
    assert node["node_id"] == scene.cluster.node_id("head")
    assert process["actor_id"] == scene.actor_id
    assert process["actor_class"] == "Waiter"
    assert thread["task"]["function"] == "Waiter.wait_here"
    assert thread["task"]["actor_id"] == scene.actor_id
    assert "wait_here" in [f["function"] for f in thread["frames"]]

    # The text: just that task's thread, labelled, from the user's code on.
    text = run("stack", "--address", scene.address, "--task", scene.task_id[:12]).stdout
    assert f"task {scene.task_id}" in text and "marker_wait_for_file" in text
    assert "wait_here" not in text
    text = run("stack", "--address", scene.address, "--actor", scene.actor_id).stdout
    assert "actor Waiter" in text and "wait_here" in text and "marker_wait" not in text
    # Each dump is a worker.stack_dump log line naming the tasks it found.
    dumps = wait_for(lambda: [e for e in log_events(scene.cluster.session_dir,
                                                    "worker.stack_dump")
                              if scene.task_id in e.get("task_ids", [])],
                     30, "a worker.stack_dump line naming the stuck task")
    assert "marker_wait_for_file" in dumps[0]["stacks"]


def test_stack_shows_where_an_async_actor_call_awaits(scene: Scene) -> None:
    threads = scene.threads_of(scene.stack(), scene.async_task_id)
    [coroutine] = [t for _, _, t in threads if t["name"].endswith("(its coroutine)")]
    assert [f["function"] for f in coroutine["frames"]][:2] == ["wait_async", "wait"]
    assert coroutine["task"]["function"] == "AsyncWaiter.wait_async"


def test_native_frames_come_from_py_spy_or_say_why_not(scene: Scene) -> None:
    rows = scene.stack("--native", "--task", scene.task_id)
    [(_, process, thread)] = scene.threads_of(rows, scene.task_id)
    if process.get("native_error"):  # py-spy may not read processes here (ptrace rules)
        assert "py-spy" in process["native_error"]
    else:
        assert any("marker_wait_for_file" in frame for frame in thread["native_frames"])


def test_stack_of_a_finished_task_says_so(scene: Scene) -> None:
    result = run("stack", "--address", scene.address, "--task", "ffffffff", code=1)
    assert "no running task" in result.stderr


def test_a_task_far_slower_than_its_siblings_is_flagged_with_its_stack(scene: Scene) -> None:
    flagged = wait_for(lambda: [e for e in log_events(scene.cluster.session_dir, "task.slow")
                                if e.get("task_id") == scene.task_id],
                       30, "a task.slow line for the stuck task")
    assert len(flagged) == 1  # once per attempt
    assert "marker_wait_for_file" in flagged[0]["stack"]
    assert flagged[0]["running_for_s"] >= 1
    assert flagged[0]["median_s"] < 1  # its three siblings
    tasks = wait_for(lambda: [t for t in run_json("list", "tasks", "--address", scene.address)
                              if t["task_id"] == scene.task_id and t["slow"]],
                     30, "list tasks showing the stuck task slow")
    assert tasks[0]["running_for_s"] > 0
    siblings = [t for t in run_json("list", "tasks", "--address", scene.address,
                                    "--filter", "state=FINISHED")
                if t["name"].endswith("maybe_stuck")]
    assert len(siblings) == 3 and not any(t["slow"] for t in siblings)


def test_top_once_shows_the_running_functions(scene: Scene,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    frame = run_json("top", "--address", scene.address, "--once")
    functions = {f["function"]: f for f in frame["functions"]}
    stuck = next(f for name, f in functions.items() if name.endswith("maybe_stuck"))
    assert stuck["running"] == 1 and stuck["longest_task_id"] == scene.task_id
    assert functions["Waiter.wait_here"]["running"] == 1
    assert {n["node_id"] for n in frame["nodes"]} == {scene.cluster.node_id("head"),
                                                      scene.cluster.node_id("b")}
    monkeypatch.setenv("COLUMNS", "200")  # whole names on one line
    text = run("top", "--address", scene.address, "--once").stdout
    assert "Running tasks by function" in text and "Waiter.wait_here" in text


def test_top_keys_show_the_selected_functions_stack(scene: Scene) -> None:
    names = [f["function"] for f in run_json("top", "--address", scene.address, "--once",
                                             "--sort", "name")["functions"]]
    row = next(i for i, name in enumerate(names, start=1) if name.endswith("maybe_stuck"))
    session = pexpect.spawn(sys.executable, ["-m", "tracedray.cli.app", "top", "--address",
                                             scene.address, "--sort", "name",
                                             "--interval", "1"],
                            encoding="utf-8", timeout=60, dimensions=(60, 200))
    try:
        session.expect_exact("Running tasks by function")
        session.expect_exact("k stack")
        session.send(str(row))
        session.send("k")
        session.expect_exact(f"running test_live_debugging.maybe_stuck (task {scene.task_id}")
        session.expect_exact("marker_wait_for_file")
        session.expect_exact("press a key to go back to top")
        session.send(" ")
        session.expect_exact("Running tasks by function")
        session.send("q")
        session.expect(pexpect.EOF)
    finally:
        session.close(force=True)
    assert session.exitstatus == 0, session.before


def test_a_stopped_worker_is_reported_without_holding_up_the_others(scene: Scene) -> None:
    [(_, process, _)] = scene.threads_of(scene.stack(), scene.method_task_id)
    os.kill(process["pid"], signal.SIGSTOP)
    try:
        rows = scene.stack("--timeout", "1")
    finally:
        os.kill(process["pid"], signal.SIGCONT)
    [stopped] = [p for node in rows for p in node["processes"] if p["pid"] == process["pid"]]
    assert "not answering within 1s" in stopped["error"]
    assert stopped["actor_id"] == scene.actor_id  # the raylet still names its actor
    assert scene.threads_of(rows, scene.task_id)  # the other node answered in full


def test_trace_tells_that_the_task_was_flagged_slow(scene: Scene) -> None:
    scene.release_file.touch()
    assert ray.get(scene.stuck, timeout=60) == 1
    story = wait_for(lambda: (out := run("trace", scene.task_id, "--address", scene.address)
                              .stdout) and "flagged slow" in out and out,
                     30, "the task's story with its slow flag")
    assert "its function's median" in story
