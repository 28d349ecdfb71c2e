"""A task submitter's lease traffic with raylets: requests (following spillbacks),
returns, withdrawals, and giving everything back when it closes.

What a request's answer means for the submitter is the book's to decide
(``submitter_book.py``); this module only talks to raylets, never under the lock but for
the moments a request starts waiting at a raylet and stops (so that the close and the
withdrawals know where it waits).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Protocol

from tracedray import logs
from tracedray._proto.v1 import raylet_pb2
from tracedray.core.address import Address
from tracedray.core.protocol.raylet_client import RayletClient
from tracedray.core.worker import submitter_events as ev
from tracedray.core.worker.lease_requests import LeaseAsk
from tracedray.core.worker.leases import LeaseReturn
from tracedray.core.worker.pending_task import PendingTask
from tracedray.core.worker.submitter_book import SubmitterBook
from tracedray.exceptions import RaySystemError

log = logs.get_logger("tracedray.core.worker.task_submitter")  # the submitter's lines

# How long a withdrawal waits for its raylet (the submitter gives idle leases back after
# that): a raylet that does not answer has them answered when it fails, or grants them
# and the worker goes straight back.
WITHDRAW_TIMEOUT_S = 1.0
# How long a closing submitter spends giving its leases back, in all: a raylet that
# does not answer by then takes them back itself once this process is gone.
CLOSE_BUDGET_S = 2.0
# Spillbacks a request follows before it fails.
MAX_HOPS = 8


class Raylets(Protocol):
    """Where the submitter's process finds raylets, and how it names itself to them."""

    @property
    def raylet(self) -> RayletClient: ...  # the local one

    @property
    def address(self) -> Address: ...

    @property
    def worker_id(self) -> str: ...

    def raylet_for_node(self, node_id: str) -> RayletClient: ...


class LeaseClient:
    """``lock`` is the submitter's (the book's) lock."""

    def __init__(self, raylets: Raylets, lock: threading.RLock, book: SubmitterBook) -> None:
        self._raylets = raylets
        self._lock = lock
        self._book = book
        self._requesting = 0  # requests under way (the close waits for them to end)
        self._requests_over = threading.Condition(lock)

    def request(self, ask: LeaseAsk, example: PendingTask,
                answered: Callable[[ev.AskAnswered], None]) -> None:
        """Ask for a lease for ``ask``'s key and hand the answer to ``answered``, which
        gives back a worker granted after the close before this returns (the close
        waits for it)."""
        with self._lock:
            sending = not self._book.closed and not ask.withdrawn  # else queued before
            if sending:  # the close (or the withdrawal)
                self._requesting += 1
        if not sending:
            answered(ev.AskAnswered(ask, ev.AskOutcome.NOT_SENT, time.monotonic()))
            return
        try:
            answered(self._answer(ask, example))
        finally:
            with self._lock:
                self._requesting -= 1
                self._requests_over.notify_all()

    def _answer(self, ask: LeaseAsk, example: PendingTask) -> ev.AskAnswered:
        raylets = self._raylets
        key, spec = ask.key, example.spec
        preferred = key.rpartition("@")[2]
        raylet = raylets.raylet_for_node(preferred) if preferred else raylets.raylet
        request = raylet_pb2.LeaseRequest(
            scheduling_key=key, resources=dict(spec.resources),
            requester=raylets.address.to_proto(), job_id=spec.job_id, task_id=spec.task_id,
            input_bytes_by_node=example.input_bytes_by_node, request_id=ask.request_id)
        try:
            reply, raylet = self._lease_from(raylet, request, ask)
        except RaySystemError as exc:
            if not self._book.closed and not ask.withdrawn:  # else cancelled by the close
                log.warning("lease.request_failed", error=str(exc), raylet=raylet.address)
            return ev.AskAnswered(ask, ev.AskOutcome.FAILED, time.monotonic())
        granted = reply is not None and reply.status == raylet_pb2.LeaseReply.GRANTED
        outcome = ev.AskOutcome.GRANTED if granted else ev.AskOutcome.NOT_GRANTED
        return ev.AskAnswered(ask, outcome, time.monotonic(), raylet, reply)

    def _lease_from(self, raylet: RayletClient, request: raylet_pb2.LeaseRequest,
                    ask: LeaseAsk) -> tuple[raylet_pb2.LeaseReply | None, RayletClient]:
        """Ask ``raylet``, following spillbacks. A remote raylet that cannot be reached
        (its node died, perhaps not yet declared dead) is replaced by the local one,
        which then keeps the request (grant_or_reject) instead of spilling it back to
        the same dead node from a stale view. The reply is None when the request was
        withdrawn before a hop. Raises ``RaySystemError`` when the local raylet fails or
        the hops run out."""
        local = self._raylets.raylet
        for _ in range(MAX_HOPS):
            try:
                reply = self._hop(raylet, request, ask)
            except RaySystemError as exc:
                if raylet is local or self._book.closed:
                    raise
                log.warning("lease.node_unreachable", raylet=raylet.address, error=str(exc),
                            fallback=local.address)
                raylet, request.grant_or_reject = local, True
                continue
            if reply is None or reply.status != raylet_pb2.LeaseReply.SPILLBACK:
                return reply, raylet
            raylet = RayletClient(Address.from_proto(reply.spillback_raylet).target)
            request.grant_or_reject = True
        raise RaySystemError(f"lease request for {request.scheduling_key} bounced between "
                             f"raylets {MAX_HOPS} times")

    def _hop(self, raylet: RayletClient, request: raylet_pb2.LeaseRequest, ask: LeaseAsk
             ) -> raylet_pb2.LeaseReply | None:
        """One hop of a lease request, known to the close and to withdrawals while it
        waits; None (not sent) once withdrawn."""
        with self._lock:
            if self._book.closed:
                raise RaySystemError("the task submitter is closed")
            if ask.withdrawn:
                return None
            call = raylet.start_lease_request(request)
            ask.raylet, ask.call = raylet, call
        try:
            return call.result()
        finally:
            with self._lock:
                ask.raylet = ask.call = None

    def withdraw(self, withdraw: ev.Withdraw) -> None:
        raylet = withdraw.raylet
        try:
            waiting = raylet.withdraw_lease_requests(self._raylets.worker_id,
                                                     timeout=WITHDRAW_TIMEOUT_S,
                                                     request_ids=withdraw.request_ids)
        except RaySystemError as exc:  # its requests end when the raylet answers or fails
            log.debug("lease.withdraw_failed", raylet=raylet.address, error=str(exc))
            return
        log.info("lease.requests_withdrawn", scheduling_key=withdraw.key, raylet=raylet.address,
                 requests=len(withdraw.request_ids), waiting=waiting)

    @staticmethod
    def return_worker(lease: LeaseReturn, timeout: float = 60.0) -> None:
        try:
            lease.raylet.return_worker(lease.lease_id, worker_failed=lease.failed,
                                       disconnect=lease.running, timeout=timeout)
        except RaySystemError as exc:
            log.debug("lease.return_failed", lease_id=lease.lease_id, error=str(exc))

    def give_all_back(self, leases: list[LeaseReturn], waiting_at: list[RayletClient]) -> None:
        """Leave no lease behind, within CLOSE_BUDGET_S: on the closing thread, not the
        process's background pool, which stops with it (the raylets would otherwise only
        take the leases back once it is gone, killing their workers).

        First the raylets where requests wait withdraw them, so that no worker given
        back (by this process or another) is granted to this one again; then the leases
        go back (one whose worker still runs tasks of this process to be stopped, see
        LeaseReturn); then the close waits for the requests to end: each is answered, or
        was granted just before its withdrawal and its thread gives that lease back. A
        request still waiting at the end (a raylet that did not answer) is cancelled.
        """
        deadline = time.monotonic() + CLOSE_BUDGET_S
        for raylet in waiting_at:
            try:
                raylet.withdraw_lease_requests(self._raylets.worker_id,
                                               timeout=max(0.1, deadline - time.monotonic()))
            except RaySystemError as exc:
                log.debug("lease.withdraw_failed", raylet=raylet.address, error=str(exc))
        for lease in leases:
            self.return_worker(lease, timeout=max(0.1, deadline - time.monotonic()))
        with self._lock:
            self._requests_over.wait_for(lambda: self._requesting == 0,
                                         timeout=max(0.0, deadline - time.monotonic()))
            for ask in self._book.asks():
                if ask.call is not None:
                    ask.call.cancel()
