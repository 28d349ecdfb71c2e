"""The raylet's lease book: every transition as event in, actions out, no processes."""

from __future__ import annotations

import itertools

import pytest

from tracedray.core.address import Address
from tracedray.core.raylet import lease_events as ev
from tracedray.core.raylet import worker_states as ws
from tracedray.core.raylet.leasing import (
    KILLED_LESSEE_LOST_IT,
    SHUTTING_DOWN,
    WITHDRAWN_UNNEEDED,
    LeaseBook,
    unused_actor_workers,
)
from tracedray.core.raylet.scheduler import Placement
from tracedray.core.raylet.worker_states import WorkerSlot, WorkerState

LESSEE = Address("n-caller", "10.0.0.9", 7000, "caller-worker", 4242)
PEER_RAYLET = Address("peer", "10.0.0.2", 6000)


class Book:
    """A LeaseBook with numbered lease and worker ids, and helpers to drive it."""

    def __init__(self, cpus: float = 2.0, **extra: float) -> None:
        leases, workers = itertools.count(1), itertools.count(1)
        self.book = LeaseBook("local", {"CPU": cpus, **extra},
                              new_lease_id=lambda: f"lease-{next(leases)}",
                              new_worker_id=lambda: f"w{next(workers)}")
        self.tickets = itertools.count(1)
        self.now = 100.0

    def __call__(self, event: ev.Event) -> list[ev.Action]:
        return self.book.handle(event)

    def request(self, cpu: float = 1.0, **fields: object) -> tuple[int, list[ev.Action]]:
        ticket = next(self.tickets)
        fields.setdefault("requester", LESSEE)
        fields.setdefault("requester_worker_id", LESSEE.worker_id)
        return ticket, self(ev.LeaseRequested(ticket, ev.LeaseAsk({"CPU": cpu}, **fields)))

    def register(self, worker_id: str) -> list[ev.Action]:
        self.now += 1
        self(ev.WorkerSpawned(worker_id, 1000 + int(worker_id[1:])))
        return self(ev.WorkerRegistered(worker_id, self.now))

    def idle_workers(self, count: int) -> list[str]:
        actions = self(ev.WorkersPrestarted(count))
        ids = [a.worker_id for a in actions if isinstance(a, ev.StartWorker)]
        for worker_id in ids:
            self.register(worker_id)
        return ids

    def grant(self, cpu: float = 1.0, **fields: object) -> ev.Answer:
        ticket, actions = self.request(cpu, **fields)
        (answer,) = answers(actions)
        assert answer.ticket == ticket and answer.outcome is ev.Outcome.GRANTED
        return answer

    def slot(self, worker_id: str) -> WorkerSlot:
        return self.book.workers[worker_id]


def answers(actions: list[ev.Action]) -> list[ev.Answer]:
    return [a for a in actions if isinstance(a, ev.Answer)]


def of(kind: type, actions: list[ev.Action]) -> list:
    return [a for a in actions if isinstance(a, kind)]


def peer(node_id: str = "peer", cpus: float = 4.0, free: float | None = None, *,
         alive: bool = True, queue: int = 0) -> ev.Peer:
    return ev.Peer(node_id, alive, {"CPU": cpus}, {"CPU": cpus if free is None else free},
                   queue, PEER_RAYLET._replace(node_id=node_id))


# --- grant here, queue, start workers
def test_a_request_with_no_idle_worker_starts_one_and_waits() -> None:
    b = Book()
    ticket, actions = b.request()
    assert of(ev.StartWorker, actions) == [ev.StartWorker("w1")] and not answers(actions)
    assert b.book.queued() == 1 and b.slot("w1").state is WorkerState.STARTING


def test_the_registered_worker_is_granted_to_the_waiting_request() -> None:
    b = Book()
    ticket, _ = b.request()
    (grant,) = answers(b.register("w1"))
    assert (grant.ticket, grant.outcome, grant.worker_id, grant.lease_id) == (
        ticket, ev.Outcome.GRANTED, "w1", "lease-1")
    assert grant.decision is not None and grant.decision.action is Placement.GRANT_HERE
    slot = b.slot("w1")
    assert (slot.state, slot.lease_id, slot.lessee, slot.resources) == (
        WorkerState.LEASED, "lease-1", LESSEE, {"CPU": 1.0})
    assert b.book.available == {"CPU": 1.0} and b.book.queued() == 0


def test_a_worker_already_starting_serves_the_next_request_instead_of_a_new_one() -> None:
    b = Book()
    b(ev.WorkersPrestarted(1))
    _, actions = b.request()
    assert not of(ev.StartWorker, actions)
    assert answers(b.register("w1"))[0].worker_id == "w1"


def test_one_starting_worker_serves_one_request_only() -> None:
    b = Book(cpus=2.0)
    b(ev.WorkersPrestarted(1))
    _, first = b.request()
    _, second = b.request()
    assert not of(ev.StartWorker, first) and of(ev.StartWorker, second) == [ev.StartWorker("w2")]


def test_requests_beyond_the_free_resources_wait_without_starting_workers() -> None:
    b = Book(cpus=1.0)
    _, first = b.request()
    _, second = b.request()
    assert len(of(ev.StartWorker, first)) == 1 and not of(ev.StartWorker, second)
    assert b.book.queued() == 2


def test_queued_requests_are_granted_in_arrival_order() -> None:
    b = Book(cpus=1.0)
    first, _ = b.request()
    second, _ = b.request()
    assert answers(b.register("w1"))[0].ticket == first
    (grant,) = answers(b(ev.LeaseReturned("lease-1", False, b.now)))
    assert grant.ticket == second and grant.worker_id == "w1"


def test_the_most_recently_idle_worker_is_reused() -> None:
    b = Book()
    b.idle_workers(2)
    assert b.grant().worker_id == "w2"


def test_an_actor_grant_has_no_lessee_and_keeps_its_actor() -> None:
    b = Book()
    b.idle_workers(1)
    grant = b.grant(actor_id=b"actor-1", requester=None, may_spill=False)
    slot = b.slot(grant.worker_id)
    assert (slot.state, slot.lessee, slot.actor_id) == (WorkerState.ACTOR, None, b"actor-1")
    assert b.book.held_task_leases() == []


def test_statistics_count_requests_grants_and_workers_by_state() -> None:
    b = Book()
    b.idle_workers(2)
    b.grant()
    b.request(cpu=8.0)
    stats = b.book.statistics()
    assert (stats.pending_leases, stats.infeasible_leases, stats.leases_granted) == (0, 1, 1)
    assert stats.workers_by_state[WorkerState.IDLE] == 1
    assert stats.workers_by_state[WorkerState.LEASED] == 1


# --- spill back and infeasible
def test_a_busy_node_spills_back_to_a_peer_with_free_resources() -> None:
    b = Book(cpus=1.0)
    b(ev.PeersSeen((peer(),)))
    b.idle_workers(1)
    b.grant()
    ticket, actions = b.request()
    (answer,) = answers(actions)
    assert (answer.ticket, answer.outcome) == (ticket, ev.Outcome.SPILLBACK)
    assert answer.spillback == PEER_RAYLET and b.book.queued() == 0


def test_grant_or_reject_requests_queue_here_instead_of_spilling() -> None:
    b = Book(cpus=1.0)
    b(ev.PeersSeen((peer(),)))
    b.idle_workers(1)
    b.grant()
    _, actions = b.request(may_spill=False)
    assert not answers(actions) and b.book.queued() == 1


def test_a_request_no_node_fits_is_infeasible_reported_and_kept() -> None:
    b = Book(cpus=2.0)
    b(ev.PeersSeen((peer(cpus=2.0),)))
    ticket, actions = b.request(cpu=8.0, task_id=b"\x01\x02")
    assert not answers(actions) and not of(ev.StartWorker, actions)
    (report,) = of(ev.ReportInfeasible, actions)
    assert report.ask.task_id == b"\x01\x02" and "no node has" in report.reason
    (warning,) = of(ev.Log, actions)
    assert (warning.level, warning.event, warning.fields["task_id"]) == (
        "warning", "lease.infeasible", "0102")
    assert (b.book.queued(), b.book.infeasible()) == (0, 1)


def test_an_infeasible_request_spills_to_a_node_that_fits_when_it_joins() -> None:
    b = Book(cpus=2.0)
    ticket, _ = b.request(cpu=8.0)
    assert answers(b(ev.PeersSeen((peer("small", cpus=2.0),)))) == []
    (answer,) = answers(b(ev.PeersSeen((peer("big", cpus=16.0),))))
    assert (answer.ticket, answer.outcome, answer.spillback.node_id) == (
        ticket, ev.Outcome.SPILLBACK, "big")
    assert b.book.infeasible() == 0


def test_a_queued_request_moves_to_a_peer_that_is_free_in_the_fresh_view() -> None:
    b = Book(cpus=1.0)
    b(ev.PeersSeen((peer(free=0.0),)))
    b.idle_workers(1)
    b.grant()
    ticket, actions = b.request()
    assert not answers(actions)  # the peer looked busy
    (answer,) = answers(b(ev.PeersSeen((peer(free=4.0),))))
    assert (answer.ticket, answer.outcome) == (ticket, ev.Outcome.SPILLBACK)


def test_queued_actor_requests_are_not_respilled() -> None:
    b = Book(cpus=1.0)
    b(ev.PeersSeen((peer(free=0.0),)))
    b.idle_workers(1)
    b.grant()
    b.request(actor_id=b"a", requester=None, may_spill=False)
    assert answers(b(ev.PeersSeen((peer(free=4.0),)))) == []


def test_a_failed_peer_view_keeps_the_last_one() -> None:
    b = Book(cpus=2.0)
    b(ev.PeersSeen((peer("big", cpus=16.0),)))
    b(ev.PeersSeen(None))
    _, actions = b.request(cpu=8.0)
    assert answers(actions)[0].spillback.node_id == "big"


# --- returns, exits, CPU lending
def test_a_returned_worker_is_idle_and_its_resources_free() -> None:
    b = Book()
    b.idle_workers(1)
    grant = b.grant()
    b(ev.LeaseReturned(grant.lease_id, False, 500.0))
    slot = b.slot(grant.worker_id)
    assert (slot.state, slot.lease_id, slot.lessee, slot.idle_since) == (
        WorkerState.IDLE, "", None, 500.0)
    assert b.book.available == {"CPU": 2.0}
    assert b(ev.LeaseReturned(grant.lease_id, False, 501.0)) == []  # twice: nothing


def test_a_worker_given_back_while_running_its_lessees_tasks_is_killed() -> None:
    b = Book()
    b.idle_workers(1)
    grant = b.grant()
    actions = b(ev.LeaseReturned(grant.lease_id, True, b.now))
    (log,) = of(ev.Log, actions)
    (kill,) = of(ev.KillWorker, actions)
    assert log.event == "lease.returned_running" and log.fields["lessee_pid"] == 4242
    assert kill.worker_id == grant.worker_id and kill.force
    assert kill.reason.startswith(ws.STOP_LESSEE_LEFT + ": pid 4242")
    assert b.book.available == {"CPU": 1.0}  # held until its exit
    b(ev.WorkerExited(grant.worker_id))
    assert b.book.available == {"CPU": 2.0}


def test_a_worker_returned_as_failed_is_never_granted_again() -> None:
    # Its lessee's connection broke (the worker died, say after a forced cancel) before
    # the raylet saw the exit: granting it again would hand out a dead worker.
    b = Book(cpus=1.0)
    b.idle_workers(1)
    grant = b.grant()
    actions = b(ev.LeaseReturned(grant.lease_id, False, b.now, failed=True))
    assert actions == [ev.StopUnlessExited(grant.worker_id, ws.STOP_LESSEE_LOST_IT,
                                           KILLED_LESSEE_LOST_IT)]
    assert b.slot(grant.worker_id).state is WorkerState.LEASED  # not idle, not killed
    _, waiting = b.request()
    assert answers(waiting) == []  # not the failed worker
    assert b.book.available == {"CPU": 0.0}  # held until its exit
    actions = b(ev.WorkerExited(grant.worker_id))
    assert of(ev.StartWorker, actions)  # the waiting request gets a new worker


def test_an_exit_releases_the_lease_and_starts_a_worker_for_waiting_work() -> None:
    b = Book(cpus=1.0)
    b.idle_workers(1)
    grant = b.grant()
    b.request()
    actions = b(ev.WorkerExited(grant.worker_id))
    assert b.slot(grant.worker_id).state is WorkerState.DEAD
    assert of(ev.StartWorker, actions) == [ev.StartWorker("w2")]
    assert b(ev.LeaseReturned(grant.lease_id, False, b.now)) == []  # gone with the worker


def test_a_blocked_task_lends_its_cpu_to_the_next_request() -> None:
    b = Book(cpus=1.0, GPU=1.0)
    b.idle_workers(2)
    grant = b.grant(cpu=1.0)
    ticket, actions = b.request()
    assert not answers(actions)
    (lent,) = answers(b(ev.WorkerBlocked(grant.worker_id, True)))
    assert lent.ticket == ticket and b.slot(grant.worker_id).state is WorkerState.BLOCKED
    b(ev.WorkerBlocked(grant.worker_id, False))
    assert b.slot(grant.worker_id).state is WorkerState.LEASED
    assert b.book.available["CPU"] == -1.0  # briefly over-committed, as in Ray


def test_a_blocked_workers_exit_releases_what_it_still_held() -> None:
    b = Book(cpus=2.0, GPU=1.0)
    b.idle_workers(1)
    grant = b.grant(cpu=1.0)
    b.slot(grant.worker_id).resources["GPU"] = 1.0
    b.book.available["GPU"] = 0.0
    b(ev.WorkerBlocked(grant.worker_id, True))
    assert b.book.available == {"CPU": 2.0, "GPU": 0.0}
    b(ev.WorkerExited(grant.worker_id))
    assert b.book.available == {"CPU": 2.0, "GPU": 1.0}


def test_blocking_news_about_a_worker_not_leased_is_ignored() -> None:
    b = Book()
    (worker,) = b.idle_workers(1)
    b(ev.WorkerBlocked(worker, True))
    assert b.slot(worker).state is WorkerState.IDLE and b.book.available == {"CPU": 2.0}


# --- leases taken back
def test_a_lease_whose_lessee_died_is_reclaimed_once() -> None:
    b = Book()
    b.idle_workers(1)
    grant = b.grant()
    assert [h.lease_id for h in b.book.held_task_leases()] == [grant.lease_id]
    event = ev.LeaseReclaimed(grant.lease_id, grant.worker_id, LESSEE, "its node died")
    actions = b(event)
    (log,) = of(ev.Log, actions)
    (kill,) = of(ev.KillWorker, actions)
    assert (log.level, log.event, log.fields["reclaimed_total"]) == (
        "warning", "lease.reclaimed", 1)
    assert kill.reason.startswith(ws.STOP_LESSEE_DIED) and "its node died" in kill.meaning
    assert b(event) == [] and b.book.held_task_leases() == []
    assert b(ev.LeaseReturned(grant.lease_id, False, b.now)) == []  # its exit releases it
    assert b.book.statistics().leases_reclaimed == 1


def test_a_lease_returned_and_granted_again_is_not_reclaimed_for_the_old_lessee() -> None:
    b = Book()
    b.idle_workers(1)
    first = b.grant()
    b(ev.LeaseReturned(first.lease_id, False, b.now))
    other = LESSEE._replace(pid=5151, worker_id="other")
    second = b.grant(requester=other)
    assert b(ev.LeaseReclaimed(first.lease_id, first.worker_id, LESSEE, "died")) == []
    assert b(ev.LeaseReclaimed(second.lease_id, second.worker_id, LESSEE, "died")) == []


# --- withdrawals
def test_a_request_whose_requester_went_away_is_withdrawn() -> None:
    b = Book(cpus=1.0)
    ticket, _ = b.request()
    actions = b(ev.RequesterGone(ticket))
    assert answers(actions) == [ev.Answer(ticket, ev.Outcome.WITHDRAWN,
                                          "the requester went away")]
    assert of(ev.Log, actions)[0].level == "debug" and b.book.queued() == 0
    assert b(ev.RequesterGone(ticket)) == []


def test_named_withdrawals_answer_waiting_requests_and_those_still_on_their_way() -> None:
    b = Book(cpus=1.0)
    waiting, _ = b.request(request_id=b"r1")
    kept, _ = b.request(request_id=b"r2")
    actions = b(ev.RequestsWithdrawn(LESSEE.worker_id, frozenset({b"r1", b"r3"}), 0.0))
    assert answers(actions) == [ev.Answer(waiting, ev.Outcome.WITHDRAWN, WITHDRAWN_UNNEEDED)]
    late, actions = b.request(request_id=b"r3")
    assert answers(actions) == [ev.Answer(late, ev.Outcome.WITHDRAWN, WITHDRAWN_UNNEEDED)]
    assert b.book.queued() == 1  # r2


def test_withdrawing_without_ids_drops_all_of_a_requesters_and_none_without_one() -> None:
    b = Book(cpus=1.0)
    b.request()
    b.request()
    b.request(actor_id=b"a", requester=None, requester_worker_id="", may_spill=False)
    assert b(ev.RequestsWithdrawn("", frozenset(), 0.0)) == []
    actions = b(ev.RequestsWithdrawn(LESSEE.worker_id, frozenset(), 0.0))
    assert {a.reason for a in answers(actions)} == {"the requester is shutting down"}
    assert len(answers(actions)) == 2 and b.book.queued() == 1


# --- actors the GCS does not want
def test_a_dead_actors_requests_are_answered_and_its_workers_killed() -> None:
    b = Book(cpus=1.0)
    b.idle_workers(1)
    granted = b.grant(actor_id=b"a", requester=None, may_spill=False)
    waiting, _ = b.request(actor_id=b"a", requester=None, may_spill=False)
    actions = b(ev.ActorCreationWithdrawn(b"a", "its owner died"))
    assert [a.ticket for a in answers(actions)] == [waiting]
    (kill,) = of(ev.KillWorker, actions)
    assert kill.worker_id == granted.worker_id
    assert kill.reason == f"{ws.STOP_ACTOR_DEAD}: its owner died"
    assert b(ev.ActorCreationWithdrawn(b"a", "again")) == []  # being killed already
    assert b(ev.ActorCreationWithdrawn(b"", "task leases")) == []


def test_a_restarted_gcs_releases_the_actor_workers_it_does_not_use() -> None:
    b = Book(cpus=3.0)
    b.idle_workers(3)
    used = b.grant(actor_id=b"a", requester=None, may_spill=False)
    unused = b.grant(actor_id=b"b", requester=None, may_spill=False)
    b.grant()  # a task lease: not the GCS's
    actions = b(ev.UnusedActorWorkersReleased(frozenset({used.worker_id}), "restarted"))
    assert [k.worker_id for k in of(ev.KillWorker, actions)] == [unused.worker_id]
    assert of(ev.KillWorker, actions)[0].reason.startswith(ws.STOP_ACTOR_UNUSED)


def test_a_restarted_gcs_adopts_one_worker_of_each_actor_it_was_creating() -> None:
    b = Book(cpus=3.0)
    b.idle_workers(3)
    first = b.grant(actor_id=b"a", requester=None, may_spill=False)
    second = b.grant(actor_id=b"a", requester=None, may_spill=False)  # overlapping restarts
    other = b.grant(actor_id=b"b", requester=None, may_spill=False)
    actions = b(ev.UnusedActorWorkersReleased(frozenset(), "restarted", frozenset({b"a"})))
    (adopted,) = of(ev.ActorWorkerAdopted, actions)
    assert adopted.actor_id == b"a"
    assert adopted.worker_id in (first.worker_id, second.worker_id)
    spare = ({first.worker_id, second.worker_id} - {adopted.worker_id}).pop()
    assert sorted(k.worker_id for k in of(ev.KillWorker, actions)) == sorted(
        [spare, other.worker_id])


def test_unused_actor_workers_are_the_live_ones_the_gcs_does_not_name() -> None:
    def slot(worker_id: str, state: WorkerState = WorkerState.ACTOR, actor_id: bytes = b"a",
             killing: bool = False) -> WorkerSlot:
        return WorkerSlot(worker_id, state, actor_id=actor_id, killing=killing)

    workers = [slot("used"), slot("unused"), slot("dying", killing=True),
               slot("dead", WorkerState.DEAD), slot("task", WorkerState.LEASED, b""),
               slot("idle", WorkerState.IDLE, b"")]
    assert [w.worker_id for w in unused_actor_workers(workers, {"used"})] == ["unused"]
    assert unused_actor_workers(workers, {"used", "unused"}) == []


def test_an_actor_grant_its_gcs_abandoned_is_discarded() -> None:
    b = Book()
    b.idle_workers(2)
    actor = b.grant(actor_id=b"a", requester=None, may_spill=False)
    task = b.grant()
    assert b(ev.AbandonedActorGrant(task.lease_id)) == []
    (kill,) = of(ev.KillWorker, b(ev.AbandonedActorGrant(actor.lease_id)))
    assert kill.reason.startswith(ws.STOP_ACTOR_UNUSED)


# --- worker lifecycle
def test_a_worker_being_killed_is_never_granted_nor_made_idle() -> None:
    b = Book()
    b(ev.WorkersPrestarted(1))
    (kill,) = of(ev.KillWorker, b(ev.KillRequested("w1", True, ws.STOP_NOT_REGISTERED, "why")))
    assert (kill.reason, kill.meaning) == (ws.STOP_NOT_REGISTERED, "why")
    assert b.register("w1") == [] and b.slot("w1").state is WorkerState.STARTING
    assert b.book.starting_workers() == []


def test_a_reaped_worker_stops_and_no_longer_counts() -> None:
    b = Book()
    first, second = b.idle_workers(2)
    assert b.book.live_task_workers() == 2
    assert b(ev.IdleWorkerReaped(first, "idle 2s")) == [ev.StopIdleWorker(first, "idle 2s")]
    assert b.slot(first).state is WorkerState.STOPPING and b.book.live_task_workers() == 1
    assert [w.worker_id for w in b.book.idle_task_workers()] == [second]
    b.grant()
    assert b(ev.IdleWorkerReaped(second, "leased meanwhile")) == []


def test_a_failed_spawn_is_forgotten_so_the_next_dispatch_starts_another() -> None:
    b = Book(cpus=1.0)
    b.request()
    b(ev.WorkerSpawnFailed("w1"))
    assert "w1" not in b.book.workers
    assert of(ev.StartWorker, b(ev.PeersSeen(None))) == [ev.StartWorker("w2")]


def test_a_stopping_node_answers_what_waits_and_grants_nothing_more() -> None:
    b = Book(cpus=1.0)
    b.idle_workers(1)
    grant = b.grant()
    waiting, _ = b.request()
    actions = b(ev.NodeStopping())
    assert answers(actions) == [ev.Answer(waiting, ev.Outcome.WITHDRAWN, SHUTTING_DOWN)]
    assert b(ev.WorkerExited(grant.worker_id)) == []
    assert b(ev.LeaseReturned(grant.lease_id, False, b.now)) == []


@pytest.mark.parametrize("state", list(WorkerState))
def test_a_dead_workers_exit_is_idempotent_from_any_state(state: WorkerState) -> None:
    b = Book()
    (worker,) = b.idle_workers(1)
    b.slot(worker).state = state
    b(ev.WorkerExited(worker))
    assert b.slot(worker).state is WorkerState.DEAD
    assert b(ev.WorkerExited(worker)) == []
