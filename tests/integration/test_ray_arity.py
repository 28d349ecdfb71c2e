"""Arity is checked at .remote(), as in Ray: on a real cluster and in local mode.

A call whose arguments do not fit the signature of the function, the actor's
constructor or the actor method raises ``TypeError`` from ``.remote()`` itself, with
the message Ray gives (``inspect``'s), instead of submitting a task that fails later.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

import cloudpickle
import pytest

import tracedray

# Workers cannot import test modules: ship this module's functions by value.
cloudpickle.register_pickle_by_value(sys.modules[__name__])

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module", params=["cluster", "local_mode"])
def any_ray(request: pytest.FixtureRequest) -> Iterator[Any]:
    if request.param == "local_mode":
        tracedray.init(local_mode=True)
    else:
        tracedray.init(num_cpus=2, object_store_memory=128 << 20)
    try:
        yield tracedray
    finally:
        tracedray.shutdown()


@tracedray.remote
def combine(x: int, y: int, *, scale: int, offset: int = 0) -> int:
    return (x + y) * scale + offset


@tracedray.remote
class Counter:
    def __init__(self, start: int, *, step: int = 1) -> None:
        self.value = start
        self.step = step

    def add(self, times: int, *, extra: int = 0) -> int:
        self.value += self.step * times + extra
        return self.value

    @staticmethod
    def describe(unit: str) -> str:
        return f"counts {unit}"


@tracedray.remote
def call_through(counter: Any, *args: Any) -> int:
    return tracedray.get(counter.add.remote(*args))


BAD_CALLS = [
    ((1,), {"scale": 2}, "missing a required argument: 'y'"),
    ((1, 2, 3), {"scale": 2}, "too many positional arguments"),
    ((1, 2), {"scale": 2, "shift": 1}, "got an unexpected keyword argument 'shift'"),
    ((1, 2), {}, "missing a required argument: 'scale'"),
]


@pytest.mark.parametrize(("args", "kwargs", "message"), BAD_CALLS)
def test_remote_function(any_ray: Any, args: tuple[Any, ...], kwargs: dict[str, Any],
                         message: str) -> None:
    with pytest.raises(TypeError) as raised:
        combine.remote(*args, **kwargs)
    assert str(raised.value) == message
    with pytest.raises(TypeError, match=message):
        combine.options(max_retries=0).remote(*args, **kwargs)
    assert any_ray.get(combine.remote(1, 2, scale=3, offset=1)) == 10


def test_actor_constructor(any_ray: Any) -> None:
    with pytest.raises(TypeError) as raised:
        Counter.remote()
    assert str(raised.value) == "missing a required argument: 'start'"
    with pytest.raises(TypeError, match="too many positional arguments"):
        Counter.options(name="not-created").remote(1, 2)
    with pytest.raises(TypeError, match="got an unexpected keyword argument 'stride'"):
        Counter.remote(1, stride=2)
    with pytest.raises(ValueError, match="not-created"):
        any_ray.get_actor("not-created")  # nothing was created
    counter = Counter.remote(10, step=2)
    assert any_ray.get(counter.add.remote(1)) == 12


def test_get_if_exists_returns_an_existing_actor_whatever_the_arguments(any_ray: Any) -> None:
    # As in Ray, the lookup comes first; only a creation checks the arguments.
    named = Counter.options(name="existing", get_if_exists=True)
    with pytest.raises(TypeError, match="missing a required argument: 'start'"):
        named.remote()
    first = named.remote(3)
    again = named.remote()
    assert any_ray.get(again.add.remote(1)) == 4
    any_ray.kill(first)


def test_actor_methods(any_ray: Any) -> None:
    counter = Counter.remote(0)
    with pytest.raises(TypeError) as raised:
        counter.add.remote()
    assert str(raised.value) == "missing a required argument: 'times'"
    with pytest.raises(TypeError, match="too many positional arguments"):
        counter.add.remote(1, 2)
    with pytest.raises(TypeError, match="got an unexpected keyword argument 'bonus'"):
        counter.add.options(num_returns=1).remote(1, bonus=2)
    with pytest.raises(TypeError, match="missing a required argument: 'unit'"):
        counter.describe.remote()
    assert any_ray.get(counter.describe.remote("apples")) == "counts apples"
    # none of the bad calls ran: the count only moved by the good ones
    assert any_ray.get(counter.add.remote(1, extra=1)) == 2


def test_a_handle_passed_to_a_task_checks_there(any_ray: Any) -> None:
    counter = Counter.remote(0)
    assert any_ray.get(call_through.remote(counter, 5)) == 5
    with pytest.raises(TypeError, match="too many positional arguments"):
        any_ray.get(call_through.remote(counter, 1, 2))
    assert any_ray.get(counter.add.remote(0)) == 5
