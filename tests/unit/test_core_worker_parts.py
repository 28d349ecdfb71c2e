"""Parts of the core worker on their own: the blocked-in-get bookkeeping the raylet
hears, the output echo's bound on lines kept for the driver, and where the frees of
released owned objects go."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from tracedray._proto.v1 import common_pb2, gcs_pb2
from tracedray.core.address import Address
from tracedray.core.worker.blocking import BlockedState
from tracedray.core.worker.lineage import Lineage
from tracedray.core.worker.memory_store import MemoryStore
from tracedray.core.worker.output_echo import MAX_PENDING_LINES, OutputEcho, echo_name
from tracedray.core.worker.ownership import Ownership
from tracedray.core.worker.reference_table import ReferenceTable


class _Raylet:
    def __init__(self) -> None:
        self.told: list[tuple[str, bool]] = []

    def notify_blocked(self, worker_id: str, blocked: bool) -> None:
        self.told.append((worker_id, blocked))


def test_the_raylet_hears_only_the_outermost_block() -> None:
    raylet, handed_back = _Raylet(), []
    state = BlockedState(raylet.notify_blocked, "w1", tells_raylet=True,
                         on_blocked=lambda: handed_back.append(True))
    with state.blocked(), state.blocked():
        assert state.statistics().depth == 2
    assert raylet.told == [("w1", True), ("w1", False)]
    assert handed_back == [True]  # unstarted tasks go back once, as the worker blocks
    stats = state.statistics()
    assert (stats.depth, stats.blocks_total, stats.notify_failures) == (0, 1, 0)


def test_settle_unblocks_a_worker_left_blocked_by_a_cancel() -> None:
    raylet = _Raylet()
    state = BlockedState(raylet.notify_blocked, "w1", tells_raylet=True, on_blocked=lambda: None)
    state.blocked().__enter__()  # the matching __exit__ never runs (a cancel landed there)
    state.settle()
    assert raylet.told == [("w1", True), ("w1", False)]
    assert state.statistics().depth == 0
    with state.blocked():  # the next task's get() lends the CPU again
        pass
    assert raylet.told[2:] == [("w1", True), ("w1", False)]


def test_a_driver_never_tells_the_raylet() -> None:
    raylet = _Raylet()
    state = BlockedState(raylet.notify_blocked, "d1", tells_raylet=False,
                         on_blocked=lambda: None)
    with state.blocked():
        pass
    state.settle()
    assert raylet.told == []
    assert state.statistics().blocks_total == 0


def test_lines_past_the_bound_are_dropped_and_counted() -> None:
    asked = threading.Event()

    def get_jobs() -> list[gcs_pb2.JobInfo]:
        asked.set()
        return []  # the job's driver is unknown: its lines are in the log files only

    spec = common_pb2.TaskSpec(function_name="pkg.mod.work", kind=common_pb2.NORMAL,
                               job_id=b"j1")
    echo = OutputEcho(get_jobs, ip="127.0.0.1", pid=7, job_id=b"j0", current_task=lambda: spec)
    for index in range(MAX_PENDING_LINES + 5):
        echo.forward("stdout", f"line {index}", None)
    stats = echo.statistics()
    assert (stats.pending_lines, stats.forwarded_total, stats.dropped_total) == (
        MAX_PENDING_LINES, MAX_PENDING_LINES, 5)
    echo.flush()
    assert asked.is_set()
    stats = echo.statistics()
    assert (stats.pending_lines, stats.batches_sent) == (0, 0)


def test_echo_names_are_the_function_or_the_actor_class() -> None:
    assert echo_name("pkg.mod.work", common_pb2.NORMAL) == "work"
    assert echo_name("pkg.mod.Counter.incr", common_pb2.ACTOR_METHOD) == "Counter"
    assert echo_name("Counter.__init__", common_pb2.ACTOR_CREATION) == "Counter"


class _LocalRaylet:
    address = "127.0.0.1:7000"

    def free_objects(self, object_ids: list[bytes]) -> None:
        raise AssertionError("frees go through the background pool, not inline")


OID = b"\x01" * 20


def _owned_object(store_raylet: str, *, free_local_works: bool = True
                  ) -> tuple[Ownership, MemoryStore, list[list[bytes]], list[tuple[Any, ...]]]:
    """An Ownership holding OID, stored on the raylet at ``store_raylet``, still referenced
    once; returns it with its memory store, the local frees and the background calls."""
    local_frees: list[list[bytes]] = []
    background: list[tuple[Any, ...]] = []

    def free_local(object_ids: list[bytes]) -> bool:
        local_frees.append(object_ids)
        return free_local_works

    def run_later(fn: Callable[..., Any], *args: Any) -> bool:
        background.append((fn, *args))
        return True

    references, store = ReferenceTable("me"), MemoryStore()
    ownership = Ownership(references, store, Lineage(), _LocalRaylet(), free_local=free_local,
                          background=run_later)
    references.add_local_ref(OID, None, "site", owned=True)
    host, _, port = store_raylet.rpartition(":")
    ownership.store_value(common_pb2.ObjectValue(
        object_id=OID, size=10, store_node_id="n1",
        store_raylet=Address("n1", host, int(port)).to_proto()), "FINISHED")
    references.remove_local_ref(OID)
    return ownership, store, local_frees, background


def test_a_released_object_here_is_freed_over_the_seal_socket() -> None:
    ownership, store, local_frees, background = _owned_object(_LocalRaylet.address)
    assert store.contains(OID)
    ownership.release_deferred()
    assert local_frees == [[OID]] and background == []
    assert not store.contains(OID)
    stats = ownership.statistics()
    assert (stats.released_total, stats.local_frees, stats.grpc_frees) == (1, 1, 0)


def test_a_free_the_seal_socket_refuses_goes_to_the_local_raylet_over_grpc() -> None:
    ownership, _, local_frees, background = _owned_object(_LocalRaylet.address,
                                                          free_local_works=False)
    ownership.release_deferred()
    [(_, client, object_ids)] = background
    assert local_frees == [[OID]] and object_ids == [OID]
    assert client.address == _LocalRaylet.address
    assert ownership.statistics().grpc_frees == 1


def test_an_object_on_another_node_is_freed_by_that_nodes_raylet() -> None:
    ownership, _, local_frees, background = _owned_object("127.0.0.1:7001")
    ownership.release_deferred()
    [(_, client, object_ids)] = background
    assert local_frees == [] and object_ids == [OID]
    assert client.address == "127.0.0.1:7001"
