"""Whether this worker is blocked in a get()/wait(), as its raylet must know.

A worker blocked waiting for values lends its CPU (the raylet may start a nested
task with it); the raylet hears each change of the outermost block only, and a
driver never tells it anything.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass

from tracedray import logs
from tracedray.exceptions import RaySystemError

log = logs.get_logger(__name__)


@dataclass(frozen=True)
class BlockedStatistics:
    depth: int  # nested get()/wait() calls blocked now
    blocks_total: int  # times the raylet was told this worker blocks
    notify_failures: int  # tellings the raylet did not answer


class BlockedState:
    def __init__(self, notify_blocked: Callable[[str, bool], None], worker_id: str, *,
                 tells_raylet: bool, on_blocked: Callable[[], None]) -> None:
        self._notify_blocked = notify_blocked  # the raylet's NotifyBlocked
        self._worker_id = worker_id
        self._tells_raylet = tells_raylet  # a worker process; a driver does not
        self._on_blocked = on_blocked
        self._depth = 0
        self._blocks = self._failures = 0
        self._lock = threading.Lock()

    def blocked(self) -> AbstractContextManager[None]:
        """A context in which this thread waits for values."""
        return _Blocked(self)

    def set_blocked(self, entering: bool) -> None:
        if not self._tells_raylet:
            return
        with self._lock:
            # Never below 0: settle may have reset it under a get() of a thread the
            # cancelled task left running.
            depth = self._depth = max(0, self._depth + (1 if entering else -1))
            changed = depth == (1 if entering else 0)
        if changed:
            if entering:
                with self._lock:
                    self._blocks += 1
                self._on_blocked()
            self._tell_raylet(entering)

    def _tell_raylet(self, blocked: bool) -> None:
        try:
            self._notify_blocked(self._worker_id, blocked)
        except RaySystemError as exc:
            with self._lock:
                self._failures += 1
            log.warning("raylet.notify_blocked_failed", error=str(exc))

    def settle(self) -> None:
        """After a cancelled task: not blocked, here and at the raylet.

        The cancel's interrupt may have landed inside a get()'s blocked/unblocked
        bookkeeping (:meth:`set_blocked`, ``_Blocked``) and left it unbalanced: the
        raylet told "blocked" and never "unblocked" (its CPU lent out while the worker
        goes on running tasks), or the depth left above 0 (the next task's get() would
        then not lend its CPU, and a nested task needing it would never start). The
        task is over, so nothing of it waits any more. An "unblocked" the raylet did
        not need is ignored there.
        """
        if not self._tells_raylet:
            return
        with self._lock:
            self._depth = 0
        self._tell_raylet(False)


    def statistics(self) -> BlockedStatistics:
        with self._lock:
            return BlockedStatistics(self._depth, self._blocks, self._failures)


class _Blocked:
    def __init__(self, state: BlockedState) -> None:
        self._state = state

    def __enter__(self) -> None:
        self._state.set_blocked(True)

    def __exit__(self, *exc: object) -> None:
        self._state.set_blocked(False)
