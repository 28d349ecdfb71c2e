"""Ownership ends with the owner: when the process that created objects exits or dies,
every copy of them goes, on every node (raylet/owner_death.py), and a borrower's get()
raises OwnerDiedError instead of finding nothing.

A user's report: on a 100 MB store without spilling, a driver that put 80 MB and exited
left the objects in the store for good (`tracedray memory` said "no live object
references"), and the next driver failed with ObjectStoreFullError.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from cli_support import isolated_root, run, run_json
from multinode_support import log_events, spans_named, started_nodes, wait_for

from tracedray.core.protocol.raylet_client import RayletClient

pytestmark = pytest.mark.integration

# Within this long of its owner's exit or death an object has left every store.
EMPTY_WITHIN_S = 5.0

# The user's driver: 4 x 20 MB into a 100 MB store, then the end of the script.
FILLS = ('import numpy as np, tracedray as r; r.init(address="auto"); '
         'x=[r.put(np.zeros(2_500_000)) for _ in range(4)]')

# Holds 3 puts and a task's 20 MB result (sealed by a worker, owned by this driver),
# says READY, and waits to be killed.
HOLDS = textwrap.dedent("""
    import sys
    import numpy as np
    import tracedray as ray

    ray.init(address=sys.argv[1])

    @ray.remote
    def make():
        return np.ones(2_500_000)

    held = [ray.put(np.zeros(2_500_000)) for _ in range(3)]
    made = make.remote()
    ray.wait([made], timeout=60)
    print("READY", flush=True)
    sys.stdin.readline()
""")


# On two nodes: a put on the head that a task on b reads (a pulled copy on b), and a
# task's result made on b that nobody pulled: only b's own check of its owner frees it.
HOLDS_ON_TWO_NODES = textwrap.dedent("""
    import sys
    import numpy as np
    import tracedray as ray

    ray.init(address=sys.argv[1])

    @ray.remote(resources={"b": 1})
    def total(array):
        return float(array.sum())

    @ray.remote(resources={"b": 1})
    def make():
        return np.ones(1_000_000)

    held = [ray.put(np.zeros(1_000_000)) for _ in range(3)]
    assert ray.get(total.remote(held[0])) == 0
    made = make.remote()
    ray.wait([made], timeout=60)
    print("READY", flush=True)
    sys.stdin.readline()
""")


def _node() -> dict[str, Any]:
    (node,) = run_json("memory", "--stats-only")
    return dict(node)


def _empty_node() -> dict[str, Any] | None:
    node = _node()
    return node if node["objects"] == 0 and node["store_used"] == 0 else None


def _fill() -> None:
    done = subprocess.run([sys.executable, "-c", FILLS], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]


def _frees(session: Path, reason: str) -> list[dict[str, Any]]:
    return [s for s in spans_named(session, "object.free")
            if s.get("tracedray.object.free_reason") == reason]


def _start_small_store() -> None:
    run("start", "--head", "--port", "0", "--num-cpus", "1",
        "--object-store-memory", "100000000", "--no-object-spilling")


def test_a_driver_that_exits_takes_its_objects_with_it(tmp_path: Path) -> None:
    with isolated_root(tmp_path):
        _start_small_store()
        (session,) = tmp_path.glob("session_2*")
        for _ in range(2):  # the second driver used to fail: ObjectStoreFullError
            _fill()
            node = wait_for(_empty_node, EMPTY_WITHIN_S, "the store to be empty")
            # The store and the reference table agree: nothing held, nothing stored.
            assert run_json("memory") == []
        assert node["freed_by_reason"] == {"owner exited": 8}, node
        assert node["freed_objects"] == 8 and node["freed_bytes"] >= 8 * 20_000_000

        # Each object's free is a span with its reason: the timeline sees them leave.
        assert len(_frees(session, "owner exited")) == 8
        (series,) = run_json("memory", "--timeline").values()
        assert series["series"][-1]["used"] == 0, series["series"][-3:]
        assert series["peak"]["used"] >= 80_000_000
    # The raylet's account, once it stopped (its log file is complete then).
    gone = log_events(session, "objects.owner_gone")
    assert [(r["reason"], r["objects"], r["why"]) for r in gone] == [
        ("owner exited", 4, "it shut down")] * 2


def test_a_killed_driver_takes_its_objects_with_it(tmp_path: Path) -> None:
    with isolated_root(tmp_path):
        _start_small_store()
        (session,) = tmp_path.glob("session_2*")
        script = tmp_path / "holds.py"
        script.write_text(HOLDS)
        holder = subprocess.Popen([sys.executable, str(script), "auto"], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True)
        try:
            assert holder.stdout is not None
            assert holder.stdout.readline().startswith("READY"), holder.poll()
            assert _node()["objects"] == 4
            holder.send_signal(signal.SIGKILL)
            holder.wait()
            node = wait_for(_empty_node, EMPTY_WITHIN_S, "the store to be empty")
        finally:
            if holder.poll() is None:
                holder.kill()
                holder.wait()
        # The task's result went too: it was the driver's, not the worker's that made it.
        assert node["freed_by_reason"] == {"owner died": 4}, node
        assert len(_frees(session, "owner died")) == 4
        _fill()  # the next driver has the whole store
    (gone, exited) = log_events(session, "objects.owner_gone")
    assert gone["owner_pid"] == holder.pid, gone
    assert gone["reason"] == "owner died" and gone["objects"] == 4, gone
    assert f"process {holder.pid}" in gone["why"], gone
    assert exited["reason"] == "owner exited", exited


def test_a_borrower_whose_owner_died_gets_owner_died_error(ray: Any) -> None:
    from tracedray.api import runtime
    from tracedray.exceptions import ObjectLostError, OwnerDiedError

    @ray.remote
    class Owner:
        def make(self) -> list[Any]:
            self.refs = [ray.put(np.full(1_000_000, i)) for i in range(2)]
            return self.refs  # the driver borrows them

        def where(self) -> tuple[int, str]:
            return os.getpid(), ray.get_runtime_context().get_node_id()

    owner = Owner.remote()
    read, unread = ray.get(owner.make.remote())
    pid, node_id = ray.get(owner.where.remote())
    assert ray.get(read)[0] == 0  # a copy the borrower has seen
    raylet = runtime.current().raylet
    assert raylet.node_stats().num_objects == 2
    ray.kill(owner)
    wait_for(lambda: raylet.node_stats().num_objects == 0, EMPTY_WITHIN_S,
             "the dead owner's objects to leave the store")
    for ref in (read, unread):
        with pytest.raises(OwnerDiedError) as info:  # not GetTimeoutError: no hang
            ray.get(ref, timeout=60)
        assert isinstance(info.value, ObjectLostError)
        message = str(info.value)
        assert ref.hex() in message and f"pid {pid}" in message and node_id in message, message
    assert raylet.node_stats().freed_by_reason == {"owner died": 2}


def _stats(cluster: Any, name: str) -> Any:
    return RayletClient(cluster.nodes[name].raylet_address).node_stats()


def _both_empty(cluster: Any) -> bool:
    return all(_stats(cluster, name).num_objects == 0 for name in ("head", "b"))


@pytest.mark.usefixtures("no_leaks")
def test_pulled_copies_go_with_a_del_and_with_their_owner(
        monkeypatch: pytest.MonkeyPatch) -> None:
    with started_nodes(monkeypatch, {"num_cpus": 1, "resources": {"head": 1}},
                       {"b": {"num_cpus": 1, "resources": {"b": 1}}}) as cluster:
        ray = cluster.ray
        ray.init(address=cluster.address)
        try:
            @ray.remote(resources={"b": 1})
            def total(array: Any) -> float:
                return float(array.sum())

            @ray.remote(resources={"b": 1})
            def make() -> Any:
                return np.ones(1_000_000)

            x = ray.put(np.ones(1_000_000))  # on the head, the driver's node
            assert ray.get(total.remote(x)) == 1_000_000  # b pulled a copy
            assert (_stats(cluster, "head").num_objects, _stats(cluster, "b").num_objects) == (
                1, 1)
            del x
            wait_for(lambda: _both_empty(cluster), EMPTY_WITHIN_S, "both copies to go")
            assert dict(_stats(cluster, "b").freed_by_reason) == {"released": 1}

            y = ray.put(np.ones(1_000_000))
            assert ray.get(total.remote(y)) == 1_000_000  # a copy on b
            z = make.remote()  # its primary on b, owned by the driver
            assert ray.get(z).sum() == 1_000_000  # a copy on the head
            assert (_stats(cluster, "head").num_objects, _stats(cluster, "b").num_objects) == (
                2, 2)
        finally:
            ray.shutdown()
        wait_for(lambda: _both_empty(cluster), EMPTY_WITHIN_S, "every copy to go")
        for name in ("head", "b"):
            assert _stats(cluster, name).freed_by_reason["owner exited"] == 2, name


@pytest.mark.usefixtures("no_leaks")
def test_a_killed_owners_objects_go_on_every_node(monkeypatch: pytest.MonkeyPatch,
                                                   tmp_path: Path) -> None:
    with started_nodes(monkeypatch, {"num_cpus": 1, "resources": {"head": 1}},
                       {"b": {"num_cpus": 1, "resources": {"b": 1}}}) as cluster:
        script = tmp_path / "holds_on_two_nodes.py"
        script.write_text(HOLDS_ON_TWO_NODES)
        holder = subprocess.Popen([sys.executable, str(script), cluster.address],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        try:
            assert holder.stdout is not None
            assert holder.stdout.readline().startswith("READY"), holder.poll()
            assert (_stats(cluster, "head").num_objects, _stats(cluster, "b").num_objects) == (
                3, 2)
            holder.send_signal(signal.SIGKILL)
            holder.wait()
            wait_for(lambda: _both_empty(cluster), EMPTY_WITHIN_S, "every copy to go")
        finally:
            if holder.poll() is None:
                holder.kill()
                holder.wait()
        assert dict(_stats(cluster, "head").freed_by_reason) == {"owner died": 3}
        assert dict(_stats(cluster, "b").freed_by_reason) == {"owner died": 2}


@pytest.mark.usefixtures("no_leaks")
def test_a_rebuilt_object_goes_with_its_owner_too(monkeypatch: pytest.MonkeyPatch) -> None:
    from tracedray.api.calls import global_worker

    with started_nodes(monkeypatch, {"num_cpus": 1, "resources": {"head": 1}},
                       {"c": {"num_cpus": 1, "resources": {"c": 1}}}) as cluster:
        ray = cluster.ray
        ray.init(address=cluster.address)
        try:
            @ray.remote(num_cpus=1, resources={"head": 1})
            class Holder:  # takes the head's only CPU: the first run of make goes to c
                def ready(self) -> bool:
                    return True

            @ray.remote
            def make() -> Any:
                return np.ones(1_000_000)

            holder = Holder.remote()
            assert ray.get(holder.ready.remote(), timeout=60)
            made = make.remote()
            ray.wait([made], timeout=60)
            worker = global_worker()
            assert worker.references.get(made.binary()).store_node_id == cluster.node_id("c")
            os.kill(cluster.raylet_pid("c"), signal.SIGKILL)
            ray.kill(holder)  # the head's CPU is free for the rebuild
            assert ray.get(made, timeout=120).sum() == 1_000_000  # rebuilt from lineage
            assert worker.references.get(made.binary()).store_node_id == cluster.node_id("head")
            assert _stats(cluster, "head").num_objects == 1
        finally:
            ray.shutdown()
        # Sealed by a worker of the head for the driver: it goes with the driver.
        wait_for(lambda: _stats(cluster, "head").num_objects == 0, EMPTY_WITHIN_S,
                 "the rebuilt object to go")
        assert dict(_stats(cluster, "head").freed_by_reason) == {"owner exited": 1}
