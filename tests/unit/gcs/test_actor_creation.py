"""The GCS's decisions at each step of an actor's creation, given the actor's state now."""

from __future__ import annotations

import pytest

from tracedray.core.gcs import actor_creation as ac

LIVING = ("PENDING_CREATION", "RESTARTING")


@pytest.mark.parametrize("state", LIVING)
def test_a_worker_granted_to_a_living_actor_runs_its_init(state: str) -> None:
    assert ac.after_lease(state, granted=True) == ac.CREATE


@pytest.mark.parametrize("state", LIVING)
def test_no_worker_for_a_living_actor_is_a_failure(state: str) -> None:
    assert ac.after_lease(state, granted=False) == ac.FAIL


def test_a_worker_granted_to_a_dead_actor_is_discarded() -> None:
    # The request reached the raylet after the withdrawal, or was granted just before it.
    assert ac.after_lease("DEAD", granted=True) == ac.DISCARD


def test_a_dead_actor_without_a_worker_is_neither_failed_nor_restarted() -> None:
    # Its request was withdrawn (or the raylet is gone): a failure would restart it.
    assert ac.after_lease("DEAD", granted=False) == ac.WITHDRAWN


@pytest.mark.parametrize("state", LIVING)
def test_an_init_that_returned_makes_the_actor_alive(state: str) -> None:
    assert ac.after_init(state, current=True, outcome=ac.RETURNED) == ac.ALIVE


@pytest.mark.parametrize("state", LIVING)
@pytest.mark.parametrize("outcome", [ac.RAISED, ac.WORKER_DIED])
def test_an_init_that_failed_is_a_failure_of_the_actor(state: str, outcome: str) -> None:
    # actor_failure decides: dead when __init__ raised, restarted if its worker died
    assert ac.after_init(state, current=True, outcome=outcome) == ac.FAIL


@pytest.mark.parametrize("outcome", [ac.RETURNED, ac.WORKER_DIED])
def test_an_init_whose_worker_death_was_counted_already_leaves_the_restart_alone(
        outcome: str) -> None:
    # The raylet's report of the death came first and restarted the actor.
    assert ac.after_init("RESTARTING", current=False, outcome=outcome) == ac.SUPERSEDED


@pytest.mark.parametrize("outcome", [ac.RETURNED, ac.RAISED, ac.WORKER_DIED])
@pytest.mark.parametrize("current", [True, False])
def test_an_actor_declared_dead_during_init_stays_dead_and_loses_its_worker(
        outcome: str, current: bool) -> None:
    assert ac.after_init("DEAD", current=current, outcome=outcome) == ac.DISCARD


def test_the_raylet_gets_the_cause_on_one_line() -> None:
    raised = ("the actor's __init__ raised:\nRuntimeError in A.__init__() (pid=7)\n"
              "Traceback (most recent call last):\n  File \"x.py\", line 1\nRuntimeError: no")
    assert ac.one_line_cause(raised) == (
        "the actor's __init__ raised: RuntimeError in A.__init__() (pid=7)")
    assert ac.one_line_cause("killed with tracedray.kill()") == "killed with tracedray.kill()"
    assert ac.one_line_cause("") == ""


def test_a_long_cause_is_cut_and_says_so() -> None:
    cut = ac.one_line_cause("x" * 1000)
    assert len(cut) == ac.CAUSE_LIMIT and cut.endswith("…")
    assert ac.one_line_cause("y" * ac.CAUSE_LIMIT) == "y" * ac.CAUSE_LIMIT
