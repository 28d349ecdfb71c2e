"""The task submitter's leasing decisions as pure transitions: events in, actions out
(``SubmitterBook``; no threads, no sockets: connections and raylets are plain records)."""

from __future__ import annotations

from typing import Any

from tracedray._proto.v1 import common_pb2, raylet_pb2
from tracedray.core.address import Address
from tracedray.core.worker import submitter_events as ev
from tracedray.core.worker.lease_requests import MAX_PENDING_LEASE_REQUESTS
from tracedray.core.worker.leases import PIPELINE_DEPTH, Lease, LeaseReturn, LeaseState
from tracedray.core.worker.pending_task import PendingTask
from tracedray.core.worker.submitter_book import SubmitterBook

KEY = "CPU=1@"
LINGER_S = 1.0
GRANTED = raylet_pb2.LeaseReply.GRANTED


class Conn:
    def __init__(self, address: Address) -> None:
        self.address = address
        self.broken = False


class Raylet:
    def __init__(self, address: str = "127.0.0.1:1") -> None:
        self.address = address


def _book() -> SubmitterBook:
    return SubmitterBook(LINGER_S, Conn)  # type: ignore[arg-type]


def _task(i: int, key: str = KEY) -> PendingTask:
    spec = common_pb2.TaskSpec(task_id=i.to_bytes(8, "big"), job_id=b"\x01",
                               resources={"CPU": 1.0})
    task = PendingTask(spec, [i.to_bytes(8, "big") + b"r"], [], [], retries_left=0)
    task.scheduling_key = key
    return task


def _of(actions: list[ev.Action], kind: type) -> list[Any]:
    return [a for a in actions if type(a) is kind]


def _grant(book: SubmitterBook, ask: Any, lease_id: str, now: float = 0.0,
           raylet: Any = None) -> list[ev.Action]:
    reply = raylet_pb2.LeaseReply(status=GRANTED, lease_id=lease_id, reason="because",
                                  worker=Address("n1", "127.0.0.1", 7, f"w-{lease_id}",
                                                 100).to_proto())
    return book.handle(ev.AskAnswered(ask, ev.AskOutcome.GRANTED, now, raylet or Raylet(),
                                      reply))


def _leased(book: SubmitterBook, tasks: int) -> tuple[list[PendingTask], Lease, list[ev.Action]]:
    """``tasks`` queued and one lease granted for them; the grant's actions."""
    queued = [_task(i) for i in range(tasks)]
    asks = _of(book.handle(ev.TasksReady(queued, 0.0)), ev.RequestLease)
    actions = _grant(book, asks[0].ask, "L1")
    (lease,) = book.leases()
    return queued, lease, actions


def test_ready_tasks_ask_for_a_lease_each_up_to_the_cap() -> None:
    book = _book()
    actions = book.handle(ev.TasksReady([_task(i) for i in range(20)], 5.0))
    requests = _of(actions, ev.RequestLease)
    assert len(requests) == len(actions) == MAX_PENDING_LEASE_REQUESTS
    assert len({r.ask.request_id for r in requests}) == MAX_PENDING_LEASE_REQUESTS
    assert all(r.ask.key == KEY and r.ask.since == 5.0 for r in requests)
    assert book.queued() == 20 and len(book.asks()) == MAX_PENDING_LEASE_REQUESTS


def test_cancelled_ready_tasks_are_not_queued() -> None:
    book = _book()
    task = _task(1)
    task.cancelled = True
    assert book.handle(ev.TasksReady([task], 0.0)) == []
    assert book.queued() == 0


def test_a_grant_pipelines_queued_tasks_onto_the_lease_the_first_carrying_the_decision(
) -> None:
    book = _book()
    tasks, lease, actions = _leased(book, PIPELINE_DEPTH + 2)
    dispatches = _of(actions, ev.Dispatch)
    assert [d.task for d in dispatches] == tasks[:PIPELINE_DEPTH]
    assert [d.decided for d in dispatches] == [True] + [False] * (PIPELINE_DEPTH - 1)
    assert lease.state is LeaseState.BUSY and list(lease.inflight) == [
        t.task_id for t in tasks[:PIPELINE_DEPTH]]
    assert all(t.lease is lease for t in tasks[:PIPELINE_DEPTH])
    assert lease.decision["tracedray.scheduling.reason"] == "because"
    assert book.queued() == 2
    stats = book.statistics()
    # One request per task asked (PIPELINE_DEPTH + 2), less the one granted.
    assert (stats.queued, stats.inflight, stats.lease_requests) == (
        2, PIPELINE_DEPTH, PIPELINE_DEPTH + 1)
    assert stats.leases_by_state == {LeaseState.IDLE: 0, LeaseState.BUSY: 1}


def test_a_result_frees_room_for_the_next_queued_task_and_the_last_one_idles_the_lease(
) -> None:
    book = _book()
    tasks, lease, _ = _leased(book, PIPELINE_DEPTH + 1)
    first = tasks[0]
    actions = book.handle(ev.ResultsArrived(lease.conn, [(first, ev.Verdict.DONE)], 3.0))  # type: ignore[arg-type]
    assert [d.task for d in _of(actions, ev.Dispatch)] == [tasks[PIPELINE_DEPTH]]
    assert lease.state is LeaseState.BUSY
    rest = [(t, ev.Verdict.DONE) for t in tasks[1:]]
    book.handle(ev.ResultsArrived(lease.conn, rest, 4.0))  # type: ignore[arg-type]
    assert lease.state is LeaseState.IDLE and lease.idle_since == 4.0 and not lease.inflight
    stats = book.statistics()
    assert stats.leases_by_state == {LeaseState.IDLE: 1, LeaseState.BUSY: 0}
    assert stats.inflight == stats.queued == 0


def test_a_stolen_task_handed_back_goes_first_in_its_queue() -> None:
    book = _book()
    tasks, lease, _ = _leased(book, PIPELINE_DEPTH + 1)
    stolen = tasks[PIPELINE_DEPTH - 1]
    stolen.steal_requested = True
    actions = book.handle(ev.ResultsArrived(lease.conn, [(stolen, ev.Verdict.REQUEUED)], 1.0))  # type: ignore[arg-type]
    # Room again on the lease: the requeued task goes out again ahead of the queued one.
    assert [d.task for d in _of(actions, ev.Dispatch)] == [stolen]
    assert stolen.lease is lease and not stolen.steal_requested


def test_a_retried_task_queues_after_the_others_and_a_lost_input_is_rebuilt_first() -> None:
    book = _book()
    tasks, lease, _ = _leased(book, PIPELINE_DEPTH + 1)
    actions = book.handle(ev.ResultsArrived(lease.conn, [  # type: ignore[arg-type]
        (tasks[0], ev.Verdict.RETRY), (tasks[1], ev.Verdict.RETRY_AFTER_LOSS)], 1.0))
    assert [d.task for d in _of(actions, ev.Dispatch)] == [tasks[PIPELINE_DEPTH], tasks[0]]
    assert _of(actions, ev.RetryAfterLoss) == [ev.RetryAfterLoss(tasks[1], True)]
    assert tasks[1].lease is None


def test_an_idle_lease_steals_back_a_task_waiting_behind_another() -> None:
    book = _book()
    tasks, busy, _ = _leased(book, PIPELINE_DEPTH)
    asks = book.asks()
    actions = _grant(book, asks[0], "L2")
    steals = _of(actions, ev.StealBack)
    assert steals == [ev.StealBack(tasks[-1].task_id, busy.worker)]
    assert tasks[-1].steal_requested


def test_a_grant_to_a_withdrawn_request_goes_straight_back() -> None:
    book = _book()
    asks = _of(book.handle(ev.TasksReady([_task(1)], 0.0)), ev.RequestLease)
    book.handle(ev.QueuedTaskCancelled(asks[0].example))
    assert book.queued() == 0
    # Unneeded for a patience (half a linger): withdrawn at the raylet it waits at.
    raylet = Raylet()
    asks[0].ask.raylet = raylet
    assert book.handle(ev.LingerTick(LINGER_S / 4)) == []
    withdrawals = book.handle(ev.LingerTick(LINGER_S))
    assert withdrawals == [ev.Withdraw(raylet, KEY, [asks[0].ask.request_id])]  # type: ignore[arg-type]
    assert asks[0].ask.withdrawn and book.withdrawn_total == 1
    actions = _grant(book, asks[0].ask, "late", raylet=raylet)
    assert actions == [ev.ReturnGrant(LeaseReturn(raylet, "late", False), False, KEY, 100)]  # type: ignore[arg-type]
    assert book.unneeded_grants == 1 and book.leases() == [] and book.asks() == []


def test_a_failed_request_is_asked_again_later_unless_withdrawn() -> None:
    book = _book()
    asks = [r.ask for r in _of(book.handle(ev.TasksReady([_task(1), _task(2)], 0.0)),
                               ev.RequestLease)]
    assert book.handle(ev.AskAnswered(asks[0], ev.AskOutcome.FAILED, 1.0)) == [
        ev.RetryRequestLater(KEY)]
    asks[1].withdrawn = True
    assert book.handle(ev.AskAnswered(asks[1], ev.AskOutcome.FAILED, 1.0)) == []
    assert book.asks() == []


def test_a_broken_connection_loses_the_lease_and_hands_its_tasks_over() -> None:
    book = _book()
    tasks, lease, _ = _leased(book, 2)
    actions = book.handle(ev.ConnectionBroke(lease.conn, 1.0))  # type: ignore[arg-type]
    assert actions == [ev.ReturnLease(lease, failed=True), ev.WorkerLost(lease, tasks)]
    assert lease.state is LeaseState.LOST and book.leases() == [] and not lease.inflight
    assert book.handle(ev.ConnectionBroke(lease.conn, 2.0)) == []  # type: ignore[arg-type]


def test_a_broken_lease_is_passed_over_and_given_back_as_failed() -> None:
    book = _book()
    tasks, lease, _ = _leased(book, 1)
    book.handle(ev.ResultsArrived(lease.conn, [(tasks[0], ev.Verdict.DONE)], 1.0))  # type: ignore[arg-type]
    lease.conn.broken = True  # before the submitter hears of it
    actions = book.handle(ev.TasksReady([_task(5)], 1.5))
    assert [type(a) for a in actions] == [ev.RequestLease]
    actions = book.handle(ev.ConnectionBroke(lease.conn, 2.0))  # type: ignore[arg-type]
    assert actions == [ev.ReturnLease(lease, failed=True)]  # the queued task has its request
    assert lease.state is LeaseState.LOST


def test_a_lease_idle_for_a_linger_is_given_back_unless_its_key_has_work_queued() -> None:
    book = _book()
    tasks, lease, _ = _leased(book, 1)
    book.handle(ev.ResultsArrived(lease.conn, [(tasks[0], ev.Verdict.DONE)], 10.0))  # type: ignore[arg-type]
    assert book.handle(ev.IdleLeasesDue(10.0 + LINGER_S / 2)) == []
    assert book.handle(ev.IdleLeasesDue(10.0 + LINGER_S)) == [ev.ReturnLease(lease, False)]
    assert lease.state is LeaseState.RETURNED and book.leases() == []


def test_the_close_gives_every_lease_back_and_later_grants_go_back_at_once() -> None:
    book = _book()
    tasks, lease, _ = _leased(book, 3)
    waiting = book.asks()
    raylet = Raylet("127.0.0.1:2")
    waiting[0].raylet = raylet
    (give_back,) = book.handle(ev.Closing())
    assert give_back == ev.GiveAllBack(
        [lease.conn], [LeaseReturn(lease.raylet, "L1", False, running=True)], [raylet])  # type: ignore[arg-type]
    assert book.closed and book.leases() == [] and book.queued() == 0
    actions = _grant(book, waiting[0], "after", raylet=raylet)
    assert actions == [ev.ReturnGrant(LeaseReturn(raylet, "after", False), True, KEY, 100)]  # type: ignore[arg-type]
    assert book.unneeded_grants == 0
