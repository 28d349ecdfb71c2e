"""The raylet's I/O shell around a worker whose lessee lost it: the book keeps it leased
(pure, tests/unit/test_leasing.py); the service kills it only if its exit is not seen
within the grace (no processes: a pool that records what it is told)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from tracedray.core.address import Address
from tracedray.core.raylet import lease_events as ev
from tracedray.core.raylet import lease_service
from tracedray.core.raylet.lease_service import LeaseService
from tracedray.core.raylet.leasing import KILLED_LESSEE_LOST_IT
from tracedray.core.raylet.worker_states import WorkerState

LESSEE = Address("n-caller", "10.0.0.9", 7000, "caller-worker", 4242)
GRACE_S = 0.05


class RecordingPool:
    """What the service tells the worker pool to do, recorded instead of done."""

    def __init__(self) -> None:
        self.workers: dict[str, Any] = {}
        self.kills: list[tuple[str, bool, str]] = []
        self.killed = threading.Event()

    def kill(self, worker_id: str, force: bool, *, reason: str = "", meaning: str = "") -> None:
        self.kills.append((worker_id, force, meaning))
        self.killed.set()

    def stop_idle(self, worker_id: str, meaning: str) -> None:
        raise AssertionError(f"no idle worker is stopped here ({worker_id})")


@pytest.fixture
def service(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[LeaseService, RecordingPool]]:
    monkeypatch.setattr(lease_service, "LOST_WORKER_GRACE_S", GRACE_S)
    pool = RecordingPool()
    with ThreadPoolExecutor(1) as background:
        yield LeaseService(node_id="local", total={"CPU": 1.0}, pool=pool,  # type: ignore[arg-type]
                           gcs=None,  # type: ignore[arg-type]
                           background=background, stopped=threading.Event(),
                           lock=threading.RLock()), pool


def _leased_worker(service: LeaseService) -> tuple[str, str]:
    """A registered worker granted to LESSEE: (worker id, lease id)."""
    [start] = [a for a in service._handle(ev.WorkersPrestarted(1))
               if isinstance(a, ev.StartWorker)]
    service._handle(ev.WorkerSpawned(start.worker_id, 4321))
    service._handle(ev.WorkerRegistered(start.worker_id, time.monotonic()))
    ask = ev.LeaseAsk({"CPU": 1.0}, requester=LESSEE, requester_worker_id=LESSEE.worker_id)
    [grant] = [a for a in service._handle(ev.LeaseRequested(1, ask))
               if isinstance(a, ev.Answer)]
    assert grant.outcome is ev.Outcome.GRANTED and grant.worker_id == start.worker_id
    return grant.worker_id, grant.lease_id


def _lose(service: LeaseService, lease_id: str) -> None:
    actions = service._handle(ev.LeaseReturned(lease_id, False, time.monotonic(), failed=True))
    assert [type(a) for a in actions] == [ev.StopUnlessExited]
    service._perform(actions)


def test_a_lost_worker_still_alive_after_the_grace_is_killed(
        service: tuple[LeaseService, RecordingPool]) -> None:
    leasing, pool = service
    worker_id, lease_id = _leased_worker(leasing)
    _lose(leasing, lease_id)
    assert leasing.state_of(worker_id) is WorkerState.LEASED  # held until its exit
    assert pool.killed.wait(5), "the worker was not killed after the grace"
    assert pool.kills == [(worker_id, True, KILLED_LESSEE_LOST_IT)]


def test_a_lost_worker_that_exits_within_the_grace_is_not_killed(
        service: tuple[LeaseService, RecordingPool]) -> None:
    leasing, pool = service
    worker_id, lease_id = _leased_worker(leasing)
    _lose(leasing, lease_id)
    leasing._perform(leasing._handle(ev.WorkerExited(worker_id)))  # died on its own
    assert not pool.killed.wait(GRACE_S * 10)
    assert pool.kills == []
    assert leasing.book.available == {"CPU": 1.0}  # its exit released the lease
