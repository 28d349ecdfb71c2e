"""Actor calls retried after application errors as Ray retries them: retry_exceptions and
max_task_retries from @method, overridden by .options(); -1 without end; never more."""

from __future__ import annotations

import sys
from typing import Any

import cloudpickle
import pytest

import tracedray
from tracedray import exceptions

cloudpickle.register_pickle_by_value(sys.modules[__name__])

pytestmark = pytest.mark.integration


class Flaky(Exception):
    pass


@tracedray.remote
class Service:
    def __init__(self) -> None:
        self.calls: dict[str, int] = {}

    def _count(self, name: str) -> int:
        self.calls[name] = self.calls.get(name, 0) + 1
        return self.calls[name]

    @tracedray.method(max_task_retries=2, retry_exceptions=[Flaky])
    def fails_twice(self) -> int:
        n = self._count("fails_twice")
        if n <= 2:
            raise Flaky(f"call {n}")
        return n

    @tracedray.method(max_task_retries=3, retry_exceptions=[Flaky])
    def wrong_kind(self) -> int:
        self._count("wrong_kind")
        raise ValueError("not retried")

    def always_fails(self) -> None:
        self._count("always_fails")
        raise Flaky("again")

    def fails_five_times(self) -> int:
        n = self._count("fails_five_times")
        if n <= 5:
            raise Flaky(f"call {n}")
        return n

    def count(self, name: str) -> int:
        return self.calls.get(name, 0)


@tracedray.remote(max_retries=3, retry_exceptions=[Flaky])
def task_raises_value_error(marker: str) -> None:
    with open(marker, "a") as f:
        f.write("x")
    raise ValueError("not in the allow-list")


def test_decorator_retries_listed_exceptions(shared_ray: Any) -> None:
    actor = Service.remote()
    assert shared_ray.get(actor.fails_twice.remote(), timeout=60) == 3


def test_unlisted_exceptions_are_not_retried(shared_ray: Any) -> None:
    actor = Service.remote()
    with pytest.raises(ValueError, match="not retried"):
        shared_ray.get(actor.wrong_kind.remote(), timeout=60)
    assert shared_ray.get(actor.count.remote("wrong_kind")) == 1


def test_options_override_the_decorator_and_never_retry_more(shared_ray: Any) -> None:
    actor = Service.remote()
    with pytest.raises(Flaky):
        shared_ray.get(actor.fails_twice.options(max_task_retries=1).remote(), timeout=60)
    assert shared_ray.get(actor.count.remote("fails_twice")) == 2
    with pytest.raises(Flaky):
        shared_ray.get(actor.always_fails.options(max_task_retries=2,
                                                  retry_exceptions=True).remote(), timeout=60)
    assert shared_ray.get(actor.count.remote("always_fails")) == 3
    with pytest.raises(Flaky):  # no retry_exceptions: application errors are final
        shared_ray.get(actor.always_fails.options(max_task_retries=5).remote(), timeout=60)
    assert shared_ray.get(actor.count.remote("always_fails")) == 4


def test_minus_one_retries_without_end(shared_ray: Any) -> None:
    actor = Service.remote()
    ref = actor.fails_five_times.options(max_task_retries=-1, retry_exceptions=[Flaky]).remote()
    assert shared_ray.get(ref, timeout=60) == 6


def test_bad_retry_exceptions_fail_at_the_call_site(shared_ray: Any) -> None:
    actor = Service.remote()
    with pytest.raises(exceptions.ConfigError, match="list of exception classes"):
        actor.always_fails.options(retry_exceptions=["Flaky"])


def test_a_task_is_retried_only_for_listed_exceptions(shared_ray: Any, tmp_path: Any) -> None:
    marker = tmp_path / "runs"
    with pytest.raises(ValueError, match="not in the allow-list"):
        shared_ray.get(task_raises_value_error.remote(str(marker)), timeout=60)
    assert marker.read_text() == "x"
