"""One actor's lifecycle as a state machine: each event, from each state, gives the
actor's next state and the GCS's actions."""

from __future__ import annotations

import dataclasses

import pytest

from tracedray._proto.v1 import gcs_pb2
from tracedray.core.address import Address
from tracedray.core.gcs import actor_lifecycle as lc
from tracedray.core.gcs.actor_lifecycle import ActorState, Outcome

LIVING = (lc.PENDING_CREATION, lc.RESTARTING)
W1 = Address("n1", "127.0.0.1", 7000, "w1", 101, 7001)
W2 = Address("n1", "127.0.0.1", 7000, "w2", 102, 7002)


def actor(state: ActorState = lc.PENDING_CREATION, *, worker: Address | None = None,
          max_restarts: int = 1, num_restarts: int = 0, placing: tuple[str, ...] = (),
          recorded: Address | None = None, cause: str = "") -> lc.Actor:
    return lc.Actor(b"a", state, max_restarts, num_restarts=num_restarts, death_cause=cause,
                    worker=worker, recorded=recorded, placing=placing)


def kinds(step: lc.Step) -> list[type]:
    return [type(action) for action in step.actions]


def test_the_wire_states_are_the_protocols_strings() -> None:
    assert [state.value for state in ActorState] == [
        "PENDING_CREATION", "ALIVE", "RESTARTING", "DEAD"]


def test_a_registered_actor_is_recorded_then_placed() -> None:
    step = lc.register(b"a", max_restarts=2)
    assert step.actor.state is lc.PENDING_CREATION and step.actor.max_restarts == 2
    assert kinds(step) == [lc.Save, lc.Place]


@pytest.mark.parametrize("state", list(ActorState))
def test_a_recovered_actor_is_placed_again_only_while_its_creation_was_under_way(
        state: ActorState) -> None:
    step = lc.handle(actor(state), lc.Recovered())
    assert kinds(step) == ([lc.Place] if state in LIVING else [])


@pytest.mark.parametrize("state", LIVING)
def test_a_recovered_actor_goes_on_on_the_worker_the_raylet_kept_for_it(
        state: ActorState) -> None:
    step = lc.handle(actor(state), lc.Recovered(adopted=W1))
    assert step.actions == (lc.ResumeCreation("n1", W1),)
    assert step.actor.worker == W1 and step.actor.placing == ("n1",)
    # __init__ then ends on it as on any worker granted for the creation
    alive = lc.handle(step.actor, lc.InitEnded("n1", W1, Outcome.RETURNED))
    assert (alive.actor.state, alive.actor.recorded, alive.actor.placing) == (lc.ALIVE, W1, ())


def test_a_worker_kept_for_an_actor_killed_meanwhile_is_withdrawn() -> None:
    step = lc.handle(actor(lc.DEAD, cause="its job ended"), lc.Recovered(adopted=W1))
    assert step.actions == (lc.Withdraw("n1", "its job ended"),)


def test_a_record_recovers_the_worker_of_an_alive_actor_only() -> None:
    info = gcs_pb2.ActorInfo(actor_id=b"a", state="ALIVE", num_restarts=1, death_cause="x")
    info.address.CopyFrom(W1.to_proto())
    info.creation_task.actor_options.max_restarts = 3
    alive = lc.Actor.from_record(info)
    assert (alive.state, alive.worker, alive.recorded, alive.max_restarts) == (
        lc.ALIVE, W1, W1, 3)
    info.state = "RESTARTING"  # its address names its dead worker
    restarting = lc.Actor.from_record(info)
    assert restarting.worker is None and restarting.recorded == W1


# --- creation
@pytest.mark.parametrize("state", LIVING)
def test_a_chosen_node_is_asked_for_a_worker(state: ActorState) -> None:
    step = lc.handle(actor(state), lc.NodeChosen("n1"))
    assert step.actions == (lc.RequestWorker("n1"),) and step.actor.placing == ("n1",)


def test_a_dead_actor_asks_no_node() -> None:
    step = lc.handle(actor(lc.DEAD), lc.NodeChosen("n1"))
    assert step.actions == () and step.actor.placing == ()


@pytest.mark.parametrize("state", LIVING)
def test_a_worker_granted_to_a_living_actor_runs_its_init(state: ActorState) -> None:
    step = lc.handle(actor(state, placing=("n1",)), lc.LeaseAnswered("n1", W1))
    assert step.actions == (lc.RunCreation("n1", W1),)
    assert step.actor.worker == W1 and step.actor.placing == ("n1",)


@pytest.mark.parametrize("state", LIVING)
def test_no_worker_for_a_living_actor_is_a_failure(state: ActorState) -> None:
    step = lc.handle(actor(state, placing=("n1",)),
                     lc.LeaseAnswered("n1", None, "no worker: timeout"))
    assert step.actor.state is lc.RESTARTING and step.actor.placing == ()
    assert kinds(step) == [lc.Save, lc.Log, lc.Place]


def test_a_worker_granted_to_a_dead_actor_is_withdrawn() -> None:
    # The request reached the raylet after the withdrawal, or was granted just before it.
    step = lc.handle(actor(lc.DEAD, placing=("n1",), cause="killed"),
                     lc.LeaseAnswered("n1", W1))
    assert step.actions == (lc.Withdraw("n1", "killed"),) and step.actor.placing == ()


def test_a_dead_actor_without_a_worker_is_neither_failed_nor_restarted() -> None:
    # Its request was withdrawn (or the raylet is gone): a failure would restart it.
    step = lc.handle(actor(lc.DEAD, placing=("n1",)), lc.LeaseAnswered("n1", None, "x"))
    assert step.actor.state is lc.DEAD and kinds(step) == [lc.Log]
    assert step.actions[0].event == "actor.placement_withdrawn"  # type: ignore[union-attr]


@pytest.mark.parametrize("state", LIVING)
def test_an_init_that_returned_makes_the_actor_alive(state: ActorState) -> None:
    step = lc.handle(actor(state, worker=W1, placing=("n1",)),
                     lc.InitEnded("n1", W1, Outcome.RETURNED))
    assert (step.actor.state, step.actor.recorded, step.actor.placing) == (lc.ALIVE, W1, ())
    assert kinds(step) == [lc.Save, lc.Log]


@pytest.mark.parametrize("state", LIVING)
def test_an_init_that_raised_kills_the_actor_whatever_its_restarts(state: ActorState) -> None:
    step = lc.handle(actor(state, worker=W1, max_restarts=-1),
                     lc.InitEnded("n1", W1, Outcome.RAISED, "the actor's __init__ raised"))
    assert step.actor.state is lc.DEAD
    assert step.actor.death_cause == "the actor's __init__ raised"
    assert kinds(step) == [lc.Save, lc.Log, lc.Withdraw]  # its worker goes too


def test_a_worker_dying_in_init_restarts_the_actor_and_its_worker_goes() -> None:
    step = lc.handle(actor(worker=W1), lc.InitEnded("n1", W1, Outcome.WORKER_DIED, "died"))
    assert (step.actor.state, step.actor.num_restarts, step.actor.worker) == (
        lc.RESTARTING, 1, None)
    # Killed, not withdrawn: a withdrawal would take the next incarnation's creation too.
    assert kinds(step) == [lc.Save, lc.Log, lc.Place, lc.KillWorker]


@pytest.mark.parametrize("outcome", [Outcome.RETURNED, Outcome.WORKER_DIED])
@pytest.mark.parametrize("current", [None, W2])
def test_an_init_whose_worker_death_was_counted_already_leaves_the_restart_alone(
        outcome: Outcome, current: Address | None) -> None:
    # The raylet's report of the death came first and restarted the actor.
    before = actor(lc.RESTARTING, worker=current, num_restarts=1, placing=("n1",))
    step = lc.handle(before, lc.InitEnded("n1", W1, outcome))
    assert step.actions == () and step.actor == dataclasses.replace(before, placing=())


@pytest.mark.parametrize("outcome", list(Outcome))
def test_an_actor_declared_dead_during_init_stays_dead_and_loses_its_worker(
        outcome: Outcome) -> None:
    step = lc.handle(actor(lc.DEAD, cause="its job ended"), lc.InitEnded("n1", W1, outcome))
    assert step.actor.state is lc.DEAD
    assert step.actions == (lc.Withdraw("n1", "its job ended"),)


# --- failures, counted once
def decide(state: ActorState = lc.ALIVE, current: Address | None = W1, failed: str = "w1",
           *, num_restarts: int = 0, max_restarts: int = 1) -> lc.Step:
    return lc.handle(actor(state, worker=current, num_restarts=num_restarts,
                           max_restarts=max_restarts), lc.WorkerDied(failed, exit_code=1))


@pytest.mark.parametrize("state", [*LIVING, lc.ALIVE])
def test_the_current_workers_death_restarts_an_actor_with_restarts_left(
        state: ActorState) -> None:
    assert decide(state).actor.state is lc.RESTARTING
    step = decide(state, num_restarts=5, max_restarts=-1)
    assert (step.actor.state, step.actor.num_restarts) == (lc.RESTARTING, 6)


def test_the_current_workers_death_without_restarts_left_kills_the_actor() -> None:
    step = decide(num_restarts=1, max_restarts=1)
    assert step.actor.state is lc.DEAD
    assert step.actor.death_cause.endswith("(no restarts left of max_restarts=1)")
    assert decide(max_restarts=0).actor.death_cause == (
        "the actor's worker (pid 101) died: exit 1: ")


@pytest.mark.parametrize("current", [None, W2])
def test_a_death_counted_already_or_of_an_earlier_worker_does_nothing(
        current: Address | None) -> None:
    # None: the other account of it restarted the actor, which waits for a worker;
    # W2: the restart got one.
    step = decide(lc.RESTARTING, current=current, failed="w1")
    assert step.actions == () and step.actor.state is lc.RESTARTING


def test_a_dead_actor_stays_dead() -> None:
    step = decide(lc.DEAD)
    assert step.actions == () and step.actor.state is lc.DEAD


def test_a_worker_death_says_whether_it_was_during_init() -> None:
    death = lc.WorkerDied("w1", signal="SIGKILL", meaning="killed")
    assert lc.worker_death_cause(actor(lc.ALIVE, worker=W1), death) == (
        "the actor's worker (pid 101) died: SIGKILL: killed")
    assert lc.worker_death_cause(actor(worker=W1), death) == (
        "the actor's worker (pid 101) died during __init__: SIGKILL: killed")


def test_a_node_death_fails_the_actor_alive_there() -> None:
    alive = actor(lc.ALIVE, worker=W1, recorded=W1)
    step = lc.handle(alive, lc.NodeDied("n1"))
    assert step.actor.state is lc.RESTARTING and step.actor.death_cause == "its node n1 died"
    assert lc.handle(alive, lc.NodeDied("n2")).actions == ()
    restarting = actor(lc.RESTARTING, recorded=W1)
    assert lc.handle(restarting, lc.NodeDied("n1")).actions == ()


# --- kills
def test_a_kill_without_restart_makes_the_actor_dead_and_undoes_its_creations() -> None:
    before = actor(lc.RESTARTING, recorded=W1, placing=("n2", "n1", "n2"))
    step = lc.handle(before, lc.Killed(no_restart=True, cause="killed"))
    assert (step.actor.state, step.actor.death_cause) == (lc.DEAD, "killed")
    assert step.actions[2:] == (lc.KillWorker("n1", W1), lc.Withdraw("n1", "killed"),
                                lc.Withdraw("n2", "killed"))
    assert kinds(step)[:2] == [lc.Save, lc.Log]


def test_a_kill_with_restart_only_kills_the_worker() -> None:
    before = actor(lc.ALIVE, worker=W1, recorded=W1, placing=("n1",))
    step = lc.handle(before, lc.Killed(no_restart=False, cause="killed"))
    assert step.actor == before and step.actions == (lc.KillWorker("n1", W1),)
    assert lc.handle(actor(), lc.Killed(no_restart=False, cause="x")).actions == ()


def test_a_dead_actor_is_not_killed_again() -> None:
    assert lc.handle(actor(lc.DEAD, recorded=W1), lc.Killed(True, "again")).actions == ()


# --- reading
def test_a_wait_settles_on_death_or_life_after_enough_restarts() -> None:
    assert lc.settled(actor(lc.DEAD), min_restarts=3)
    assert lc.settled(actor(lc.ALIVE, num_restarts=1), min_restarts=1)
    assert not lc.settled(actor(lc.ALIVE), min_restarts=1)
    assert not lc.settled(actor(lc.RESTARTING, num_restarts=5), min_restarts=0)


def test_a_jobs_end_kills_creations_under_way_before_live_actors() -> None:
    alive, pending = actor(lc.ALIVE), dataclasses.replace(actor(), actor_id=b"p")
    assert lc.job_end_order([alive, pending]) == [pending, alive]


def test_the_raylet_gets_the_cause_on_one_line() -> None:
    raised = ("the actor's __init__ raised:\nRuntimeError in A.__init__() (pid=7)\n"
              "Traceback (most recent call last):\n  File \"x.py\", line 1\nRuntimeError: no")
    assert lc.one_line_cause(raised) == (
        "the actor's __init__ raised: RuntimeError in A.__init__() (pid=7)")
    assert lc.one_line_cause("killed with tracedray.kill()") == "killed with tracedray.kill()"
    assert lc.one_line_cause("") == ""


def test_a_long_cause_is_cut_and_says_so() -> None:
    cut = lc.one_line_cause("x" * 1000)
    assert len(cut) == lc.CAUSE_LIMIT and cut.endswith("…")
    assert lc.one_line_cause("y" * lc.CAUSE_LIMIT) == "y" * lc.CAUSE_LIMIT

