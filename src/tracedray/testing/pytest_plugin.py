"""pytest plugin (entry point ``pytest11``): the ``tracedray_spans`` fixture.

Imports stay inside functions: pytest loads this module for every run, including
``pytest --help``, and must not pay for grpc or the OTel SDK there.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import ReadableSpan


def _session_traces_dir() -> Path | None:
    from tracedray.core.session import current_session_dir

    session_dir = current_session_dir()
    return None if session_dir is None else Path(session_dir) / "traces"


class FinishedSpans:
    """Spans ended so far by every process of the cluster, as OTel ``ReadableSpan``s.

    Mirrors ``InMemorySpanExporter``: ``get_finished_spans()`` returns them in the
    order they ended, ``clear()`` forgets everything returned so far. They are read
    from the session's trace files (each process appends a span as it ends), so
    spans from the GCS, raylets and workers are included. ``warnings`` holds the
    reader's notes about skipped lines from the last call.
    """

    def __init__(self, traces_dir: Callable[[], Path | None] = _session_traces_dir) -> None:
        self._traces_dir = traces_dir
        self._offsets: dict[str, int] = {}
        self.warnings: list[str] = []

    def get_finished_spans(self) -> tuple[ReadableSpan, ...]:
        from tracedray import telemetry
        from tracedray.telemetry import otlp_json

        telemetry.force_flush()
        folder = self._traces_dir()
        if folder is None:
            self.warnings = []
            return ()
        resource_spans, self.warnings = otlp_json.read_trace_dir(folder, self._offsets)
        spans = otlp_json.to_readable_spans(resource_spans)
        spans.sort(key=lambda span: (span.end_time or 0, span.start_time or 0))
        return tuple(spans)

    def clear(self) -> None:
        """Later calls return only spans written after this point (a per-file high-water mark)."""
        from tracedray.telemetry import otlp_json

        folder = self._traces_dir()
        self._offsets = {} if folder is None else otlp_json.end_offsets(folder)


@pytest.fixture
def tracedray_spans() -> Iterator[FinishedSpans]:
    """Start tracedray if the test has not, and collect every span of the cluster."""
    import tracedray

    started_here = False
    if not tracedray.is_initialized():
        tracedray.init()
        started_here = True
    try:
        yield FinishedSpans()
    finally:
        if started_here:
            tracedray.shutdown()
