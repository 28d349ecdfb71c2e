"""sys.exit, KeyboardInterrupt, built-in actor methods and import paths, as in Ray."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import cloudpickle
import pytest

import tracedray
from tracedray import exceptions

cloudpickle.register_pickle_by_value(sys.modules[__name__])

pytestmark = pytest.mark.integration


@tracedray.remote(max_retries=0)
def exits(code: Any) -> None:
    sys.exit(code)


@tracedray.remote
def interrupted() -> None:
    raise KeyboardInterrupt


@tracedray.remote
class Counter:
    def __init__(self) -> None:
        self.value = 0

    def add(self, n: int) -> int:
        self.value += n
        return self.value

    def quit(self) -> None:
        sys.exit(3)


def test_sys_exit_in_a_task_ends_its_worker(shared_ray: Any) -> None:
    with pytest.raises(exceptions.WorkerCrashedError) as info:
        shared_ray.get(exits.remote(7), timeout=60)
    assert "7" in str(info.value)  # the exit code the task asked for


def test_sys_exit_is_retried_under_max_retries(shared_ray: Any, tmp_path: Path) -> None:
    marker = tmp_path / "attempts"

    @shared_ray.remote(max_retries=2)
    def exits_once() -> str:
        with open(marker, "a") as f:
            f.write("x")
        if marker.read_text() == "x":
            sys.exit(1)
        return "second attempt"

    assert shared_ray.get(exits_once.remote(), timeout=60) == "second attempt"
    assert marker.read_text() == "xx"


def test_keyboard_interrupt_in_a_task_is_a_cancellation(shared_ray: Any) -> None:
    with pytest.raises(exceptions.TaskCancelledError):
        shared_ray.get(interrupted.remote(), timeout=60)


def test_sys_exit_in_an_actor_method_kills_the_actor(shared_ray: Any) -> None:
    actor = Counter.remote()
    assert shared_ray.get(actor.add.remote(1)) == 1
    with pytest.raises(exceptions.RayActorError):
        shared_ray.get(actor.quit.remote(), timeout=60)
    with pytest.raises(exceptions.RayActorError):
        shared_ray.get(actor.add.remote(1), timeout=60)


def test_sys_exit_in_an_actor_restarts_it_within_max_restarts(shared_ray: Any) -> None:
    actor = Counter.options(max_restarts=1).remote()
    assert shared_ray.get(actor.add.remote(5)) == 5
    with pytest.raises(exceptions.RayActorError):
        shared_ray.get(actor.quit.remote(), timeout=60)
    assert shared_ray.get(actor.add.remote(1), timeout=60) == 1  # a fresh instance
    shared_ray.kill(actor)


def test_builtin_actor_methods(shared_ray: Any) -> None:
    actor = Counter.remote()
    assert shared_ray.get(actor.__ray_ready__.remote(), timeout=60) is True
    actor.add.remote(4)
    assert shared_ray.get(actor.__ray_call__.remote(lambda self, k: self.value * k, 10)) == 40
    shared_ray.kill(actor)


@tracedray.remote
class Quitter:
    def __init__(self) -> None:
        self.value = 0

    def add(self, n: int) -> int:
        self.value += n
        return self.value

    def leave(self) -> None:
        tracedray.actor.exit_actor()


def test_exit_actor_ends_the_actor_for_good(shared_ray: Any) -> None:
    actor = Quitter.options(max_restarts=3, max_task_retries=3).remote()
    assert shared_ray.get(actor.add.remote(1)) == 1
    with pytest.raises(exceptions.RayActorError, match="exit_actor"):
        shared_ray.get(actor.leave.remote(), timeout=60)
    with pytest.raises(exceptions.ActorDiedError, match="exit_actor"):
        shared_ray.get(actor.add.remote(1), timeout=60)  # not restarted


def test_ray_terminate_runs_after_the_calls_before_it(shared_ray: Any) -> None:
    actor = Quitter.remote()
    before = actor.add.remote(5)
    actor.__ray_terminate__.remote()
    assert shared_ray.get(before, timeout=60) == 5
    with pytest.raises(exceptions.ActorDiedError, match="__ray_terminate__"):
        shared_ray.get(actor.add.remote(1), timeout=60)


def test_exit_actor_outside_an_actor_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="outside an actor"):
        tracedray.actor.exit_actor()


class Fatal(BaseException):
    pass


@tracedray.remote
class BrokenAtBirth:
    def __init__(self) -> None:
        raise Fatal("not even an Exception")

    def ping(self) -> str:
        return "pong"


def test_a_base_exception_in_the_constructor_kills_the_actor(shared_ray: Any) -> None:
    actor = BrokenAtBirth.remote()
    with pytest.raises(exceptions.ActorDiedError, match="not even an Exception"):
        shared_ray.get(actor.ping.remote(), timeout=60)

