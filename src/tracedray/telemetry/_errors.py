"""How an exception is recorded on a span: one definition for every span path."""

from __future__ import annotations

import traceback

from opentelemetry.trace import Span
from opentelemetry.trace.status import Status, StatusCode

from tracedray.telemetry import attributes as attrs


def qualified_name(exc_type: type[BaseException]) -> str:
    module = exc_type.__module__
    if module in ("builtins", "__main__"):
        return exc_type.__qualname__
    return f"{module}.{exc_type.__qualname__}"


def is_error(exc: BaseException) -> bool:
    # A generator being closed or a clean sys.exit() inside a span is control flow.
    if isinstance(exc, GeneratorExit):
        return False
    return not (isinstance(exc, SystemExit) and exc.code in (0, None))


def mark_error(span: Span, exc: BaseException, traceback_str: str | None = None,
               timestamp: int | None = None) -> None:
    """Status ERROR, ``error.type`` and an ``exception`` event carrying the traceback.

    ``traceback_str`` replaces the local traceback: a task's error is raised in a
    worker, and the span that records it may live in another process.
    """
    type_name = qualified_name(type(exc))
    message = str(exc)
    span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {message}" if message
                           else type(exc).__name__))
    span.set_attribute(attrs.ERROR_TYPE, type_name)
    stack = traceback_str if traceback_str is not None else "".join(
        traceback.format_exception(type(exc), exc, exc.__traceback__))
    span.add_event(attrs.EXCEPTION_EVENT, {attrs.EXCEPTION_TYPE: type_name,
                                           attrs.EXCEPTION_MESSAGE: message,
                                           attrs.EXCEPTION_STACKTRACE: stack}, timestamp)
