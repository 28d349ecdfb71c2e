"""The submit inbox: items reach the handler in the order put, in batches, on its thread
or on a caller's that drains it; nothing is left behind at close."""

from __future__ import annotations

import threading

from tracedray.core.worker.submit_inbox import SubmitInbox

NEVER = float("inf")  # no put is a lone one: each goes through the inbox thread


def test_items_are_handed_over_in_order_and_in_batches() -> None:
    handed: list[list[int]] = []
    first_batch_in, release = threading.Event(), threading.Event()

    def handler(batch: list[int]) -> None:
        handed.append(batch)
        first_batch_in.set()
        release.wait(10)

    inbox: SubmitInbox[int] = SubmitInbox(handler, "test-inbox", lone_after_s=NEVER)
    inbox.put(0)
    assert first_batch_in.wait(10)  # the inbox thread holds [0] in the handler
    for item in range(1, 100):
        inbox.put(item)
    release.set()
    inbox.close()
    assert handed == [[0], list(range(1, 100))]  # what came in meanwhile: one batch
    stats = inbox.statistics()
    assert (stats.submitted_total, stats.batches_total, stats.largest_batch) == (100, 2, 99)


def test_drain_returns_once_everything_put_before_is_handed_over() -> None:
    handed: list[int] = []
    inbox: SubmitInbox[int] = SubmitInbox(handed.extend, "test-inbox", lone_after_s=NEVER)
    for item in range(1000):
        inbox.put(item)
        if item % 100 == 0:
            inbox.drain()
            assert handed == list(range(item + 1))
    inbox.close()
    assert handed == list(range(1000))


def test_after_close_a_put_is_handed_over_by_its_caller_and_errors_are_counted() -> None:
    handed: list[int] = []

    def handler(batch: list[int]) -> None:
        if batch == [13]:
            raise RuntimeError("bad batch")
        handed.extend(batch)

    inbox: SubmitInbox[int] = SubmitInbox(handler, "test-inbox", lone_after_s=NEVER)
    inbox.close()
    inbox.put(7)
    inbox.put(13)
    assert handed == [7]
    assert inbox.statistics().handler_errors_total == 1
    assert inbox.statistics().submitted_total == 2


def test_a_lone_put_is_handed_over_by_its_caller_at_once() -> None:
    handed: list[tuple[int, str]] = []
    inbox: SubmitInbox[int] = SubmitInbox(
        lambda batch: handed.extend((i, threading.current_thread().name) for i in batch),
        "test-inbox", lone_after_s=3600)
    inbox.put(1)  # the first put is lone: nothing came before it
    assert handed == [(1, threading.current_thread().name)]
    inbox.put(2)  # within the hour after: through the inbox
    inbox.put(3)
    inbox.drain()
    assert [i for i, _ in handed] == [1, 2, 3]
    assert inbox.statistics().drained_by_caller_total >= 1
    inbox.close()
