"""Spans → Chrome Trace Event JSON, for Perfetto and chrome://tracing (research §7).

Layout: one process row per node (``pid`` derived from the node id, named with
its ip), one thread row per process on that node (``tid`` = the OS pid of the
driver, worker, raylet or GCS), one complete (``X``) event per span, and flow
arrows (``s`` → ``f``) from each ``task.submit`` to every ``task.execute`` of
that task. Perfetto requires slices on one thread to nest strictly, so spans
that overlap without nesting (concurrent submits from one driver) are moved to
extra "lane" rows of the same process instead of being dropped by the viewer.
Spans are expected on the head's clock already (``tracestore.clock``); a moved
span's args and ``otherData.clock_offsets_s`` say by how much.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TextIO

from tracedray.cli.tracestore.clock import applied_offsets
from tracedray.cli.tracestore.model import SpanRecord
from tracedray.telemetry import attributes as attr

# Lane rows get tids above Linux's largest pid_max (2**22), so they never collide with a real pid.
LANE_STRIDE = 1 << 22
_WORKER_LIFECYCLE = ("worker.start", "worker.exit")


@dataclass(frozen=True)
class Placed:
    span: SpanRecord
    pid: int
    tid: int


def node_pids(node_ids: Iterable[str]) -> dict[str, int]:
    """A stable small int per node id (same node → same row number in every export)."""
    result: dict[str, int] = {}
    taken: set[int] = set()
    for node_id in sorted(set(node_ids)):
        candidate = zlib.crc32(node_id.encode()) % 100_000 + 1
        while candidate in taken:  # collisions are rare; probe deterministically
            candidate += 1
        taken.add(candidate)
        result[node_id] = candidate
    return result


def assign_lanes(intervals: Sequence[tuple[int, int]]) -> list[int]:
    """For each (start, end), the first lane where it nests inside or follows what is there."""
    order = sorted(range(len(intervals)), key=lambda i: (intervals[i][0], -intervals[i][1]))
    stacks: list[list[int]] = []  # per lane, the ends of the open enclosing intervals
    lanes = [0] * len(intervals)
    for index in order:
        start, end = intervals[index]
        for lane, stack in enumerate(stacks):
            while stack and stack[-1] <= start:
                stack.pop()
            if not stack or stack[-1] >= end:
                stack.append(end)
                lanes[index] = lane
                break
        else:
            stacks.append([end])
            lanes[index] = len(stacks) - 1
    return lanes


def select_task_traces(spans: Sequence[SpanRecord], task_id: str) -> list[SpanRecord]:
    """Every span of the trace(s) the task belongs to."""
    wanted = task_id.strip().lower()
    traces = {s.trace_id for s in spans if str(s.get(attr.TASK_ID, "")).lower() == wanted}
    return [s for s in spans if s.trace_id in traces]


def _row_key(span: SpanRecord) -> tuple[str, int]:
    """(node, OS pid) of the row a span is drawn on: the process that recorded it, except
    worker lifecycle spans, which the raylet records about a worker (a SIGKILLed worker
    writes nothing itself, so its death would otherwise have no row of its own)."""
    if span.name in _WORKER_LIFECYCLE and span.int_attr(attr.WORKER_PID) is not None:
        return span.recorder_node_id, span.int_attr(attr.WORKER_PID) or 0
    return span.recorder_node_id, span.pid or 0


def _row_component(span: SpanRecord) -> str:
    return "worker" if span.name in _WORKER_LIFECYCLE else span.component


def _place(spans: Sequence[SpanRecord], pids: dict[str, int],
           ) -> tuple[list[Placed], dict[tuple[int, int], str]]:
    rows: dict[tuple[str, int], list[SpanRecord]] = {}
    for span in spans:
        rows.setdefault(_row_key(span), []).append(span)
    placed: list[Placed] = []
    thread_names: dict[tuple[int, int], str] = {}
    for (node_id, os_pid), row in sorted(rows.items()):
        lanes = assign_lanes([(s.start_ns, s.end_ns) for s in row])
        component = next((_row_component(s) for s in row if _row_component(s)), "process")
        for span, lane in zip(row, lanes, strict=True):
            tid = os_pid + lane * LANE_STRIDE
            thread_names[(pids[node_id], tid)] = f"{component} {os_pid}" + (
                f" · lane {lane + 1}" if lane else "")
            placed.append(Placed(span, pids[node_id], tid))
    return placed, thread_names


def span_args(span: SpanRecord) -> dict[str, Any]:
    args: dict[str, Any] = {key: (list(value) if isinstance(value, tuple) else value)
                            for key, value in span.attributes.items()
                            if not isinstance(value, bytes)}
    args.update(trace_id=span.trace_id, span_id=span.span_id)
    if span.parent_id:
        args["parent_span_id"] = span.parent_id
    if span.is_error:
        args["status"] = "ERROR" + (f": {span.status_message}" if span.status_message else "")
    if span.clock_offset_ns:
        args["clock_offset_s"] = span.clock_offset_ns / 1e9  # subtracted: now head-clock time
    return args


def _metadata(spans: Sequence[SpanRecord], pids: dict[str, int],
              thread_names: dict[tuple[int, int], str]) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    for pid, label in sorted(process_names(spans, pids).items()):
        events.append({"name": "process_name", "ph": "M", "pid": pid, "tid": 0,
                       "args": {"name": label}})
    for (pid, tid), name in sorted(thread_names.items()):
        events.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": tid,
                       "args": {"name": name}})
    return events


def _flows(placed: Sequence[Placed]) -> list[dict[str, Any]]:
    submits: dict[str, Placed] = {}
    for item in sorted(placed, key=lambda p: p.span.start_ns):
        task = item.span.get(attr.TASK_ID)
        if item.span.name == "task.submit" and task and str(task) not in submits:
            submits[str(task)] = item
    events: list[dict[str, Any]] = []
    flow_id = 0
    for item in placed:
        if item.span.name != "task.execute":
            continue
        source = submits.get(str(item.span.get(attr.TASK_ID, "")))
        if source is None:
            continue
        flow_id += 1
        common = {"name": "submit → execute", "cat": "task", "id": flow_id}
        events.append({**common, "ph": "s", "ts": source.span.start_ns / 1000,
                       "pid": source.pid, "tid": source.tid})
        # bp "e": bind to the enclosing slice (the execute span), not the next one.
        events.append({**common, "ph": "f", "bp": "e", "ts": item.span.start_ns / 1000,
                       "pid": item.pid, "tid": item.tid})
    return events


@dataclass(frozen=True)
class Layout:
    """Where each span is drawn: a process row per node, a thread row (and lanes) per
    process; shared by the JSON and the Perfetto protobuf writers."""

    spans: list[SpanRecord]
    pids: dict[str, int]  # node id -> process row
    placed: list[Placed]
    thread_names: dict[tuple[int, int], str]


def layout(spans: Sequence[SpanRecord], *, task_id: str = "") -> Layout:
    chosen = select_task_traces(spans, task_id) if task_id else list(spans)
    pids = node_pids(span.recorder_node_id for span in chosen)
    placed, thread_names = _place(chosen, pids)
    return Layout(chosen, pids, placed, thread_names)


def process_names(spans: Sequence[SpanRecord], pids: dict[str, int]) -> dict[int, str]:
    """Process row -> its label (the node's ip and id)."""
    ips: dict[str, str] = {}
    for span in spans:
        if span.host_ip and span.recorder_node_id not in ips:
            ips[span.recorder_node_id] = span.host_ip
    return {pid: f"node {ips.get(node_id, '?')}" + (f" ({node_id[:12]})" if node_id
                                                     else " (unknown node)")
            for node_id, pid in pids.items()}


def _events(placed: Layout) -> Iterator[dict[str, Any]]:
    yield from _metadata(placed.spans, placed.pids, placed.thread_names)
    for item in placed.placed:
        event: dict[str, Any] = {
            "name": item.span.name, "cat": item.span.name.split(".", 1)[0], "ph": "X",
            "ts": item.span.start_ns / 1000, "dur": item.span.duration_ns / 1000,
            "pid": item.pid, "tid": item.tid, "args": span_args(item.span)}
        if item.span.is_error:
            event["cname"] = "terrible"  # a reserved catapult colour: failures stand out
        yield event
    yield from _flows(placed.placed)


def _other_data(placed: Layout, task_id: str) -> dict[str, Any]:
    return {"generator": "tracedray timeline", "task_id": task_id or None,
            "span_count": len(placed.spans),
            "clock_offsets_s": {node: list(offsets) for node, offsets
                                in applied_offsets(placed.spans).items()}}


def build_chrome_trace(spans: Sequence[SpanRecord], *, task_id: str = "") -> dict[str, Any]:
    """The JSON Object Format document; ``task_id`` restricts it to that task's trace."""
    placed = layout(spans, task_id=task_id)
    return {"traceEvents": list(_events(placed)), "displayTimeUnit": "ms",
            "otherData": _other_data(placed, task_id)}


def write_chrome_trace(spans: Sequence[SpanRecord], out: TextIO, *,
                       task_id: str = "") -> tuple[int, dict[str, Any]]:
    """The same document as :func:`build_chrome_trace`, written to ``out`` an event at a
    time (one per line) instead of built as one string: memory holds the spans, not
    the text. Returns the number of events and ``otherData``."""
    placed = layout(spans, task_id=task_id)
    out.write('{"displayTimeUnit":"ms","traceEvents":[')
    count = 0
    for event in _events(placed):
        out.write(("," if count else "") + "\n" + json.dumps(event))
        count += 1
    other = _other_data(placed, task_id)
    out.write('\n],"otherData":' + json.dumps(other) + "}\n")
    return count, other
