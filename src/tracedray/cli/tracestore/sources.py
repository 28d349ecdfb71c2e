"""Where the CLI gets spans from: the session's OTLP JSON files, or Jaeger's api_v3.

Every source answers the same question (``find_spans``) with parsed
:class:`SpanRecord` s. A source may return a superset of what was asked for (the
file source returns the whole session): the reconstruction engine filters. The
:class:`TraceSource` protocol is the seam for further backends (e.g. a
raylet-backed source that reads remote nodes' files).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Protocol

from tracedray.cli.tracestore.jaeger import JaegerClient, JaegerClientStatistics, search_params
from tracedray.cli.tracestore.model import SpanRecord, parse_resource_spans
from tracedray.core.session import SessionPaths
from tracedray.telemetry import attributes as attr

if TYPE_CHECKING:
    from tracedray.telemetry.index_reader import IndexReader

DEFAULT_LOOKBACK_NS = 7 * 24 * 3600 * 10**9
MAX_SERVICES = 20  # a search per service; more than this is a shared Jaeger, not ours


@dataclass(frozen=True)
class SpanQuery:
    """What the caller is looking for; empty fields mean "anything"."""

    task_id: str = ""
    trace_id: str = ""
    start_min_ns: int | None = None
    start_max_ns: int | None = None
    # Only spans whose name starts with this (one of trace_index.NAME_FAMILIES is read
    # from the index alone).
    name_prefix: str = ""


@dataclass(frozen=True)
class SpanBatch:
    spans: tuple[SpanRecord, ...]
    warnings: tuple[str, ...]
    source: str


class TraceSource(Protocol):
    @property
    def label(self) -> str: ...

    def find_spans(self, query: SpanQuery) -> SpanBatch: ...


def _in_query(span: SpanRecord, query: SpanQuery) -> bool:
    if query.trace_id and span.trace_id != query.trace_id:
        return False
    if query.start_min_ns is not None and span.end_ns < query.start_min_ns:
        return False
    return query.start_max_ns is None or span.start_ns <= query.start_max_ns


class SessionFileSource:
    """Spans of one session folder (``traces/*.jsonl``), local or already copied here.

    A query for a task or a trace reads only the lines the session's index
    (telemetry/trace_index.py writes it, index_reader.py reads it) names, plus what the
    files gained since it was last brought up to date; without a usable index it reads
    every file and says so in the batch's warnings.
    """

    def __init__(self, session: SessionPaths) -> None:
        self.session = session
        self.lines_parsed = 0  # lines json-decoded by the last find_spans (for tests)
        self.used_index = False

    @property
    def label(self) -> str:
        return f"session files {self.session.traces_dir}"

    def find_spans(self, query: SpanQuery) -> SpanBatch:
        keys = _index_keys(query)
        if keys:
            from tracedray.telemetry.index_reader import open_index

            index, why = open_index(self.session.root)
            if index is not None:
                try:
                    batch = self._indexed(index, keys, query)
                    gone = index.gone("traces")  # parts retention dropped
                finally:
                    index.close()
                notes = tuple(text for text in (why, gone) if text)  # why: a rebuilt index
                return SpanBatch(batch.spans, (*notes, *batch.warnings), batch.source)
            batch = self._scan(query)
            return SpanBatch(batch.spans, (f"{why}: reading every trace file",
                                           *batch.warnings), batch.source)
        return self._scan(query)

    def store_events(self) -> SpanBatch:
        """The object store's events (``object.seal``, ``free``, ``spill``, ...): from the
        rows the index keeps of them (telemetry/memory_index.py) plus the lines it has
        not reached, so the cost follows the events, not the session; without such rows
        (no index, or one made by an older tracedray), from the lines holding them, and
        the first warning says so."""
        from tracedray.telemetry import memory_index
        from tracedray.telemetry.index_reader import open_index
        from tracedray.telemetry.spool_convert import sync_traces_dir

        query = SpanQuery(name_prefix="object.")
        # Every ended span in a file first, for the index to take it in.
        synced = sync_traces_dir(self.session.traces_dir)
        index, why = open_index(self.session.root)
        if index is None:
            batch = self._scan(query)
            return SpanBatch(batch.spans, (f"{why}: reading every trace file",
                                           *batch.warnings), batch.source)
        try:
            found = index.store_events()
            if found is None:
                batch = self._indexed(index, [_index_keys(query)[0]], query)
                return SpanBatch(batch.spans, (
                    f"the trace index of {self.session.root} keeps no object-store events "
                    "(made by an older tracedray): reading every line that holds one",
                    *index.errors, *batch.warnings), batch.source)
            events, tails = found
            warnings = [why] if why else []
            warnings.extend(index.errors)
        finally:
            index.close()
        self.used_index = True
        warnings.extend(synced.warnings)
        seen: set[tuple[str, str]] | None = None  # the index's rows are unique already
        for raw in [*tails, *(line.encode() for line in synced.lines)]:
            more, warning = memory_index.events_of_line(raw)
            if warning:
                warnings.append(f"{self.session.traces_dir}: {warning}")
            if seen is None and more:
                seen = {(e.trace_id, e.span_id) for e in events}
            for event in more:  # a span converted twice (a killed converter) counts once
                if seen is not None and (event.trace_id, event.span_id) not in seen:
                    seen.add((event.trace_id, event.span_id))
                    events.append(event)
        self.lines_parsed = len(tails) + len(synced.lines)
        spans = tuple(SpanRecord(trace_id=e.trace_id, span_id=e.span_id, parent_id="",
                                 name=e.name, start_ns=e.start_ns, end_ns=e.end_ns,
                                 attributes=MappingProxyType(e.attributes()))
                      for e in events)
        return SpanBatch(spans, tuple(warnings), self.label)

    def spans_in_window(self, since_ns: int | None, until_ns: int | None,
                        margin_ns: int = 10**9) -> SpanBatch:
        """Spans of the lines whose time range meets [since - margin, until + margin]
        (the index's ``lines`` by time; the margin covers clocks of other nodes), read
        through the index; without one, every file (the first warning says so). Spans
        are not cut to the window here: the caller does, on the head's clock."""

        from tracedray.telemetry.index_keys import TRACES
        from tracedray.telemetry.index_reader import open_index
        from tracedray.telemetry.spool_convert import sync_traces_dir

        if since_ns is None and until_ns is None:
            return self._scan(SpanQuery())
        synced = sync_traces_dir(self.session.traces_dir)
        index, why = open_index(self.session.root)
        if index is None:
            batch = self._scan(SpanQuery())
            return SpanBatch(batch.spans, (f"{why}: reading every trace file",
                                           *batch.warnings), batch.source)
        try:
            low = None if since_ns is None else since_ns - margin_ns
            high = None if until_ns is None else until_ns + margin_ns
            lines = [raw for _, raw in index.lines_in_window(TRACES, low, high)]
            warnings = [*([why] if why else []), *synced.warnings, *index.errors]
        finally:
            index.close()
        self.used_index = True
        lines.extend(line.encode() for line in synced.lines)
        spans, parse_warnings = self._decode(lines, warnings)
        return SpanBatch(tuple(spans), (*warnings, *parse_warnings), self.label)

    def _decode(self, lines: list[bytes], warnings: list[str]) -> tuple[list[SpanRecord],
                                                                         list[str]]:
        """The spans of OTLP JSON ``lines`` (a corrupt line is a warning added to
        ``warnings``), and the warnings of parsing them."""
        import json

        resource_spans: list[dict[str, Any]] = []
        for raw in lines:
            try:
                resource_spans.extend(json.loads(raw)["resourceSpans"])
            except (ValueError, KeyError, TypeError) as exc:
                warnings.append(f"{self.session.traces_dir}: skipped a corrupt line: {exc}")
        self.lines_parsed = len(lines)
        return parse_resource_spans(resource_spans)

    def _scan(self, query: SpanQuery) -> SpanBatch:
        # Imported here: the OTLP file codec belongs to telemetry/, the one place
        # that knows how spans are written (including half-written last lines).
        from tracedray.telemetry.otlp_json import read_trace_dir

        self.used_index = False
        resource_spans, read_warnings = read_trace_dir(self.session.traces_dir)
        self.lines_parsed = len(resource_spans)
        spans, parse_warnings = parse_resource_spans(resource_spans)
        # The folder is one session already: the time window is a hint for backends that
        # hold many sessions, and clocks of other nodes may be skewed, so it is not applied.
        selected = tuple(span for span in spans
                         if (not query.trace_id or span.trace_id == query.trace_id)
                         and span.name.startswith(query.name_prefix))
        return SpanBatch(selected, tuple(read_warnings) + tuple(parse_warnings), self.label)

    def _indexed(self, index: IndexReader, keys: list[bytes],
                 query: SpanQuery) -> SpanBatch:

        from tracedray.telemetry.spool_convert import sync_traces_dir
        from tracedray.telemetry.trace_index import TRACES, span_line_keys

        self.used_index = True
        synced = sync_traces_dir(self.session.traces_dir)  # every ended span is in a file
        warnings = list(synced.warnings)
        wanted = set(keys)
        lines = [line.encode() for line in synced.lines  # spools we may not write
                 if wanted & span_line_keys(line.encode())]
        lines.extend(raw for _, raw in index.lines(TRACES, wanted))
        warnings.extend(index.errors)
        spans, parse_warnings = self._decode(lines, warnings)
        selected = tuple(span for span in spans if _span_matches(span, query))
        return SpanBatch(selected, (*warnings, *parse_warnings), self.label)


def _index_keys(query: SpanQuery) -> list[bytes]:
    from tracedray.telemetry.trace_index import NAME_FAMILIES, key, name_key

    if query.task_id:
        return [key("task", query.task_id)]
    if query.trace_id:
        return [key("trace", query.trace_id)]
    if query.name_prefix in NAME_FAMILIES:
        return [name_key(query.name_prefix)]
    return []


def _span_matches(span: SpanRecord, query: SpanQuery) -> bool:
    if query.trace_id and span.trace_id != query.trace_id:
        return False
    if not span.name.startswith(query.name_prefix):
        return False
    wanted = query.task_id.strip().lower()
    return not wanted or str(span.get(attr.TASK_ID, "")).lower() == wanted


@dataclass(frozen=True)
class JaegerSourceStatistics:
    searches: int
    client: JaegerClientStatistics


class JaegerSource:
    """Spans from Jaeger v2 (``/api/v3``). Network failures raise RaySystemError."""

    def __init__(self, base_url: str, *, service_names: Sequence[str] | None = None,
                 timeout_s: float = 5.0, search_depth: int = 100,
                 clock_ns: Any = time.time_ns) -> None:
        self.client = JaegerClient(base_url, timeout_s=timeout_s)
        self.service_names = tuple(service_names) if service_names is not None else None
        self.search_depth = search_depth
        self._clock_ns = clock_ns
        self._searches = 0

    @property
    def label(self) -> str:
        return f"Jaeger {self.client.base_url}"

    def statistics(self) -> JaegerSourceStatistics:
        return JaegerSourceStatistics(self._searches, self.client.statistics())

    def find_spans(self, query: SpanQuery) -> SpanBatch:
        if query.trace_id:
            resource_spans = self.client.get_trace(query.trace_id)
        else:
            resource_spans = self._search(query)
        spans, warnings = parse_resource_spans(resource_spans)
        # FindTraces concatenates traces and may repeat a span; keep one of each.
        unique = {(span.trace_id, span.span_id): span for span in spans}
        selected = tuple(span for span in unique.values() if _in_query(span, query))
        return SpanBatch(selected, tuple(warnings), self.label)

    def _search(self, query: SpanQuery) -> list[dict[str, Any]]:
        now = self._clock_ns()
        start_max = query.start_max_ns if query.start_max_ns is not None else now
        start_min = query.start_min_ns if query.start_min_ns is not None \
            else start_max - DEFAULT_LOOKBACK_NS
        services = self.service_names
        if services is None:
            services = tuple(self.client.services()[:MAX_SERVICES])
        attributes = {attr.TASK_ID: query.task_id} if query.task_id else None
        found: list[dict[str, Any]] = []
        for service in services:
            self._searches += 1
            found.extend(self.client.find_traces(search_params(
                service=service, start_min_ns=start_min, start_max_ns=start_max,
                search_depth=self.search_depth, attributes=attributes)))
        return found
