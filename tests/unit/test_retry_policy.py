"""Which application errors run a call again, within which budget."""

from __future__ import annotations

import pytest

from tracedray.core.worker import retry_policy as rp
from tracedray.exceptions import ConfigError, RayTaskError


class Flaky(Exception):
    pass


def test_option_forms() -> None:
    assert rp.RetryExceptions.from_option(None) == rp.RetryExceptions()
    assert rp.RetryExceptions.from_option(False) == rp.RetryExceptions()
    assert rp.RetryExceptions.from_option(True) == rp.RetryExceptions(True)
    assert rp.RetryExceptions.from_option([Flaky]) == rp.RetryExceptions(True, (Flaky,))
    for bad in ([], ["Flaky"], [int], "Flaky"):
        with pytest.raises(ConfigError, match="boolean or a list of exception classes"):
            rp.RetryExceptions.from_option(bad)


def test_matching_looks_through_the_task_error_to_its_cause() -> None:
    wrapped = RayTaskError("f", "tb", Flaky("x"), 1, "127.0.0.1", "n", "t")
    assert rp.RetryExceptions(True, (Flaky,)).matches(wrapped)
    assert not rp.RetryExceptions(True, (KeyError,)).matches(wrapped)
    assert rp.RetryExceptions(True).matches(ValueError())
    assert not rp.RetryExceptions(True).matches(KeyboardInterrupt())
    assert not rp.RetryExceptions().matches(Flaky())


@pytest.mark.parametrize(("max_retries", "attempt", "left"),
                         [(0, 0, False), (2, 1, True), (2, 2, False), (-1, 100, True)])
def test_budget(max_retries: int, attempt: int, left: bool) -> None:
    assert rp.budget_left(max_retries, attempt) is left


def test_a_cancelled_call_never_runs_again() -> None:
    policy = rp.RetryExceptions(True)
    assert rp.retry_after_application_error(policy, Flaky(), -1, 0, cancelled=False)
    assert not rp.retry_after_application_error(policy, Flaky(), -1, 0, cancelled=True)
