"""Local mode's events (``init(local_mode=True)``: every task runs at once in the
driver), recorded with the span names and attributes a cluster gives them
(docs/telemetry.md), so ``trace`` and ``logs`` read a local-mode session as any other.

Each hook is a context manager around the work the span covers, or records a span with
nothing to cover; what the work learns goes in through the handle's named methods.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from opentelemetry.trace import Span

from tracedray.telemetry import attributes as A
from tracedray.telemetry._api import (
    activate,
    carrier_from_current,
    context_from_carrier,
    record_error,
    span,
    start_span,
)

LOCATION = "inline"  # values live in the driver's memory, as inline objects do


class _Open:
    __slots__ = ("_span",)

    def __init__(self, current: Span) -> None:
        self._span = current


class Put(_Open):
    def stored(self, size: int) -> None:
        if self._span.is_recording():
            self._span.set_attribute(A.OBJECT_SIZE, size)
            self._span.set_attribute(A.OBJECT_LOCATION, LOCATION)


class Get(_Open):
    def found(self, size: int) -> None:
        if self._span.is_recording():
            self._span.set_attribute(A.OBJECT_SIZE, size)


class Submission(_Open):
    def carrier(self) -> dict[str, str]:
        """The W3C headers of the ``task.submit`` span, for the task's execution."""
        return carrier_from_current()


class Execution(_Open):
    def failed(self, error: BaseException, traceback_str: str | None) -> None:
        record_error(self._span, error, traceback_str)


class LocalModeEvents:
    """The events of one local-mode driver, on node ``node_id`` as worker ``worker_id``."""

    __slots__ = ("_node_id", "_worker_id")

    def __init__(self, node_id: str, worker_id: str) -> None:
        self._node_id, self._worker_id = node_id, worker_id

    @contextmanager
    def object_put(self, object_id: bytes, call_site: str) -> Iterator[Put]:
        with span("object.put", {A.OBJECT_ID: object_id.hex(), A.OBJECT_CALL_SITE: call_site,
                                 A.NODE_ID: self._node_id}) as current:
            yield Put(current)

    @contextmanager
    def object_get(self, object_hex: str) -> Iterator[Get]:
        with span("object.get", {A.OBJECT_ID: object_hex, A.OBJECT_COUNT: 1,
                                 A.NODE_ID: self._node_id}) as current:
            yield Get(current)

    def object_free(self, object_id: bytes, size: int) -> None:
        with span("object.free", {A.OBJECT_ID: object_id.hex(), A.OBJECT_SIZE: size,
                                  A.OBJECT_LOCATION: LOCATION, A.NODE_ID: self._node_id}):
            pass

    @contextmanager
    def actor_create(self, actor_id: bytes, class_name: str, name: str) -> Iterator[None]:
        with span("actor.create", {A.ACTOR_ID: actor_id.hex(), A.ACTOR_CLASS: class_name,
                                   A.ACTOR_NAME: name, A.NODE_ID: self._node_id}):
            yield

    @contextmanager
    def task_submit(self, task_id: bytes, function: str, kind: str, call_site: str,
                    job_id: bytes, actor_id: bytes) -> Iterator[Submission]:
        attributes: dict[str, Any] = {A.TASK_ID: task_id.hex(), A.TASK_FUNCTION: function,
                                      A.TASK_KIND: kind, A.TASK_CALL_SITE: call_site,
                                      A.JOB_ID: job_id.hex(), A.TASK_MAX_RETRIES: 0}
        if actor_id:
            attributes[A.ACTOR_ID] = actor_id.hex()
        with span("task.submit", attributes) as current:
            yield Submission(current)

    @contextmanager
    def task_execute(self, task_id: bytes, function: str, kind: str, actor_id: bytes,
                     carrier: Mapping[str, str]) -> Iterator[Execution]:
        """The ``task.execute`` span under the submission's ``carrier``, current for the
        block (an error escaping it is the caller's to record: :meth:`Execution.failed`)."""
        attributes: dict[str, Any] = {A.TASK_ID: task_id.hex(), A.TASK_FUNCTION: function,
                                      A.TASK_ATTEMPT: 0, A.TASK_KIND: kind,
                                      A.NODE_ID: self._node_id, A.WORKER_ID: self._worker_id}
        if actor_id:
            attributes[A.ACTOR_ID] = actor_id.hex()
        current = start_span("task.execute", attributes, context=context_from_carrier(carrier))
        try:
            with activate(current):
                yield Execution(current)
        finally:
            current.end()
