"""The API's contract, run against both runtimes: a real local cluster and local mode.

Every test runs twice (``[cluster]``, ``[local]``). What local mode does differently by
design is asserted as such, under a ``LOCAL MODE DIFFERS`` comment: there a task runs
when it is submitted, so ``get`` never times out, ``wait`` finds every ref ready, and
``cancel`` has nothing left to cancel.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import cloudpickle
import pytest
from multinode_support import wait_for

import tracedray
from tracedray import exceptions
from tracedray.api import calls as api
from tracedray.api import runtime
from tracedray.api.cluster_runtime import ClusterRuntime
from tracedray.api.local_mode import LocalRuntime

cloudpickle.register_pickle_by_value(sys.modules[__name__])

pytestmark = pytest.mark.integration

CLUSTER, LOCAL = "cluster", "local"


@pytest.fixture(scope="module", params=[CLUSTER, LOCAL])
def kind(request: pytest.FixtureRequest) -> Iterator[str]:
    """One runtime for the module's tests of that kind (started once, as ``shared_ray``)."""
    if request.param == CLUSTER:
        tracedray.init(num_cpus=2, object_store_memory=128 << 20)
    else:
        tracedray.init(local_mode=True)
    try:
        yield request.param
    finally:
        tracedray.shutdown()


# --- tasks and actors of the contract -------------------------------------------------
@tracedray.remote
def double(x: int) -> int:
    return x * 2


@tracedray.remote
def echo(*args: Any, **kwargs: Any) -> tuple[Any, Any]:
    return args, kwargs


@tracedray.remote(num_returns=2)
def pair(a: Any, b: Any) -> tuple[Any, Any]:
    return a, b


@tracedray.remote(num_returns=0)
def nothing() -> None:
    return None


@tracedray.remote
def fail(message: str) -> None:
    raise KeyError(message)


@tracedray.remote
def fan_out(n: int) -> int:
    return sum(tracedray.get([double.remote(i) for i in range(n)]))


@tracedray.remote
def own_task_id() -> str | None:
    return tracedray.get_runtime_context().get_task_id()


@tracedray.remote(num_cpus=0)
def sleep_until_cancelled(marker: str, seconds: float) -> str:
    Path(marker).write_text(str(os.getpid()))
    for _ in range(int(seconds * 10)):  # short sleeps: a cancel interrupts between two
        time.sleep(0.1)
    return "finished"


@tracedray.remote
class Counter:
    def __init__(self, start: int = 0) -> None:
        self.value = start

    def add(self, n: int = 1) -> int:
        self.value += n
        return self.value

    def split(self) -> tuple[int, int]:
        return self.value, -self.value

    def own_actor_id(self) -> str | None:
        return tracedray.get_runtime_context().get_actor_id()


@tracedray.remote
class Broken:
    def __init__(self) -> None:
        raise RuntimeError("constructor failed")

    def ping(self) -> str:
        return "pong"


# --- the runtime itself ---------------------------------------------------------------
def test_the_api_holds_the_runtime_of_its_kind(kind: str) -> None:
    current = runtime.current_runtime()
    assert isinstance(current, ClusterRuntime if kind == CLUSTER else LocalRuntime)
    assert api.global_runtime() is current
    assert runtime.current() is current.worker


# --- objects --------------------------------------------------------------------------
def test_put_and_get(kind: str) -> None:
    ref = tracedray.put({"a": [1, 2]})
    assert isinstance(ref, tracedray.ObjectRef)
    assert tracedray.get(ref) == {"a": [1, 2]}
    refs = [tracedray.put(i) for i in range(3)]
    assert tracedray.get(refs) == [0, 1, 2]
    assert tracedray.get(tuple(refs)) == [0, 1, 2]
    assert tracedray.get([]) == []


def test_put_and_get_refuse_wrong_arguments(kind: str) -> None:
    ref = tracedray.put(1)
    with pytest.raises(TypeError, match="already stored"):
        tracedray.put(ref)
    with pytest.raises(TypeError, match="did you forget"):
        tracedray.get([1])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="timeout"):
        tracedray.get(ref, timeout=-1)


def test_nested_refs_stay_refs(kind: str) -> None:
    inner = tracedray.put("deep")
    outer = tracedray.put({"inner": inner})
    got = tracedray.get(outer)["inner"]
    assert isinstance(got, tracedray.ObjectRef)
    assert tracedray.get(got) == "deep"
    # A ref at the top of a task's arguments is resolved; one inside a container is not.
    args, kwargs = tracedray.get(echo.remote(inner, [inner], key=inner))
    assert args[0] == "deep" and isinstance(args[1][0], tracedray.ObjectRef)
    assert kwargs == {"key": "deep"}


def test_get_timeout(kind: str, tmp_path: Path) -> None:
    seconds = 30 if kind == CLUSTER else 0
    ref = sleep_until_cancelled.remote(str(tmp_path / "marker"), seconds)
    if kind == LOCAL:
        # LOCAL MODE DIFFERS: the task ran at submission, so its value is already there.
        assert tracedray.get(ref, timeout=0.01) == "finished"
        return
    try:
        with pytest.raises(exceptions.GetTimeoutError):
            tracedray.get(ref, timeout=0.1)
    finally:
        tracedray.cancel(ref)


def test_wait(kind: str) -> None:
    refs = [double.remote(i) for i in range(3)]
    ready, rest = tracedray.wait(refs, num_returns=2, timeout=60)
    assert len(ready) == 2 and len(rest) == 1
    assert set(ready) | set(rest) == set(refs)
    assert [r for r in refs if r in ready] == ready  # in the order given
    assert tracedray.wait([]) == ([], [])
    ready, rest = tracedray.wait(refs, num_returns=0)
    assert ready == [] and rest == refs
    with pytest.raises(ValueError, match="duplicate"):
        tracedray.wait([refs[0], refs[0]])
    with pytest.raises(ValueError, match="num_returns"):
        tracedray.wait(refs, num_returns=4)
    with pytest.raises(TypeError):
        tracedray.wait(refs[0])  # type: ignore[arg-type]


def test_wait_timeout(kind: str, tmp_path: Path) -> None:
    seconds = 30 if kind == CLUSTER else 0
    slow = sleep_until_cancelled.remote(str(tmp_path / "marker"), seconds)
    fast = double.remote(1)
    try:
        ready, rest = tracedray.wait([slow, fast], num_returns=2, timeout=5)
        if kind == LOCAL:
            # LOCAL MODE DIFFERS: every ref is ready at once, in the order given.
            assert ready == [slow, fast] and rest == []
        else:
            assert ready == [fast] and rest == [slow]
    finally:
        tracedray.cancel(slow)


# --- tasks ----------------------------------------------------------------------------
def test_tasks_take_arguments_and_refs(kind: str) -> None:
    assert tracedray.get(double.remote(21)) == 42
    assert tracedray.get(double.remote(double.remote(3))) == 12
    assert tracedray.get(echo.remote(1, b=2)) == ((1,), {"b": 2})
    assert tracedray.get(fan_out.remote(4)) == 12  # tasks submitting tasks


def test_num_returns(kind: str) -> None:
    first, second = pair.remote("a", "b")
    assert tracedray.get([first, second]) == ["a", "b"]
    assert nothing.remote() is None
    refs = echo.options(num_returns=2).remote()
    assert tracedray.get(refs) == [(), {}]
    assert tracedray.get(pair.options(num_returns=1).remote(1, 2)) == (1, 2)


def test_task_errors(kind: str) -> None:
    ref = fail.remote("missing")  # does not raise at submission
    with pytest.raises(KeyError) as caught:
        tracedray.get(ref)
    assert isinstance(caught.value, exceptions.RayTaskError)
    assert "missing" in str(caught.value)
    # A task whose argument failed fails with the upstream error.
    with pytest.raises(KeyError, match="upstream"):
        tracedray.get(double.remote(fail.remote("upstream")))


def test_wrong_arguments_fail_at_remote(kind: str) -> None:
    with pytest.raises(TypeError):
        double.remote(1, 2)
    with pytest.raises(TypeError, match="cannot be called directly"):
        double(1)
    with pytest.raises(TypeError):
        Counter.remote(1, 2, 3)
    with pytest.raises(TypeError, match="kill"):
        tracedray.kill("not an actor")
    with pytest.raises(TypeError, match="cancel"):
        tracedray.cancel("not a ref")  # type: ignore[arg-type]


def test_runtime_context_in_a_task(kind: str) -> None:
    ref = own_task_id.remote()
    assert tracedray.get(ref) == ref.task_id().hex()


def test_cancel(kind: str, tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    seconds = 60 if kind == CLUSTER else 0
    ref = sleep_until_cancelled.remote(str(marker), seconds)
    wait_for(marker.exists, 60, "the task to start")
    tracedray.cancel(ref)
    if kind == LOCAL:
        # LOCAL MODE DIFFERS: the task finished at submission; cancel has nothing to stop.
        assert tracedray.get(ref) == "finished"
        return
    with pytest.raises(exceptions.TaskCancelledError):
        tracedray.get(ref, timeout=30)


# --- actors ---------------------------------------------------------------------------
def test_actors_keep_state_in_call_order(kind: str) -> None:
    counter = Counter.remote(10)
    assert tracedray.get([counter.add.remote(1), counter.add.remote(2)]) == [11, 13]
    assert tracedray.get(counter.own_actor_id.remote()) == counter._actor_id.hex()
    high, low = counter.split.options(num_returns=2).remote()
    assert tracedray.get([high, low]) == [13, -13]
    with pytest.raises(AttributeError):
        counter.no_such_method  # noqa: B018


def test_named_actors(kind: str) -> None:
    named = Counter.options(name="contract-named").remote(7)
    found = tracedray.get_actor("contract-named")
    assert found == named
    assert tracedray.get(found.add.remote()) == 8
    reused = Counter.options(name="contract-named", get_if_exists=True).remote(0)
    assert reused == named
    with pytest.raises(ValueError, match="already exists"):
        Counter.options(name="contract-named").remote()
    with pytest.raises(ValueError, match="no such actor"):
        tracedray.get_actor("contract-named", namespace="elsewhere")
    other = Counter.options(name="contract-named", namespace="elsewhere").remote(100)
    assert other != named
    assert tracedray.get(tracedray.get_actor("contract-named", "elsewhere").add.remote()) == 101
    with pytest.raises(ValueError, match="no such actor"):
        tracedray.get_actor("never-created")
    with pytest.raises(ValueError, match="non-empty"):
        tracedray.get_actor("")
    tracedray.kill(named)
    tracedray.kill(other)


def test_kill(kind: str) -> None:
    counter = Counter.options(name="contract-killed").remote()
    assert tracedray.get(counter.add.remote()) == 1
    tracedray.kill(counter)
    with pytest.raises(exceptions.ActorDiedError, match="kill"):
        tracedray.get(counter.add.remote(), timeout=30)
    with pytest.raises(ValueError, match="contract-killed"):
        tracedray.get_actor("contract-killed")
    again = Counter.options(name="contract-killed").remote(5)  # the name is free again
    assert tracedray.get(again.add.remote(0)) == 5
    tracedray.kill(again)


def test_a_constructor_that_raises_kills_its_actor(kind: str) -> None:
    broken = Broken.remote()
    with pytest.raises(exceptions.ActorDiedError, match="constructor failed"):
        tracedray.get(broken.ping.remote(), timeout=60)


# --- cluster info ---------------------------------------------------------------------
def test_cluster_info(kind: str) -> None:
    (node,) = tracedray.nodes()
    assert node["Alive"] and node["IsHead"] and node["NodeID"]
    assert node["NodeID"] == tracedray.get_runtime_context().get_node_id()
    assert tracedray.cluster_resources()["CPU"] >= 1
    available = tracedray.available_resources()  # CPUs leased to workers are not
    assert available.get("CPU", 0) <= tracedray.cluster_resources()["CPU"]
    assert all(amount > 0 for amount in available.values())
    assert tracedray.is_initialized()
