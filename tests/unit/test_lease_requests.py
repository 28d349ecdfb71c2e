"""How many lease requests a scheduling key needs, which to withdraw (pure), and the
raylet's memory of requests withdrawn before they arrived."""

from __future__ import annotations

import pytest

from tracedray.core.raylet.early_withdrawals import EarlyWithdrawals
from tracedray.core.worker.lease_requests import (
    MAX_PENDING_LEASE_REQUESTS,
    LeaseAsk,
    lease_requests_wanted,
    requests_to_withdraw,
    surplus_lease_requests,
)

PATIENT = {"unneeded_for_s": 1.0, "patience_s": 0.025}  # past the key's patience


@pytest.mark.parametrize(("queued", "behind", "wanted"), [
    (0, 0, 0), (3, 0, 3), (0, 3, 3), (2, 5, 7), (100, 0, MAX_PENDING_LEASE_REQUESTS),
    (10, 10, MAX_PENDING_LEASE_REQUESTS)])
def test_a_key_wants_one_request_per_task_without_a_worker_capped(
        queued: int, behind: int, wanted: int) -> None:
    assert lease_requests_wanted(queued, behind) == wanted


def test_after_a_burst_every_request_left_is_surplus() -> None:
    # The burst's tasks all went out on the leases held: nothing queued or behind.
    assert surplus_lease_requests(0, 0, 16, **PATIENT) == 16


@pytest.mark.parametrize(("queued", "behind", "requested", "surplus"), [
    (0, 6, 16, 10),  # the queue drained, six tasks wait behind running ones
    (5, 0, 3, 0),  # fewer requested than needed: nothing to withdraw (_pump asks for more)
    (40, 0, 16, 0),  # the cap: all needed
    (0, 2, 2, 0)])
def test_only_requests_beyond_the_need_are_surplus(
        queued: int, behind: int, requested: int, surplus: int) -> None:
    assert surplus_lease_requests(queued, behind, requested, **PATIENT) == surplus


def test_a_key_that_needed_all_its_requests_a_moment_ago_keeps_them() -> None:
    # Work in waves: between two waves nothing is needed, but withdrawing would only make
    # the next wave ask again.
    assert surplus_lease_requests(0, 0, 4, unneeded_for_s=0.01, patience_s=0.025) == 0
    assert surplus_lease_requests(0, 0, 4, unneeded_for_s=0.025, patience_s=0.025) == 4


def _asks(count: int) -> list[LeaseAsk]:
    return [LeaseAsk(bytes([i]), "CPU=1@") for i in range(count)]


def test_the_newest_requests_are_withdrawn_first() -> None:
    asks = _asks(5)
    # The newest wait furthest back in the raylet's queue; the oldest may be next.
    assert requests_to_withdraw(asks, 1, 1, **PATIENT) == asks[2:]


def test_requests_withdrawn_already_are_not_counted_again() -> None:
    asks = _asks(5)
    asks[4].withdrawn = asks[3].withdrawn = True
    assert requests_to_withdraw(asks, 1, 0, **PATIENT) == asks[1:3]
    assert requests_to_withdraw(asks, 3, 0, **PATIENT) == []


def test_nothing_is_withdrawn_while_tasks_need_every_request() -> None:
    asks = _asks(MAX_PENDING_LEASE_REQUESTS)
    assert requests_to_withdraw(asks, 100, 8, **PATIENT) == []
    assert requests_to_withdraw(asks, 0, 0, unneeded_for_s=0.0, patience_s=0.025) == []


def test_a_request_withdrawn_before_it_arrives_is_answered_once_it_does() -> None:
    early = EarlyWithdrawals()
    early.add("driver-a", [b"\x01", b"\x02"], now=10.0)
    assert early.claim("driver-a", b"\x01")
    assert not early.claim("driver-a", b"\x01")  # once
    assert not early.claim("driver-b", b"\x02")  # ids are the requester's own
    assert early.claim("driver-a", b"\x02")
    assert not early.claim("driver-a", b"\x03")


def test_withdrawals_of_requests_that_never_arrive_are_forgotten() -> None:
    # A request granted or spilled back before its withdrawal came never arrives again.
    early = EarlyWithdrawals(remember_s=60.0)
    early.add("driver-a", [b"\x01"], now=0.0)
    early.add("driver-a", [b"\x02"], now=30.0)
    early.add("driver-a", [b"\x03"], now=61.0)  # forgets the first
    assert len(early) == 2
    assert not early.claim("driver-a", b"\x01")
    early.add("driver-a", [b"\x02"], now=62.0)  # withdrawn again: remembered from now
    early.add("driver-a", [], now=121.5)  # forgets the third (61.0), not the second
    assert len(early) == 1 and early.claim("driver-a", b"\x02")
