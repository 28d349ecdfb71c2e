"""Concurrent pulls of one object share one transfer."""

from __future__ import annotations

import threading

import pytest

from tracedray.core.raylet.transfers import TransferTable
from tracedray.exceptions import RaySystemError


def _concurrently(table: TransferTable, pull: object, callers: int) -> list[object]:
    results: list[object] = []
    lock = threading.Lock()

    def call() -> None:
        try:
            outcome: object = table.run("obj", pull)  # type: ignore[arg-type]
        except RaySystemError as exc:
            outcome = exc
        with lock:
            results.append(outcome)

    threads = [threading.Thread(target=call) for _ in range(callers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    return results


def test_callers_during_a_transfer_join_it() -> None:
    table = TransferTable()
    started, release = threading.Event(), threading.Event()
    pulls = []

    def pull() -> None:
        pulls.append(1)
        started.set()
        release.wait(10)

    first = threading.Thread(target=lambda: table.run("obj", pull))
    first.start()
    assert started.wait(10)
    joiners = threading.Thread(target=lambda: _concurrently(table, pull, 3))
    joiners.start()
    while table.statistics().shared_total < 3:
        threading.Event().wait(0.01)
    release.set()
    first.join(10)
    joiners.join(10)
    assert pulls == [1]
    stats = table.statistics()
    assert (stats.started_total, stats.shared_total, stats.in_progress) == (1, 3, 0)


def test_a_failed_transfer_fails_every_waiter_and_the_next_call_retries() -> None:
    table = TransferTable()
    gate = threading.Event()

    def failing() -> None:
        gate.wait(10)
        raise RaySystemError("source node gone")

    threading.Timer(0.2, gate.set).start()
    results = _concurrently(table, failing, 4)
    assert len(results) == 4 and all(isinstance(r, RaySystemError) for r in results)
    assert table.statistics().failed_total == 1
    assert table.run("obj", lambda: None) is False  # nothing in progress: a new transfer
    with pytest.raises(RaySystemError):
        table.run("other", failing)


def test_a_free_during_a_transfer_marks_it_and_no_other() -> None:
    table = TransferTable()
    seen: list[str | None] = []

    def pull() -> None:
        table.mark_freed(["obj", "other"], "owner died")  # "other" has no transfer
        seen.append(table.freed_during("obj"))

    table.run("obj", pull)
    table.mark_freed(["obj"], "released")  # after the transfer: nothing to mark
    table.run("obj", lambda: seen.append(table.freed_during("obj")))
    assert seen == ["owner died", None]
    assert table.freed_during("other") is None
