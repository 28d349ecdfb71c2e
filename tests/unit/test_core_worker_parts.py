"""Parts of the core worker on their own: the blocked-in-get bookkeeping the raylet
hears, and the output echo's bound on lines kept for the driver."""

from __future__ import annotations

import threading

from tracedray._proto.v1 import common_pb2, gcs_pb2
from tracedray.core.worker.blocking import BlockedState
from tracedray.core.worker.output_echo import MAX_PENDING_LINES, OutputEcho, echo_name


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
