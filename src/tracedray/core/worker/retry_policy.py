"""When a failed call runs again: pure decisions over the caller's retry options.

As in Ray, a call is retried after an *application* exception only when its
``retry_exceptions`` allows it (``True``: any ``Exception``; a list: instances of those
classes), and after a *system* failure (its worker died) on its own; either way within
its budget (``max_retries`` for tasks, ``max_task_retries`` for actor calls; ``-1``:
without end). A cancelled call never runs again. The executing worker reports whether
an error is an application one; the caller, who holds the allow-list, decides.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tracedray.exceptions import ConfigError, RayTaskError


@dataclass(frozen=True)
class RetryExceptions:
    """A call's ``retry_exceptions``: none, any ``Exception``, or an allow-list."""

    allowed: bool = False
    types: tuple[type[BaseException], ...] = ()  # empty while allowed: any Exception

    @classmethod
    def from_option(cls, value: Any, what: str = "the call") -> RetryExceptions:
        if value is None or value is False:
            return NO_RETRY
        if value is True:
            return ANY_EXCEPTION
        if isinstance(value, Sequence) and not isinstance(value, str) and value and all(
                isinstance(t, type) and issubclass(t, BaseException) for t in value):
            return cls(True, tuple(value))
        raise ConfigError(f"retry_exceptions for {what} must be either a boolean or a list "
                          f"of exception classes, got {value!r}")

    def matches(self, error: BaseException | None) -> bool:
        """Whether ``error`` (as the caller's get() would raise it) may be retried."""
        if not self.allowed:
            return False
        cause = error.cause if isinstance(error, RayTaskError) else error
        if not self.types:
            return isinstance(cause, Exception)
        return isinstance(cause, self.types)


NO_RETRY = RetryExceptions()
ANY_EXCEPTION = RetryExceptions(True)


def budget_left(max_retries: int, attempt: int) -> bool:
    """Whether a call on its ``attempt`` (0 for the first run) may run once more."""
    return max_retries < 0 or attempt < max_retries


def retry_after_application_error(policy: RetryExceptions, error: BaseException | None,
                                  max_retries: int, attempt: int, cancelled: bool) -> bool:
    return not cancelled and budget_left(max_retries, attempt) and policy.matches(error)
