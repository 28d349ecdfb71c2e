"""A task submitter withdraws the lease requests its tasks no longer need, at the raylet
each waits at, and asks again for a task queued after that (a fake raylet and core
worker: the submitter's own threads, no processes)."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from tracedray._proto.v1 import common_pb2, raylet_pb2
from tracedray.core.address import Address
from tracedray.core.worker.pending_task import PendingTask
from tracedray.core.worker.task_submitter import TaskSubmitter
from tracedray.exceptions import RaySystemError

LINGER_S = 0.02
TIMEOUT = raylet_pb2.LeaseReply.TIMEOUT


class FakeCall:
    def __init__(self, request: raylet_pb2.LeaseRequest) -> None:
        self.request = request
        self.reply: raylet_pb2.LeaseReply | None = None
        self._answered = threading.Event()

    def answer(self, reply: raylet_pb2.LeaseReply) -> None:
        if not self._answered.is_set():
            self.reply = reply
            self._answered.set()

    def result(self) -> raylet_pb2.LeaseReply:
        assert self._answered.wait(10), "never answered"
        assert self.reply is not None
        return self.reply

    def cancel(self) -> None:
        self.answer(raylet_pb2.LeaseReply(status=TIMEOUT, reason="cancelled"))

    @property
    def waiting(self) -> bool:
        return not self._answered.is_set()


class FakeRaylet:
    """No worker is ever free: requests wait until withdrawn; ``grant_on_withdrawal``
    names one whose grant crosses its withdrawal (granted just before it arrives)."""

    address = "127.0.0.1:1"

    def __init__(self) -> None:
        self.calls: list[FakeCall] = []
        self.withdrawals: list[list[bytes]] = []
        self.returned: list[str] = []
        self.grant_on_withdrawal = b""
        self.hold_withdrawals = threading.Event()
        self.hold_withdrawals.set()
        self.changed = threading.Condition()

    def start_lease_request(self, request: raylet_pb2.LeaseRequest) -> FakeCall:
        call = FakeCall(request)
        with self.changed:
            self.calls.append(call)
            self.changed.notify_all()
        return call

    def withdraw_lease_requests(self, requester_worker_id: str, timeout: float,
                                request_ids: list[bytes] | tuple[bytes, ...] = ()) -> int:
        assert self.hold_withdrawals.wait(10)
        named = set(request_ids)
        waiting = [c for c in self.calls if c.waiting
                   and (not named or c.request.request_id in named)]
        for call in waiting:
            if call.request.request_id == self.grant_on_withdrawal:
                call.answer(raylet_pb2.LeaseReply(status=raylet_pb2.LeaseReply.GRANTED,
                                                  lease_id="raced", worker=Address(
                                                      "n", "127.0.0.1", 2, "w", 99).to_proto()))
            else:
                call.answer(raylet_pb2.LeaseReply(status=TIMEOUT, reason="withdrawn"))
        with self.changed:
            self.withdrawals.append(list(request_ids))
            self.changed.notify_all()
        return len(waiting)

    def return_worker(self, lease_id: str, *, worker_failed: bool = False,
                      disconnect: bool = False, timeout: float = 60.0) -> None:
        with self.changed:
            self.returned.append(lease_id)
            self.changed.notify_all()

    def wait_until(self, condition: Callable[[], bool], what: str) -> None:
        with self.changed:
            assert self.changed.wait_for(condition, timeout=10), what


class FakeWorker:
    worker_id = "driver-1"

    def __init__(self, raylet: FakeRaylet) -> None:
        self.raylet = raylet
        self.address = Address("node-1", "127.0.0.1", 3, self.worker_id, os.getpid())
        self.finished: list[tuple[bytes, str]] = []
        self.pool = ThreadPoolExecutor(max_workers=32)
        self.task_events = self.resolver = self

    def background(self, fn: Callable[..., Any], *args: Any) -> bool:
        self.pool.submit(fn, *args)
        return True

    def raylet_for_node(self, node_id: str) -> FakeRaylet:
        return self.raylet

    def finish_task(self, task: PendingTask, values: list[Any], state: str,
                    reported_by_executor: bool = False) -> None:
        self.finished.append((task.task_id, state))

    def record(self, *args: Any, **kwargs: Any) -> None:
        pass

    def resolve(self, task: PendingTask, ready: Callable[[PendingTask], None],
                failed: Callable[..., None]) -> None:
        ready(task)  # no ref arguments


def _task(i: int) -> PendingTask:
    spec = common_pb2.TaskSpec(task_id=i.to_bytes(8, "big"), job_id=b"\x01",
                               resources={"CPU": 1.0})
    return PendingTask(spec, [i.to_bytes(8, "big") + b"r"], [], [], retries_left=0)


def _eventually(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + 10
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.005)


@pytest.fixture
def setup(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[TaskSubmitter, FakeRaylet]]:
    monkeypatch.setenv("TRACEDRAY_LEASE_LINGER_S", str(LINGER_S))
    raylet = FakeRaylet()
    worker = FakeWorker(raylet)
    submitter = TaskSubmitter(worker)  # type: ignore[arg-type]
    try:
        yield submitter, raylet
    finally:
        raylet.hold_withdrawals.set()
        submitter.fail_all(RaySystemError("test over"))
        worker.pool.shutdown(wait=True)


def test_requests_no_task_needs_are_withdrawn_and_a_new_task_asks_again(
        setup: tuple[TaskSubmitter, FakeRaylet]) -> None:
    submitter, raylet = setup
    tasks = [_task(i) for i in range(3)]
    for task in tasks:
        submitter.submit(task)
    raylet.wait_until(lambda: len(raylet.calls) == 3, "a request per queued task")
    ids = [call.request.request_id for call in raylet.calls]
    assert len(set(ids)) == 3 and all(ids)
    # Needed: kept for many lingers.
    threading.Event().wait(10 * LINGER_S)
    assert raylet.withdrawals == [] and all(call.waiting for call in raylet.calls)

    # The tasks go (cancelled here; or run on leases held): their requests are surplus.
    # The newest request's grant crosses its withdrawal; the withdrawal is held until
    # a task was queued after it.
    raylet.grant_on_withdrawal = ids[2]
    raylet.hold_withdrawals.clear()
    for task in tasks:
        assert submitter.cancel(task.task_id, force=False)
    _eventually(lambda: submitter.statistics().lease_requests_withdrawn_total == 3,
                "the requests to be withdrawn")
    late = _task(9)
    submitter.submit(late)
    raylet.wait_until(lambda: len(raylet.calls) == 4,
                      "a task queued after the withdrawal to get a request of its own")
    raylet.hold_withdrawals.set()

    raylet.wait_until(lambda: raylet.returned == ["raced"],
                      "the worker granted to a withdrawn request to go straight back")
    assert sorted(raylet.withdrawals[0]) == sorted(ids)  # one withdrawal, all three
    assert [call.reply.status for call in raylet.calls[:2]] == [TIMEOUT, TIMEOUT]  # type: ignore[union-attr]
    assert raylet.calls[3].waiting and raylet.calls[3].request.request_id not in ids
    _eventually(lambda: submitter.statistics().pending_lease_requests == 1,
                "the withdrawn requests to end, the late task's left")
    stats = submitter.statistics()
    assert stats.lease_requests_withdrawn_total == 3 and stats.unneeded_grants_total == 1
    assert stats.leases == 0  # the raced grant was not kept
    # The late task still needs its request: never withdrawn.
    threading.Event().wait(10 * LINGER_S)
    assert len(raylet.withdrawals) == 1 and raylet.calls[3].waiting
