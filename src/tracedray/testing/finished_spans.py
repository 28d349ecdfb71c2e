"""The spans a test sees: read from the session's trace files, a test's worth at a time.

Every process of the cluster (driver, GCS, raylets, workers) appends a span to its
spool as the span ends; readers convert the spools and read the ``traces/*.jsonl``
files (telemetry.md, "Where spans go"). ``FinishedSpans`` reads them incrementally:
each call parses only what was appended since the last, so a session-long cluster
costs each test only its own spans. Heavy imports stay inside the methods.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tracedray.testing.spans import SpanQueries, Spans, begun_before, span_id_of

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import ReadableSpan


def _session_traces_dir() -> Path | None:
    from tracedray.api.calls import current_session_dir

    session_dir = current_session_dir()
    return None if session_dir is None else Path(session_dir) / "traces"


@dataclass(frozen=True)
class FinishedSpansStatistics:
    folder: str | None  # the traces folder last read
    tests: int  # how many times a test began (start_test)
    spans_before: int  # ids of spans that ended before the current test began
    spans_current: int  # spans read since the current test began
    hidden_earlier_work: int  # of those, spans of work begun before it (last read)


class FinishedSpans(SpanQueries):
    """Spans ended so far by every process of the cluster, as OTel ``ReadableSpan``s.

    Mirrors ``InMemorySpanExporter``: ``get_finished_spans()`` returns them in the
    order they ended, ``clear()`` forgets everything returned so far. The query
    methods (``named``, ``where``, ``one``, ... from ``SpanQueries``) read the same
    spans afresh. ``warnings`` holds the reader's notes about skipped lines from the
    last read.

    ``start_test()`` (the pytest plugin calls it as each test begins) forgets every
    span ended so far, and from then on also hides the spans of work begun before:
    a span whose ancestry reaches a span that ended before the test began (a task
    an earlier test submitted and did not wait for, and what that task submitted).
    """

    def __init__(self, traces_dir: Callable[[], Path | None] = _session_traces_dir) -> None:
        self._traces_dir = traces_dir
        self._folder: Path | None = None
        self._cursor: dict[str, int] = {}  # per file name: offset after the last line read
        self._before: set[int] = set()  # ids of spans that ended before the test began
        self._current: list[ReadableSpan] = []  # read since the test began, in reading order
        self._current_ids: set[int] = set()
        self._visible_from = 0  # index into _current after the last clear()
        self._tests = 0
        self._hidden = 0
        self.warnings: list[str] = []

    # --- reading
    def _read_new(self) -> list[dict[str, Any]]:
        """The ``resourceSpans`` entries appended since the last read (spools converted
        first, so every span that had ended is there)."""
        from tracedray import telemetry
        from tracedray.telemetry import otlp_json
        from tracedray.telemetry.line_file import follow_rotations
        from tracedray.telemetry.spool_convert import sync_traces_dir

        telemetry.force_flush()
        folder = self._traces_dir()
        if folder != self._folder:  # another cluster (or none): its files start afresh
            self._folder = folder
            self._cursor = {}
            self._current, self._current_ids, self._visible_from = [], set(), 0
        if folder is None:
            self.warnings = []
            return []
        synced = sync_traces_dir(folder)
        warnings = list(synced.warnings)
        entries: list[dict[str, Any]] = []
        # Spools this process may not convert are decoded in memory, whole, each time:
        # the id check in _pull drops what was read before.
        for line in synced.lines:
            entries.extend(json.loads(line)["resourceSpans"])
        files = otlp_json.trace_files(folder)
        follow_rotations(self._cursor, files)  # a file that rotated goes on in its part
        for path in files:
            objects, end = otlp_json.scan_trace_file(
                path, start=self._cursor.get(path.name, 0), warnings=warnings)
            self._cursor[path.name] = end
            for obj in objects:
                entries.extend(obj["resourceSpans"])
        self.warnings = warnings
        return entries

    def _pull(self) -> None:
        from tracedray.telemetry import otlp_json

        for span in otlp_json.to_readable_spans(self._read_new()):
            span_id = span_id_of(span)
            # a span read twice (a converter killed mid-way writes lines again) counts once
            if span_id in self._before or span_id in self._current_ids:
                continue
            self._current.append(span)
            self._current_ids.add(span_id)

    def start_test(self) -> None:
        """A test begins: what ended so far is earlier work, hidden with its descendants."""
        for entry in self._read_new():
            for scope_spans in entry.get("scopeSpans") or ():
                for raw in scope_spans.get("spans") or ():
                    try:
                        self._before.add(int(raw["spanId"], 16))
                    except (KeyError, TypeError, ValueError):
                        continue  # not from our encoder; nothing can descend from it
        self._before.update(self._current_ids)
        self._current, self._current_ids, self._visible_from = [], set(), 0
        self._tests += 1

    # --- what a test sees
    def _all(self) -> Spans:
        self._pull()
        stale = begun_before(self._current, self._before) if self._before else set()
        self._hidden = len(stale)
        visible = [span for span in self._current[self._visible_from:]
                   if span_id_of(span) not in stale]
        visible.sort(key=lambda span: (span.end_time or 0, span.start_time or 0))
        return Spans(visible)

    def get_finished_spans(self) -> Spans:
        """Every visible span, in the order they ended (a ``Spans``: a tuple with queries)."""
        return self._all()

    def clear(self) -> None:
        """Later calls return only spans that end after this point."""
        self._pull()
        self._visible_from = len(self._current)

    def statistics(self) -> FinishedSpansStatistics:
        return FinishedSpansStatistics(
            folder=None if self._folder is None else str(self._folder), tests=self._tests,
            spans_before=len(self._before), spans_current=len(self._current),
            hidden_earlier_work=self._hidden)
