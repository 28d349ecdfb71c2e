"""Putting every node's records on the head's clock before they are merged (pure: no I/O).

Each raylet estimates its clock's offset to the head's from its heartbeat round trips
(node clock minus head clock, NTP style: core/gcs/node_health.py) and logs it as a
``node.clock_offset`` line when the estimate is first made and whenever it moves by more
than its error bound. A record a node stamped ``t`` happened at ``t - offset`` on the
head's clock; shifting every record so before sorting makes a merged view's order the
order things happened in, across machines whose clocks disagree.

- An estimate holds from its line's time until the node's next one (clocks drift); a
  record older than a node's first estimate uses that first one.
- An offset within its own error bound (half the round trip it was measured over) cannot
  be told from zero and is not applied: on one machine, where every offset is a few
  microseconds of noise, nothing moves.
- A record is the recording process's: a span goes by its resource's node id, never by
  the node it is about. The driver's spans carry no node id (its telemetry starts before
  it knows its node), so a process's node is also learned from its log lines (same host
  and pid). A record whose process has no node keeps its time: the GCS runs on the head
  and its clock is the reference.
"""

from __future__ import annotations

import dataclasses
from bisect import bisect_right
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Protocol

from tracedray.cli.tracestore.logs import LogRecord
from tracedray.cli.tracestore.model import SpanEvent, SpanRecord

OFFSET_EVENT = "node.clock_offset"
# An offset from the GCS node table comes without its round trip; smaller ones are
# treated as noise, like a logged one within its error bound.
UNKNOWN_BOUND_NS = 1_000_000


@dataclass(frozen=True)
class ClockEstimate:
    since_ns: int  # node-clock time from which it holds (its log line's timestamp)
    offset_ns: int  # node clock minus head clock
    rtt_ns: int | None = None  # round trip it was measured over; None: unknown

    @property
    def error_bound_ns(self) -> int:
        return UNKNOWN_BOUND_NS if self.rtt_ns is None else self.rtt_ns // 2

    @property
    def significant(self) -> bool:
        return abs(self.offset_ns) > self.error_bound_ns


@dataclass(frozen=True)
class OffsetTable:
    """Per node, its estimates in time order."""

    by_node: Mapping[str, tuple[ClockEstimate, ...]] = field(
        default_factory=lambda: MappingProxyType({}))

    def estimate_at(self, node_id: str, time_ns: int) -> ClockEstimate | None:
        estimates = self.by_node.get(node_id, ())
        if not estimates:
            return None
        index = bisect_right(estimates, time_ns, key=lambda e: e.since_ns) - 1
        return estimates[max(index, 0)]

    def offset_ns(self, node_id: str, time_ns: int) -> int:
        """What to subtract from a time ``node_id`` stamped (0: nothing known or noise)."""
        estimate = self.estimate_at(node_id, time_ns)
        return estimate.offset_ns if estimate is not None and estimate.significant else 0


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def table_from_logs(records: Iterable[LogRecord]) -> tuple[OffsetTable, tuple[str, ...]]:
    """The table the raylets' ``node.clock_offset`` lines describe, and why lines were skipped."""
    found: dict[str, dict[int, ClockEstimate]] = {}
    warnings: list[str] = []
    for record in records:
        if record.event != OFFSET_EVENT:
            continue
        node_id = str(record.get("node_id") or "")
        offset = _number(record.get("offset_s"))
        rtt = _number(record.get("rtt_s"))
        if not node_id or offset is None or rtt is None:
            warnings.append(f"{record.source}: skipped a {OFFSET_EVENT} line without node_id, "
                            f"numeric offset_s and rtt_s")
            continue
        # Keyed by time: the same line read twice (local and remote copies) counts once.
        found.setdefault(node_id, {})[record.time_ns] = ClockEstimate(
            record.time_ns, round(offset * 1e9), round(rtt * 1e9))
    table = {node: tuple(sorted(estimates.values(), key=lambda e: e.since_ns))
             for node, estimates in found.items()}
    return OffsetTable(MappingProxyType(table)), tuple(warnings)


def table_from_nodes(offsets_s: Mapping[str, float]) -> OffsetTable:
    """The GCS node table's current offsets (0.0 there means "no estimate yet")."""
    table = {node: (ClockEstimate(0, round(offset * 1e9)),)
             for node, offset in offsets_s.items() if node and offset}
    return OffsetTable(MappingProxyType(table))


def combine(primary: OffsetTable, fallback: OffsetTable) -> OffsetTable:
    """``primary``'s estimates, and ``fallback``'s for the nodes ``primary`` lacks."""
    return OffsetTable(MappingProxyType({**fallback.by_node, **primary.by_node}))


def process_nodes(records: Iterable[LogRecord]) -> Mapping[tuple[str, int], str]:
    """(host, pid) → node id, from every log line that names its node."""
    nodes: dict[tuple[str, int], str] = {}
    for record in records:
        node_id, host, pid = record.get("node_id"), record.get("host"), record.get("pid")
        if node_id and host and isinstance(pid, int):
            nodes.setdefault((str(host), pid), str(node_id))
    return MappingProxyType(nodes)


def clock_lines(records: Iterable[LogRecord]) -> list[LogRecord]:
    """The lines :meth:`Clocks.from_logs` reads: offset lines and, per process, the first
    line naming its node (so a caller need not keep a whole session's lines)."""
    kept: list[LogRecord] = []
    named: set[tuple[str, object]] = set()
    for record in records:
        process = (str(record.get("host") or ""), record.get("pid"))
        if record.event == OFFSET_EVENT:
            kept.append(record)
        elif record.get("node_id") and process not in named:
            named.add(process)
            kept.append(record)
    return kept


@dataclass(frozen=True)
class Clocks:
    """Everything needed to move records onto the head's clock."""

    table: OffsetTable = field(default_factory=OffsetTable)
    processes: Mapping[tuple[str, int], str] = field(
        default_factory=lambda: MappingProxyType({}))

    @classmethod
    def from_logs(cls, records: Sequence[LogRecord],
                  live_offsets_s: Mapping[str, float] | None = None,
                  ) -> tuple[Clocks, tuple[str, ...]]:
        """From a session's log lines; a live GCS's node table fills in nodes they miss."""
        table, warnings = table_from_logs(records)
        if live_offsets_s:
            table = combine(table, table_from_nodes(live_offsets_s))
        return cls(table, process_nodes(records)), warnings

    def log_node(self, record: LogRecord) -> str:
        node_id = record.get("node_id")
        if node_id:
            return str(node_id)
        pid = record.get("pid")
        key = (str(record.get("host") or ""), pid if isinstance(pid, int) else -1)
        return self.processes.get(key, "")

    def span_node(self, span: SpanRecord) -> str:
        if span.recorder_node_id:
            return span.recorder_node_id
        return self.processes.get((span.host, span.pid if span.pid is not None else -1), "")

    def logs(self, records: Iterable[LogRecord]) -> list[LogRecord]:
        """Each line at its head-clock time (not re-sorted: callers merge)."""
        out: list[LogRecord] = []
        for record in records:
            node_id = self.log_node(record)
            offset = self.table.offset_ns(node_id, record.time_ns) if node_id else 0
            out.append(dataclasses.replace(record, time_ns=record.time_ns - offset,
                                           clock_offset_ns=offset, clock_node_id=node_id)
                       if offset else record)
        return out

    def spans(self, spans: Iterable[SpanRecord]) -> list[SpanRecord]:
        """Each span at its head-clock times; one offset per span, so durations stay."""
        out: list[SpanRecord] = []
        for span in spans:
            node_id = self.span_node(span)
            offset = self.table.offset_ns(node_id, span.start_ns) if node_id else 0
            if not offset:
                out.append(span)
                continue
            events = tuple(SpanEvent(e.name, e.time_ns - offset, e.attributes)
                           for e in span.events)
            out.append(dataclasses.replace(span, start_ns=span.start_ns - offset,
                                           end_ns=span.end_ns - offset, events=events,
                                           clock_offset_ns=offset, clock_node_id=node_id))
        return out


class _Corrected(Protocol):
    @property
    def clock_offset_ns(self) -> int: ...

    @property
    def clock_node_id(self) -> str: ...


def applied_offsets(records: Iterable[_Corrected]) -> dict[str, tuple[float, ...]]:
    """Per node, the distinct offsets (seconds) that moved these records."""
    used: dict[str, set[int]] = {}
    for record in records:
        if record.clock_offset_ns:
            used.setdefault(record.clock_node_id, set()).add(record.clock_offset_ns)
    return {node: tuple(offset / 1e9 for offset in sorted(offsets))
            for node, offsets in sorted(used.items())}


def offsets_note(applied: Mapping[str, Sequence[float]]) -> str:
    """E.g. "clock offsets applied (node clock minus head clock): node 1a2b3c4d5e6f +12.0 ms";
    "" when nothing moved."""
    if not applied:
        return ""
    parts = []
    for node_id, offsets in applied.items():
        low, high = min(offsets), max(offsets)
        text = f"{low * 1000:+.1f} ms" if low == high else \
            f"{low * 1000:+.1f} to {high * 1000:+.1f} ms"
        parts.append(f"node {node_id[:12]} {text}")
    return "clock offsets applied (node clock minus head clock): " + ", ".join(parts)
