"""The GCS client's reconnect window runs from the outage's first failure, for every call."""

from __future__ import annotations

from tracedray.core.gcs.reconnect import (
    CALL_GRACE_S,
    RETRY_INTERVAL_S,
    ReconnectWindow,
    Verdict,
    retry_pause,
    verdict,
)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_verdict_counts_from_the_first_failure_with_a_grace_per_call() -> None:
    assert verdict(first_failure=10.0, call_failed_at=10.0, now=39.9, window_s=30.0) \
        is Verdict.RETRY
    assert verdict(first_failure=10.0, call_failed_at=10.0, now=40.0, window_s=30.0) \
        is Verdict.GIVE_UP
    # A call that began late in the outage still retries for its grace, no longer.
    assert verdict(first_failure=10.0, call_failed_at=50.0, now=50.5, window_s=30.0) \
        is Verdict.RETRY
    assert verdict(first_failure=10.0, call_failed_at=50.0, now=50.0 + CALL_GRACE_S,
                   window_s=30.0) is Verdict.GIVE_UP


def test_pause_is_the_retry_interval_but_never_past_the_window_or_grace() -> None:
    assert RETRY_INTERVAL_S <= 0.1
    assert retry_pause(0.0, 0.0, now=1.5, window_s=30.0) == RETRY_INTERVAL_S
    assert abs(retry_pause(0.0, 0.0, now=29.97, window_s=30.0) - 0.03) < 1e-9
    assert retry_pause(0.0, 0.0, now=31.0, window_s=30.0) == 0.0
    assert abs(retry_pause(0.0, 40.0, now=40.0 + CALL_GRACE_S - 0.02, window_s=30.0)
               - 0.02) < 1e-9


def test_later_failures_do_not_extend_the_window() -> None:
    """A stream of failed attempts (one call's retries, or many calls) gives up 30 s after
    the first failure, not 30 s after the last one."""
    clock = Clock()
    window = ReconnectWindow(30.0, clock)
    call = window.now()
    decision, outage = window.failed(call)
    assert decision is Verdict.RETRY and outage.lasted_s == 0.0
    for _ in range(29):
        clock.now += 1.0
        assert window.failed(call)[0] is Verdict.RETRY
    clock.now += 1.0
    decision, outage = window.failed(call)
    assert decision is Verdict.GIVE_UP and outage.lasted_s == 30.0
    # A new call in the same outage: its grace only, not a fresh 30 s window.
    clock.now += 5.0
    late = window.now()
    assert window.failed(late)[0] is Verdict.RETRY
    clock.now += CALL_GRACE_S
    decision, outage = window.failed(late)
    assert decision is Verdict.GIVE_UP and outage.lasted_s == 35.0 + CALL_GRACE_S


def test_a_success_ends_the_outage() -> None:
    clock = Clock()
    window = ReconnectWindow(30.0, clock)
    window.failed(window.now())
    clock.now += 29.0
    window.succeeded()
    clock.now += 10.0
    decision, outage = window.failed(window.now())  # a new outage: a new window
    assert decision is Verdict.RETRY and outage.lasted_s == 0.0
    assert window.pause(window.now()) == RETRY_INTERVAL_S


def test_statistics_count_outages_and_give_ups() -> None:
    clock = Clock()
    window = ReconnectWindow(2.0, clock)
    assert window.succeeded() is None  # no outage to end
    call = window.now()
    assert window.failed(call)[1].began
    clock.now += 0.5
    assert not window.failed(call)[1].began
    assert window.statistics().current_outage_s == 0.5
    assert window.succeeded() == 0.5
    call = window.now()
    window.failed(call)
    clock.now += 3.0
    assert window.failed(call)[0] is Verdict.GIVE_UP
    stats = window.statistics()
    assert (stats.outages, stats.gave_up, stats.longest_outage_s, stats.current_outage_s) == (
        2, 1, 0.5, 3.0)
