"""Actors through a real cluster: ordering, handles, names, lifetimes, restarts, kill."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

import cloudpickle
import pytest

import tracedray
from tracedray import exceptions

cloudpickle.register_pickle_by_value(sys.modules[__name__])

pytestmark = pytest.mark.integration


@tracedray.remote
class Counter:
    def __init__(self, start: int = 0) -> None:
        self.value = start

    def increment(self, by: int = 1) -> int:
        self.value += by
        return self.value

    def read(self) -> int:
        return self.value

    def pid(self) -> int:
        return os.getpid()

    def actor_id(self) -> str | None:
        return tracedray.get_runtime_context().get_actor_id()


@tracedray.remote
class Log:
    """Records calls in arrival order, to check per-caller ordering."""

    def __init__(self) -> None:
        self.entries: list[Any] = []

    def append(self, item: Any) -> None:
        self.entries.append(item)

    def slow_append(self, item: Any, seconds: float) -> None:
        time.sleep(seconds)
        self.entries.append(item)

    def all(self) -> list[Any]:
        return self.entries


@tracedray.remote
def call_counter(counter: Any, times: int) -> int:
    return tracedray.get([counter.increment.remote() for _ in range(times)])[-1]


@tracedray.remote
class Forwarder:
    def __init__(self, target: Any) -> None:
        self.target = target

    def forward(self, by: int) -> int:
        return tracedray.get(self.target.increment.remote(by))


@tracedray.remote
class FailsInInit:
    def __init__(self) -> None:
        raise RuntimeError("cannot construct this actor")

    def method(self) -> int:
        return 1


@tracedray.remote(max_concurrency=4)
class Barrier:
    """Only completes if 3 calls run at the same time."""

    def __init__(self) -> None:
        self.barrier = threading.Barrier(3, timeout=30)

    def meet(self) -> str:
        self.barrier.wait()
        return threading.current_thread().name


@tracedray.remote(num_cpus=1)
class SlowInit:
    """Holds a CPU; its __init__ says it started, then takes (almost) for ever."""

    def __init__(self, started: str) -> None:
        Path(started).touch()
        time.sleep(600)

    def ping(self) -> str:
        return "pong"


@tracedray.remote
class Blocker:
    def block(self, seconds: float) -> str:
        time.sleep(seconds)
        return "done"

    def quick(self) -> str:
        return "quick"


def test_counter_tutorial(shared_ray: Any) -> None:
    ray = shared_ray
    counter = Counter.remote()
    refs = [counter.increment.remote() for _ in range(10)]
    assert ray.get(refs) == list(range(1, 11))
    assert ray.get(counter.read.remote()) == 10
    started = Counter.remote(100)
    assert ray.get(started.increment.remote(by=5)) == 105


def test_calls_run_in_submission_order_per_caller(shared_ray: Any) -> None:
    ray = shared_ray
    log = Log.remote()
    # an early call with a slow argument must not be overtaken by later calls
    slow_value = _sleep_value.remote("first", 0.5)
    log.append.remote(slow_value)
    for i in range(50):
        log.append.remote(i)
    assert ray.get(log.all.remote()) == ["first", *range(50)]


@tracedray.remote
def _sleep_value(value: Any, seconds: float) -> Any:
    time.sleep(seconds)
    return value


def test_handles_passed_to_tasks_and_actors(shared_ray: Any) -> None:
    ray = shared_ray
    counter = Counter.remote()
    assert ray.get([call_counter.remote(counter, 5) for _ in range(3)])[-1] <= 15
    assert ray.get(counter.read.remote()) == 15
    forwarder = Forwarder.remote(counter)
    assert ray.get(forwarder.forward.remote(100)) == 115
    assert ray.get(counter.actor_id.remote()) == counter._actor_id.hex()


def test_message_actor_tutorial(shared_ray: Any) -> None:
    ray = shared_ray

    @ray.remote
    class MessageActor:
        def __init__(self) -> None:
            self.messages: list[str] = []

        def add_message(self, message: str) -> None:
            self.messages.append(message)

        def get_and_clear_messages(self) -> list[str]:
            messages = self.messages
            self.messages = []
            return messages

    @ray.remote
    def worker(message_actor: Any, j: int) -> None:
        for i in range(5):
            message_actor.add_message.remote(f"Message {i} from worker {j}.")

    message_actor = MessageActor.remote()
    ray.get([worker.remote(message_actor, j) for j in range(3)])
    seen: list[str] = []
    deadline = time.monotonic() + 30
    while len(seen) < 15 and time.monotonic() < deadline:
        seen += ray.get(message_actor.get_and_clear_messages.remote())
    assert sorted(seen) == sorted(f"Message {i} from worker {j}." for i in range(5)
                                  for j in range(3))
    # per caller, messages arrive in order
    for j in range(3):
        mine = [m for m in seen if m.endswith(f"worker {j}.")]
        assert mine == [f"Message {i} from worker {j}." for i in range(5)]


def test_named_actors_and_namespaces(shared_ray: Any) -> None:
    ray = shared_ray
    named = Counter.options(name="named-counter").remote(7)
    found = ray.get_actor("named-counter")
    assert found == named
    assert ray.get(found.increment.remote()) == 8
    with pytest.raises(ValueError, match="no such actor|named-counter"):
        ray.get_actor("named-counter", namespace="elsewhere")
    other = Counter.options(name="named-counter", namespace="elsewhere").remote(1000)
    assert ray.get(ray.get_actor("named-counter", namespace="elsewhere").read.remote()) == 1000
    assert other != named
    with pytest.raises(ValueError, match="already exists"):
        Counter.options(name="named-counter").remote()
    with pytest.raises(ValueError):
        ray.get_actor("never-created")


def test_get_if_exists(shared_ray: Any) -> None:
    ray = shared_ray
    first = Counter.options(name="singleton", get_if_exists=True).remote(1)
    second = Counter.options(name="singleton", get_if_exists=True).remote(99)
    assert first == second
    assert ray.get(second.read.remote()) == 1


def test_max_concurrency_runs_calls_in_parallel(shared_ray: Any) -> None:
    ray = shared_ray
    barrier = Barrier.remote()
    names = ray.get([barrier.meet.remote() for _ in range(3)], timeout=60)
    assert len(set(names)) == 3


def test_actor_creation_failure_fails_calls_with_init_error(shared_ray: Any) -> None:
    ray = shared_ray
    broken = FailsInInit.remote()
    with pytest.raises(exceptions.ActorDiedError) as info:
        ray.get(broken.method.remote(), timeout=60)
    assert "cannot construct this actor" in str(info.value)
    assert isinstance(info.value, exceptions.RayActorError)


def _workers_of(actor: Any) -> list[dict[str, Any]]:
    from tracedray.util.state import list_workers

    return list(list_workers(filters=[f"actor_id={actor._actor_id.hex()}"], limit=None))


def _worker_states(actor: Any) -> list[str]:
    return [w["state"] for w in _workers_of(actor)]


def test_an_actor_whose_init_raised_leaves_no_worker_behind(shared_ray: Any) -> None:
    ray = shared_ray
    broken = FailsInInit.options(num_cpus=1).remote()
    with pytest.raises(exceptions.ActorDiedError):
        ray.get(broken.method.remote(), timeout=60)
    # Its worker stayed ACTOR for good before, holding the CPU.
    _wait_for(lambda: _worker_states(broken) == ["DEAD"])


def test_killing_an_actor_in_its_init_stops_its_worker(shared_ray: Any, tmp_path: Path) -> None:
    ray = shared_ray
    started = tmp_path / "started"
    slow = SlowInit.remote(str(started))
    _wait_for(started.exists, timeout=60)
    ray.kill(slow)
    # The GCS learns a worker's address once __init__ returned: before, the kill reached
    # no worker, which ran on and then stayed ACTOR with its CPU for as long as the node.
    _wait_for(lambda: _worker_states(slow) == ["DEAD"])
    (worker,) = _workers_of(slow)
    assert worker["exit_signal"] == "SIGKILL", worker
    assert worker["exit_meaning"].startswith("killed by the raylet: the GCS declared its actor "
                                             "dead (killed with tracedray.kill())"), worker
    with pytest.raises(exceptions.ActorDiedError, match="kill"):
        ray.get(slow.ping.remote(), timeout=30)


def test_kill_fails_queued_and_future_calls(shared_ray: Any) -> None:
    ray = shared_ray
    blocker = Blocker.remote()
    assert ray.get(blocker.quick.remote()) == "quick"
    running = blocker.block.remote(60)
    queued = [blocker.quick.remote() for _ in range(3)]
    ray.kill(blocker)
    for ref in [running, *queued]:
        with pytest.raises(exceptions.RayActorError):
            ray.get(ref, timeout=30)
    with pytest.raises(exceptions.ActorDiedError, match="kill"):
        ray.get(blocker.quick.remote(), timeout=30)


def test_kill_named_actor_frees_the_name(shared_ray: Any) -> None:
    ray = shared_ray
    first = Counter.options(name="reusable").remote()
    ray.get(first.read.remote())
    ray.kill(first)
    second = Counter.options(name="reusable").remote(5)
    assert ray.get(second.read.remote()) == 5
    with pytest.raises(TypeError):
        ray.kill("reusable")


def _wait_for(predicate: Any, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(0.05)


def test_max_restarts_after_sigkill(shared_ray: Any) -> None:
    ray = shared_ray
    counter = Counter.options(max_restarts=1).remote()
    assert ray.get(counter.increment.remote()) == 1
    first_pid = ray.get(counter.pid.remote())
    os.kill(first_pid, signal.SIGKILL)
    # the restarted instance runs __init__ again: state starts over
    value = _retry_until_restarted(ray, counter)
    assert value == 1
    second_pid = ray.get(counter.pid.remote())
    assert second_pid != first_pid
    os.kill(second_pid, signal.SIGKILL)
    # out of restarts: once the GCS has the death, every call fails with its cause
    with pytest.raises(exceptions.ActorDiedError) as info:
        _retry_until_restarted(ray, counter)
    assert "SIGKILL" in str(info.value) and "max_restarts=1" in str(info.value)


def _retry_until_restarted(ray: Any, counter: Any, attempts: int = 50) -> int:
    """Calls in flight when the actor died fail (no max_task_retries); later ones succeed."""
    for _ in range(attempts):
        try:
            return int(ray.get(counter.increment.remote(), timeout=30))
        except exceptions.ActorDiedError:
            raise
        except exceptions.RayActorError:
            continue
    raise exceptions.RayActorError("actor did not come back")


def test_max_task_retries_reruns_call_on_restarted_actor(shared_ray: Any, tmp_path: Path) -> None:
    ray = shared_ray
    marker = tmp_path / "pid"

    @ray.remote(max_restarts=1, max_task_retries=1)
    class Fragile:
        def work(self, path: str) -> int:
            target = Path(path)
            if not target.exists():
                target.write_text(str(os.getpid()))
                os.kill(os.getpid(), signal.SIGKILL)
            return os.getpid()

    fragile = Fragile.remote()
    pid = ray.get(fragile.work.remote(str(marker)), timeout=60)
    assert pid != int(marker.read_text())


@tracedray.remote
class DiesInFirstInit:
    """Its first __init__ kills its own process (no exception: the worker just dies);
    the restarted one finds the marker and constructs."""

    def __init__(self, marker: str) -> None:
        path = Path(marker)
        if not path.exists():
            path.write_text(str(os.getpid()))
            os._exit(1)
        self.first_pid = int(path.read_text())

    def pids(self) -> tuple[int, int]:
        return self.first_pid, os.getpid()


def _actor_row(actor: Any) -> dict[str, Any]:
    from tracedray.util.state import get_actor

    row = get_actor(actor._actor_id.hex())
    assert row is not None
    return dict(row)


def test_an_actor_whose_worker_dies_in_init_is_restarted(shared_ray: Any,
                                                         tmp_path: Path) -> None:
    # Both the creation task's stream and the raylet's report told the GCS of that death:
    # one restarted the actor, the other declared it DEAD.
    ray = shared_ray
    actor = DiesInFirstInit.options(max_restarts=1).remote(str(tmp_path / "marker"))
    first_pid, pid = ray.get(actor.pids.remote(), timeout=60)
    assert pid != first_pid
    row = _actor_row(actor)
    assert (row["state"], row["num_restarts"]) == ("ALIVE", 1), row


def test_without_restarts_a_worker_dying_in_init_kills_its_actor(shared_ray: Any,
                                                                 tmp_path: Path) -> None:
    ray = shared_ray
    actor = DiesInFirstInit.remote(str(tmp_path / "marker"))
    with pytest.raises(exceptions.ActorDiedError, match="died during __init__"):
        ray.get(actor.pids.remote(), timeout=60)
    row = _actor_row(actor)
    assert (row["state"], row["num_restarts"]) == ("DEAD", 0), row


def test_an_init_that_raised_kills_its_actor_without_restarts(shared_ray: Any) -> None:
    ray = shared_ray
    broken = FailsInInit.options(max_restarts=2).remote()
    with pytest.raises(exceptions.ActorDiedError, match="cannot construct this actor"):
        ray.get(broken.method.remote(), timeout=60)
    row = _actor_row(broken)
    assert (row["state"], row["num_restarts"]) == ("DEAD", 0), row
    assert "__init__ raised" in row["death_cause"], row
