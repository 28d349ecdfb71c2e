"""Object-store use per node over time, replayed from the store's events.

Answers "when did the store fill up, and with what": the usage series per node,
its peak, and the call sites whose objects were in the store at that peak.
``STORE_USED`` (the raylet's own figure after the event) is preferred when a
span carries it; otherwise usage is integrated from object sizes.

Every way an object enters or leaves a node's shared memory is an event:
``object.seal`` (the raylet admitted a copy: a put, a task or actor return, a pulled
secondary copy), ``object.restore`` in; ``object.free``, ``object.evict`` and
``object.spill`` out. The owner's ``object.put`` (sessions written before
``object.seal`` existed) counts as an entry too; the same object entering a node
twice (its ``object.put`` and its ``object.seal``) is counted once.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tracedray.cli.tracestore.model import SpanRecord
from tracedray.exceptions import ConfigError
from tracedray.telemetry import attributes as attr

# Span name → sign of its effect on the store (+ the object enters, − it leaves).
_EFFECT = {"object.put": +1, "object.seal": +1, "object.restore": +1, "object.free": -1,
           "object.spill": -1, "object.evict": -1}
_SPARK = " ▁▂▃▄▅▆▇█"
UNKNOWN_CALL_SITE = "unknown call site"
# An object.free's reason: "released" (its owner let go), else its owner's end ("owner
# exited", "owner died"; raylet/owner_death.py).
_FREE_REASON = "tracedray.object.free_reason"
_FREE_RELEASED = "released"


@dataclass(frozen=True)
class CallSiteUsage:
    call_site: str
    bytes: int
    objects: int


@dataclass(frozen=True)
class NodePeak:
    node_id: str
    time_ns: int
    used_bytes: int
    capacity_bytes: int | None
    top_call_sites: tuple[CallSiteUsage, ...] = field(default_factory=tuple)


@dataclass
class HeldObject:
    """An object a node's store holds (in shared memory, or spilled to disk)."""

    object_id: str
    size: int
    call_site: str
    spilled: bool = False
    secondary: bool = False  # a pulled copy of an object whose primary is elsewhere
    since_ns: int = 0


@dataclass
class NodeReplay:
    series: list[tuple[int, int]] = field(default_factory=list)
    live: dict[str, tuple[int, str]] = field(default_factory=dict)  # in shm: id → (size, site)
    held: dict[str, HeldObject] = field(default_factory=dict)  # in shm or spilled
    capacity: int | None = None
    peak: NodePeak | None = None
    spilled_count: int = 0
    spilled_bytes: int = 0
    restored_count: int = 0
    restored_bytes: int = 0
    last_event_ns: int = 0
    frees_after_owner_end: int = 0  # frees not counted: see replay_store's held_until
    # call site -> [bytes, objects] of what is in shm now, kept with ``live``: a peak's
    # top call sites cost O(call sites), not O(objects)
    site_totals: dict[str, list[int]] = field(default_factory=dict)

    def enter(self, object_id: str, size: int, site: str) -> None:
        """``object_id`` is in shared memory now (again, or with its call site known)."""
        old = self.live.get(object_id)
        if old is not None:
            self._count(old[1], -old[0], -1)
        self.live[object_id] = (size, site)
        self._count(site, size, 1)

    def leave(self, object_id: str) -> tuple[int, str] | None:
        """``object_id`` left shared memory; what it was, or None if it was not there."""
        old = self.live.pop(object_id, None)
        if old is not None:
            self._count(old[1], -old[0], -1)
        return old

    def _count(self, site: str, size: int, objects: int) -> None:
        entry = self.site_totals.setdefault(site, [0, 0])
        entry[0] += size
        entry[1] += objects
        if entry[1] <= 0:
            del self.site_totals[site]

    @property
    def used(self) -> int:
        return self.series[-1][1] if self.series else 0


def _store_events(spans: Iterable[SpanRecord]) -> list[SpanRecord]:
    relevant = []
    for span in spans:
        if span.name not in _EFFECT:
            continue
        if span.name == "object.put" and span.get(attr.OBJECT_LOCATION) != "shm":
            continue  # inline values never touch the shared-memory store
        relevant.append(span)
    # The effect is known once the span ends (STORE_USED is "after the event").
    return sorted(relevant, key=lambda s: (s.end_ns, s.start_ns))


def replay_store(spans: Iterable[SpanRecord], top: int = 5,
                 held_until: Mapping[str, int] | None = None) -> dict[str, NodeReplay]:
    """Node id → its store replayed from the session's events, in time order.

    With ``held_until`` (object id → its owner's end, ns), an object freed because its
    owner ended (the free's reason says so, or it came after that time) stays in
    ``held``: the post-mortem view shows what an owner held when it ended, not the frees
    its end caused. The usage series always follows every event.
    """
    nodes: dict[str, NodeReplay] = {}
    call_sites: dict[str, str] = {}  # object id → where it was created, across nodes
    for span in _store_events(spans):
        node = nodes.setdefault(span.node_id, NodeReplay())
        object_id = str(span.get(attr.OBJECT_ID, ""))
        size = span.int_attr(attr.OBJECT_SIZE) or 0
        site = span.get(attr.OBJECT_CALL_SITE)
        if site and span.name in ("object.put", "object.seal"):
            call_sites[object_id] = str(site)
        delta = _apply(node, span, object_id, size,
                       call_sites.get(object_id, UNKNOWN_CALL_SITE), held_until)
        previous = node.series[-1][1] if node.series else 0
        used = span.int_attr(attr.STORE_USED)
        if used is None:
            used = max(0, previous + delta)
        node.capacity = span.int_attr(attr.STORE_CAPACITY) or node.capacity
        node.series.append((span.end_ns, used))
        node.last_event_ns = max(node.last_event_ns, span.end_ns)
        if node.peak is None or used > node.peak.used_bytes:
            node.peak = NodePeak(span.node_id, span.end_ns, used, node.capacity,
                                 _top_call_sites(node.site_totals, top))
    return nodes


def _apply(node: NodeReplay, span: SpanRecord, object_id: str, size: int, site: str,
           held_until: Mapping[str, int] | None) -> int:
    """Apply one event to the node's objects; returns its change to the bytes in shm."""
    if _EFFECT[span.name] > 0:
        if span.name == "object.restore":
            node.restored_count += 1
            node.restored_bytes += size
        elif object_id in node.live:
            # The same entry seen twice (the owner's object.put and the raylet's
            # object.seal): only the call site may be news.
            node.enter(object_id, node.live[object_id][0], site)
            if object_id in node.held:
                node.held[object_id].call_site = site
            return 0
        node.enter(object_id, size, site)
        held = node.held.get(object_id)
        if held is not None:
            held.spilled = False
        else:
            secondary = span.get(attr.OBJECT_COPY) == "secondary"
            node.held[object_id] = HeldObject(object_id, size, site, secondary=secondary,
                                              since_ns=span.end_ns)
        return size
    in_shm = node.leave(object_id)
    if span.name == "object.spill":
        node.spilled_count += 1
        node.spilled_bytes += size or (in_shm[0] if in_shm else 0)
        if object_id in node.held:
            node.held[object_id].spilled = True
    elif span.name == "object.free" and held_until is not None and (
            _freed_for_owner_end(span)
            or span.end_ns >= held_until.get(object_id, span.end_ns + 1)):
        node.frees_after_owner_end += 1
    else:
        node.held.pop(object_id, None)
    # Freeing an object that is not in this store's memory (already spilled, or its entry
    # was never seen) changes nothing we counted.
    return -(in_shm[0] or size) if in_shm is not None else 0


def _freed_for_owner_end(span: SpanRecord) -> bool:
    """The raylet freed it because its owner exited or died (its free reason says so),
    not because the owner let go of it."""
    reason = span.get(_FREE_REASON)
    return bool(reason) and reason != _FREE_RELEASED


def _top_call_sites(totals: Mapping[str, list[int]], top: int) -> tuple[CallSiteUsage, ...]:
    if top <= 0:
        return ()
    ranked = sorted(totals.items(), key=lambda item: (-item[1][0], item[0]))
    return tuple(CallSiteUsage(site, total, count) for site, (total, count) in ranked[:top])


def store_usage_series(spans: Iterable[SpanRecord]) -> dict[str, list[tuple[int, int]]]:
    """Node id → [(time ns, bytes used after the event)], in time order."""
    return {node: replay.series for node, replay in replay_store(spans, top=0).items()}


def store_peaks(spans: Iterable[SpanRecord], top: int = 5) -> dict[str, NodePeak]:
    """Node id → the first moment of its highest use and the call sites holding the most then."""
    return {node: replay.peak for node, replay in replay_store(spans, top).items()
            if replay.peak is not None}


def _human_bytes(count: int) -> str:
    value = float(count)
    for unit in ("B", "KB", "MB", "GB"):
        if value < 1024 or unit == "GB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{count} B"


def _sample(series: Sequence[tuple[int, int]], start_ns: int, end_ns: int,
            width: int) -> list[int]:
    """Per column, the highest use during that column's time slice (a step function)."""
    span_ns = max(1, end_ns - start_ns)
    columns = [0] * width
    level = 0
    index = 0
    for column in range(width):
        column_end = start_ns + span_ns * (column + 1) // width
        highest = level
        while index < len(series) and series[index][0] <= column_end:
            level = series[index][1]
            highest = max(highest, level)
            index += 1
        columns[column] = highest
    return columns


def render_terminal_chart(series: Mapping[str, Sequence[tuple[int, int]]],
                          peaks: Mapping[str, NodePeak], width: int = 60) -> str:
    """One sparkline per node on a shared time axis, then its peak and top call sites."""
    points = [t for values in series.values() for t, _ in values]
    if not points:
        return ("no object-store events (object.seal, object.put to shm, free, spill, restore, "
                "evict) were recorded")
    start_ns, end_ns = min(points), max(points)
    lines = [f"object store use, {(end_ns - start_ns) / 1e9:.2f} s from first to last event"]
    for node in sorted(series):
        peak = peaks.get(node)
        scale = (peak.capacity_bytes if peak and peak.capacity_bytes else None) or max(
            (used for _, used in series[node]), default=1) or 1
        columns = _sample(series[node], start_ns, end_ns, width)
        spark = "".join(_SPARK[min(8, round(8 * used / scale))] for used in columns)
        lines.append(f"node {node[:12] or '?':<12} |{spark}|")
        if peak is not None:
            of = f" of {_human_bytes(peak.capacity_bytes)}" if peak.capacity_bytes else ""
            at = (peak.time_ns - start_ns) / 1e9
            lines.append(f"  peak {_human_bytes(peak.used_bytes)}{of} at +{at:.2f} s; held by:")
            for usage in peak.top_call_sites:
                lines.append(f"    {_human_bytes(usage.bytes):>10}  {usage.objects:>4} obj  "
                             f"{usage.call_site}")
    return "\n".join(lines)


def save_png(series: Mapping[str, Sequence[tuple[int, int]]], peaks: Mapping[str, NodePeak],
             path: Path) -> Path:
    """A step plot of use per node with each peak marked; needs the ``plot`` extra."""
    try:
        import matplotlib

        matplotlib.use("Agg")  # no display needed; must precede pyplot's import
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise ConfigError("--output FILE.png needs matplotlib: pip install 'tracedray[plot]'") \
            from exc
    points = [t for values in series.values() for t, _ in values]
    origin = min(points) if points else 0
    figure, axes = plt.subplots(figsize=(10, 4))
    try:
        for node in sorted(series):
            times = [(t - origin) / 1e9 for t, _ in series[node]]
            used = [u / 2**20 for _, u in series[node]]
            axes.step(times, used, where="post", label=f"node {node[:12]}")
            peak = peaks.get(node)
            if peak is not None:
                top = peak.top_call_sites[0].call_site if peak.top_call_sites else ""
                axes.annotate(f"peak {_human_bytes(peak.used_bytes)}\n{top}",
                              ((peak.time_ns - origin) / 1e9, peak.used_bytes / 2**20),
                              fontsize=7)
        axes.set_xlabel("seconds since first store event")
        axes.set_ylabel("object store used (MiB)")
        axes.legend(loc="upper left", fontsize=8)
        figure.tight_layout()
        figure.savefig(path)
    finally:
        plt.close(figure)
    return path
