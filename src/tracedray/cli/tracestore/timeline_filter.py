"""Which spans `tracedray timeline` keeps: a time window, a job, a node (pure functions).

``--since``/``--until`` take an ISO 8601 time (``2026-11-27T10:05:00``, UTC unless it
says otherwise) or a span back from now (``-10m``, ``-30s``, ``-2h``, ``-1d``). A span
is kept when it overlaps the window, on the head's clock. ``--job`` keeps the traces of
that job's tasks (every span of a trace one of whose task submissions names the job:
its scheduling, executions, object transfers); ``--node`` the spans about that node or
recorded on it. Ids may be prefixes.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timezone

from tracedray.cli.tracestore.model import SpanRecord
from tracedray.exceptions import ConfigError
from tracedray.telemetry import attributes as attr

_AGO = re.compile(r"^-(\d+(?:\.\d+)?)(s|m|h|d)$")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_moment(text: str, now_ns: int, option: str = "--since") -> int:
    """Unix ns of ``text``: ISO 8601 (naive is UTC) or ``-N{s,m,h,d}`` before ``now_ns``."""
    value = text.strip()
    ago = _AGO.match(value)
    if ago:
        return now_ns - round(float(ago[1]) * _UNIT_S[ago[2]] * 1e9)
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError as exc:
        raise ConfigError(f"{option} {text!r}: give an ISO 8601 time (2026-11-27T10:05:00, "
                          "UTC unless it says) or a span back from now (-10m, -30s, -2h)"
                          ) from exc
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return round(moment.timestamp() * 1e6) * 1000


@dataclass(frozen=True)
class SpanFilter:
    since_ns: int | None = None
    until_ns: int | None = None
    job: str = ""  # a job id or prefix (hex)
    node: str = ""  # a node id or prefix (hex)

    @property
    def empty(self) -> bool:
        return self.since_ns is None and self.until_ns is None and not self.job and not self.node

    def in_window(self, span: SpanRecord) -> bool:
        if self.since_ns is not None and max(span.end_ns, span.start_ns) < self.since_ns:
            return False
        return self.until_ns is None or span.start_ns <= self.until_ns

    def on_node(self, span: SpanRecord) -> bool:
        wanted = self.node.lower()
        return not wanted or span.node_id.lower().startswith(wanted) \
            or span.recorder_node_id.lower().startswith(wanted)

    def select(self, spans: Iterable[SpanRecord]) -> list[SpanRecord]:
        kept = [s for s in spans if self.in_window(s) and self.on_node(s)]
        if not self.job:
            return kept
        wanted = self.job.lower()
        traces = {s.trace_id for s in kept
                  if str(s.get(attr.JOB_ID, "")).lower().startswith(wanted)}
        return [s for s in kept if s.trace_id in traces]
