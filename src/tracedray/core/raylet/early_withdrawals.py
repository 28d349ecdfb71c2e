"""Lease requests withdrawn before they reached this raylet.

A requester withdraws requests no task needs any more by their ids
(``WithdrawLeaseRequests.request_ids``), at the raylet it sent each of them to. One
whose RPC is still on its way (or waits in the server's queue) is not waiting here yet
when the withdrawal is handled: its id is kept here, and the request is answered as
withdrawn the moment it arrives, instead of waiting for a worker nobody wants.

An id whose request was answered before its withdrawal came (granted, spilled back) is
never claimed; it is forgotten after ``REMEMBER_S``. Not thread-safe: the raylet uses it
under its lock.
"""

from __future__ import annotations

from collections.abc import Iterable

# Far longer than a request takes to arrive, short enough that the ids of requests
# answered before their withdrawal do not pile up.
REMEMBER_S = 60.0


class EarlyWithdrawals:
    def __init__(self, remember_s: float = REMEMBER_S) -> None:
        self._remember_s = remember_s
        # (requester worker id, request id) -> when withdrawn, oldest first
        self._since: dict[tuple[str, bytes], float] = {}

    def add(self, requester: str, request_ids: Iterable[bytes], now: float) -> None:
        """Remember that ``requester`` withdrew ``request_ids`` (none waiting here)."""
        self._forget_before(now - self._remember_s)
        for request_id in request_ids:
            self._since.pop((requester, request_id), None)  # to the end: oldest first
            self._since[(requester, request_id)] = now

    def claim(self, requester: str, request_id: bytes) -> bool:
        """True (once) if the request arriving now was withdrawn already."""
        return self._since.pop((requester, request_id), None) is not None

    def _forget_before(self, cutoff: float) -> None:
        while self._since:
            oldest = next(iter(self._since))
            if self._since[oldest] >= cutoff:
                return
            del self._since[oldest]

    def __len__(self) -> int:
        return len(self._since)
