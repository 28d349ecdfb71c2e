"""Ray's validation and messages where Ray programs (and their tests) depend on them."""

from __future__ import annotations

import sys
import time
from typing import Any

import cloudpickle
import pytest

import tracedray
from tracedray import exceptions

cloudpickle.register_pickle_by_value(sys.modules[__name__])

pytestmark = pytest.mark.integration


@tracedray.remote
class Configured:
    LIMIT = 5

    def __init__(self, start: int = 0) -> None:
        self.value = start

    @classmethod
    def describe(cls) -> str:
        return f"{cls.__name__} up to {cls.LIMIT}"

    @staticmethod
    def double(x: int) -> int:
        return 2 * x

    def read(self) -> int:
        return self.value


class Base:
    GREETING = "hello"

    def greet(self) -> str:
        return self.GREETING


@tracedray.remote
class Derived(Base):
    pass


@tracedray.remote
def fails() -> None:
    raise ValueError("failed fast")


@tracedray.remote
def slow() -> int:
    time.sleep(30)
    return 1


@tracedray.remote
def one() -> int:
    return 1


def test_empty_parentheses_on_remote_raise_as_in_ray() -> None:
    with pytest.raises(AssertionError, match="no arguments and no parentheses"):
        tracedray.remote()


def test_option_types_and_values_raise_rays_errors() -> None:
    with pytest.raises(TypeError, match="name"):
        Configured.options(name=5)
    with pytest.raises(TypeError, match="max_retries"):
        one.options(max_retries="3")
    with pytest.raises(ValueError, match="'max_retries' only accepts 0, -1 or a positive"):
        one.options(max_retries=-2)
    with pytest.raises(ValueError, match="'max_restarts' only accepts"):
        Configured.options(max_restarts=-5)
    assert isinstance(exceptions.OptionTypeError("x"), exceptions.ConfigError)


def test_init_refuses_an_empty_namespace() -> None:
    with pytest.raises(ValueError, match='"" is not a valid namespace'):
        tracedray.init(namespace="")
    with pytest.raises(TypeError, match="namespace"):
        tracedray.init(namespace=3)  # type: ignore[arg-type]
    assert not tracedray.is_initialized()


def test_actor_class_keeps_its_user_class_face() -> None:
    assert Configured.LIMIT == 5
    assert Configured.describe() == "Configured up to 5"
    assert Configured.double(4) == 8
    assert Derived.GREETING == "hello"
    with pytest.raises(AttributeError):
        Configured.no_such_attribute  # noqa: B018


def test_wait_on_nothing_returns_nothing(shared_ray: Any) -> None:
    assert shared_ray.wait([]) == ([], [])


def test_get_raises_the_first_error_without_waiting_for_the_rest(shared_ray: Any) -> None:
    started = time.monotonic()
    slow_ref = slow.remote()
    with pytest.raises(ValueError, match="failed fast"):
        shared_ray.get([slow_ref, fails.remote()], timeout=25)
    # Far less than the slow task's 30 s (and the timeout): it did not wait for it.
    assert time.monotonic() - started < 20
    shared_ray.cancel(slow_ref, force=True)


def test_failed_named_actor_lookup_says_what_ray_says(shared_ray: Any) -> None:
    with pytest.raises(ValueError, match="Failed to look up actor with name 'nobody'"):
        shared_ray.get_actor("nobody")
    actor = Configured.options(name="ephemeral").remote(1)
    assert shared_ray.get(actor.read.remote()) == 1
    shared_ray.kill(actor)
    with pytest.raises(ValueError, match="Failed to look up actor with name 'ephemeral'"):
        for _ in range(100):  # the kill reaches the GCS shortly
            shared_ray.get_actor("ephemeral")
            time.sleep(0.1)
