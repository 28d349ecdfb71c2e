"""How long a GCS client keeps retrying an unreachable GCS: a window from the first failure.

A GCS that was SIGKILLed comes back on the same port within seconds (the head raylet
restarts it); calls made meanwhile retry ``UNAVAILABLE`` every ``RETRY_INTERVAL_S``.
The window is counted from the *first* failure of the outage, shared by every call of the
client, and reset by any call that gets through: successive calls during one long outage
do not each start a fresh window (which made a dead GCS look like an endless wait), and a
call made late in an outage gives up when the outage has lasted the window, not later.
Each call still retries for ``CALL_GRACE_S``: once the window is over, a call made just as
the GCS came back must not fail on a channel still waiting out its reconnect backoff.
"""

from __future__ import annotations

import enum
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

# Pause between two attempts of a call while the GCS is unreachable: short, so that a call
# resumes within a fraction of a second of the GCS coming back (grpc's own reconnect
# backoff is capped too, in rpc.py).
RETRY_INTERVAL_S = 0.1
# How long any call retries, whatever the outage's window says: a few of gRPC's reconnect
# backoffs (at most 0.25 s, rpc.py), so a GCS that is back is found.
CALL_GRACE_S = 1.0


class Verdict(enum.Enum):
    RETRY = "retry"
    GIVE_UP = "give_up"


def verdict(first_failure: float, call_failed_at: float, now: float, window_s: float) -> Verdict:
    """Retry while the outage that began at ``first_failure`` is shorter than the window,
    or the call has retried for less than ``CALL_GRACE_S`` (since its own first failure)."""
    if now - first_failure < window_s or now - call_failed_at < CALL_GRACE_S:
        return Verdict.RETRY
    return Verdict.GIVE_UP


def retry_pause(first_failure: float, call_failed_at: float, now: float,
                window_s: float) -> float:
    """How long to wait before the next attempt: the retry interval, never past the end of
    the window or of the call's grace, whichever is later."""
    end = max(first_failure + window_s, call_failed_at + CALL_GRACE_S)
    return max(0.0, min(RETRY_INTERVAL_S, end - now))


@dataclass(frozen=True)
class Outage:
    started: float  # monotonic time of the first failure
    lasted_s: float
    began: bool = False  # this failure began the outage


@dataclass(frozen=True)
class ReconnectStatistics:
    window_s: float
    outages: int  # outages seen (each began with a failed call)
    gave_up: int  # calls that raised GcsUnavailableError
    longest_outage_s: float  # of those that ended (a call got through again)
    current_outage_s: float  # 0 while the GCS answers


class ReconnectWindow:
    """The client's view of the current outage (thread-safe; one per ``GcsClient``)."""

    def __init__(self, window_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.window_s = window_s
        self._clock = clock
        self._lock = threading.Lock()
        self._first_failure: float | None = None
        self._outages = 0
        self._gave_up = 0
        self._longest_s = 0.0

    def now(self) -> float:
        return self._clock()

    def failed(self, call_failed_at: float) -> tuple[Verdict, Outage]:
        """Note a failed attempt of a call whose first attempt failed at ``call_failed_at``
        (``now()``); says whether to try again and how long the outage has lasted."""
        now = self._clock()
        with self._lock:
            first = self._first_failure
            began = first is None
            if first is None:
                first = self._first_failure = now
                self._outages += 1
            decision = verdict(first, call_failed_at, now, self.window_s)
            self._gave_up += decision is Verdict.GIVE_UP
        return decision, Outage(first, now - first, began)

    def pause(self, call_failed_at: float) -> float:
        with self._lock:
            first = self._first_failure
        return RETRY_INTERVAL_S if first is None else \
            retry_pause(first, call_failed_at, self._clock(), self.window_s)

    def succeeded(self) -> float | None:
        """A call got through: the outage it ends lasted this long (None: there was none)."""
        if self._first_failure is None:  # the common case reads without the lock
            return None
        now = self._clock()
        with self._lock:
            first, self._first_failure = self._first_failure, None
            if first is None:
                return None
            self._longest_s = max(self._longest_s, now - first)
        return now - first

    def statistics(self) -> ReconnectStatistics:
        now = self._clock()
        with self._lock:
            first = self._first_failure
            return ReconnectStatistics(
                window_s=self.window_s, outages=self._outages, gave_up=self._gave_up,
                longest_outage_s=self._longest_s,
                current_outage_s=0.0 if first is None else now - first)
