"""The store knows whose objects it holds, and frees them with a reason it counts; the
raylet's ObjectFrees frees them when their owner is gone and passes frees on to the
nodes that pulled copies (no processes: probes of a dead pid and of a closed port)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Callable
from concurrent.futures import Executor, Future
from typing import Any

import numpy as np
import pytest

from tracedray.core.address import Address
from tracedray.core.object_store.store import FREE_RELEASED, ObjectStore
from tracedray.core.raylet import object_frees
from tracedray.core.raylet import owner_death as od
from tracedray.core.raylet.object_frees import CopyHolders, ObjectFrees
from tracedray.core.raylet.transfers import TransferTable

DRIVER = Address("node1", "127.0.0.1", 4002, "w-driver", 102)
WORKER = Address("node1", "127.0.0.1", 4003, "w-worker", 103)


def array(i: int) -> np.ndarray:
    return np.full(10_000, i, dtype=np.uint8)


def _size(store: ObjectStore, object_id: str) -> int:
    info = store.describe(object_id)
    assert info is not None
    return info.size


def test_the_store_indexes_objects_by_owner(make_store: Callable[..., ObjectStore],
                                            put: Callable[..., int]) -> None:
    store = make_store()
    put(store, "0a", array(1), owner="w-driver")
    put(store, "0b", array(2), owner="w-driver")
    put(store, "0c", array(3), owner="w-worker")
    store.receive("0d", _size(store, "0c"), store.read_chunks("0c"),
                  owner="w-remote", owner_address=DRIVER._replace(worker_id="w-remote"))
    assert store.owned_by(["w-driver", "w-worker", "w-nobody"]) == {
        "w-driver": ["0a", "0b"], "w-worker": ["0c"]}
    assert store.owners()["w-remote"] == DRIVER._replace(worker_id="w-remote")
    info = store.describe("0d")
    assert info is not None and not info.primary and info.owner == "w-remote"
    assert store.describe("0e") is None
    store.free(["0a", "0c"], "owner died")
    store.free(["0b"])
    assert store.owned_by(["w-driver", "w-worker"]) == {}
    assert set(store.owners()) == {"w-remote"}
    stats = store.statistics()
    assert stats.freed_count == 3
    assert stats.freed_by_reason == {"owner died": 2, FREE_RELEASED: 1}


class Inline(Executor):
    """Runs what is submitted at once, and remembers it."""

    def __init__(self) -> None:
        self.submitted: list[tuple[Any, ...]] = []

    def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> Future[Any]:
        self.submitted.append((fn, *args))
        future: Future[Any] = Future()
        future.set_result(fn(*args, **kwargs) if fn is not object_frees._pass_on else None)
        return future


def _frees(store: ObjectStore, *, local_alive: set[str] | None = None,
           dead_nodes: set[str] | None = None,
           transfers: TransferTable | None = None) -> tuple[ObjectFrees, Inline]:
    executor = Inline()
    frees = ObjectFrees(store=store, transfers=transfers or TransferTable(), node_id="node1",
                        background=executor,
                        local_alive=lambda: local_alive or set(),
                        dead_nodes=lambda: dead_nodes or set())
    return frees, executor


def test_a_free_is_passed_on_to_the_raylets_that_pulled_copies(
        make_store: Callable[..., ObjectStore], put: Callable[..., int]) -> None:
    store = make_store()
    put(store, "0a", array(1), owner="w-driver")
    frees, executor = _frees(store)
    b = Address("node-b", "127.0.0.1", 6001)
    frees.copy_holders.add("0a", b)
    assert frees.free(["0a", "0z"]) > 0
    assert executor.submitted == [(object_frees._pass_on, b, ["0a"], FREE_RELEASED)]
    assert len(frees.copy_holders) == 0  # told once
    assert frees.statistics().passed_on == 1


def test_a_pull_that_ends_after_its_free_frees_its_copy(
        make_store: Callable[..., ObjectStore], put: Callable[..., int]) -> None:
    source, puller = make_store(name="a"), make_store(name="b")
    put(source, "0a", array(1), owner="w-driver")
    transfers = TransferTable()
    frees, _ = _frees(puller, transfers=transfers)

    def pull() -> None:
        frees.free(["0a"])  # passed on by the source while the copy is on its way
        puller.receive("0a", _size(source, "0a"), source.read_chunks("0a"), owner="w-driver")
        frees.after_pull("0a")

    transfers.run("0a", pull)
    assert not puller.contains("0a")
    assert puller.statistics().freed_by_reason == {"released": 1}

    def pull_again() -> None:  # a later pull, made on purpose, keeps its copy
        puller.receive("0a", _size(source, "0a"), source.read_chunks("0a"), owner="w-driver")
        frees.after_pull("0a")

    transfers.run("0a", pull_again)
    assert puller.contains("0a")


def test_an_owner_gone_takes_its_objects_and_no_one_elses(
        make_store: Callable[..., ObjectStore], put: Callable[..., int]) -> None:
    store = make_store()
    put(store, "0a", array(1), owner="w-driver")
    put(store, "0b", array(2), owner="w-worker")
    frees, _ = _frees(store)
    assert frees.owner_gone(od.exited(DRIVER, "it shut down")) == 1
    assert [o.object_id for o in store.objects()] == ["0b"]
    # Sealed for it after it went (a task's return): the next check frees it.
    put(store, "0c", array(3), owner="w-driver")
    assert frees.check_owners() == 1
    assert store.statistics().freed_by_reason == {od.OWNER_EXITED: 2}


def _dead_pid() -> int:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_the_check_probes_owners_it_does_not_know(make_store: Callable[..., ObjectStore],
                                                  put: Callable[..., int]) -> None:
    store = make_store(4 << 20)
    here_dead = Address("node1", "127.0.0.1", 1, "w-here-dead", _dead_pid())
    here_alive = Address("node1", "127.0.0.1", 1, "w-here-alive", os.getpid())
    elsewhere_dead = Address("node2", "127.0.0.1", _closed_port(), "w-far-dead", 1)
    on_dead_node = Address("node3", "10.255.255.1", 9, "w-node-dead", 1)
    known = Address("node1", "127.0.0.1", 1, "w-known", _dead_pid())  # pid gone, yet alive
    for i, owner in enumerate([here_dead, here_alive, elsewhere_dead, on_dead_node, known]):
        put(store, f"0{i}", array(i), owner=owner.worker_id, owner_address=owner)
    frees, _ = _frees(store, local_alive={"w-known"}, dead_nodes={"node3"})
    assert frees.check_owners() == 3
    assert sorted(store.owned_by(["w-here-alive", "w-known"])) == ["w-here-alive", "w-known"]
    assert store.statistics().freed_by_reason == {od.OWNER_DIED: 3}
    assert frees.statistics().owners_gone == 3


def test_copy_holders() -> None:
    holders = CopyHolders()
    a, b = Address("na", "ip", 1), Address("nb", "ip", 2)
    holders.add("0a", a)
    holders.add("0a", b)
    holders.add("0b", a)
    assert {k: sorted(v) for k, v in holders.pop(["0a", "0b", "0c"]).items()} == {
        a: ["0a", "0b"], b: ["0a"]}
    assert holders.pop(["0a"]) == {}


@pytest.mark.parametrize("exit_code,reason", [(0, od.OWNER_EXITED), (1, od.OWNER_DIED)])
def test_a_worker_exit_frees_what_it_owned(make_store: Callable[..., ObjectStore],
                                           put: Callable[..., int], exit_code: int,
                                           reason: str) -> None:
    store = make_store()
    put(store, "0a", array(1), owner="w-worker")
    frees, _ = _frees(store)
    frees.owner_gone(od.after_worker_exit(WORKER, exit_code, "meaning"))
    assert store.statistics().freed_by_reason == {reason: 1}
