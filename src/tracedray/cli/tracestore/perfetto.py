"""Spans → Perfetto's protobuf trace format (``timeline --output X.perfetto-trace``).

The same rows as the Chrome JSON (chrome_trace.layout: a process track per node, a
thread track per process, lane tracks for spans that overlap without nesting), as
Perfetto's own TracePacket/TrackEvent messages (proto/tracedray/v1/perfetto_trace.proto,
a subset with Perfetto's field numbers): a descriptor packet per track, then a slice
begin and a slice end per span with its attributes as debug annotations, and a flow
from each ``task.submit`` to every ``task.execute`` of its task. ui.perfetto.dev and
trace_processor read it without a JSON parse.

The file is written a packet at a time: a Trace message is the concatenation of its
``packet`` fields (tag 1, length-delimited), so no whole message is held in memory.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from typing import Any, BinaryIO

from tracedray._proto.v1 import perfetto_trace_pb2 as pb
from tracedray.cli.tracestore.chrome_trace import (
    LANE_STRIDE,
    Layout,
    Placed,
    process_names,
    span_args,
)
from tracedray.core.protocol.wire import varint
from tracedray.telemetry import attributes as attr

SEQUENCE_ID = 1  # every packet on one sequence, this writer's
_PACKET_TAG = b"\x0a"  # field 1, wire type 2: Trace.packet
_BEGIN, _END = 1, 2  # TrackEvent.Type


def framed(packet: pb.TracePacket) -> bytes:
    """One packet as it sits in a Trace file."""
    body = packet.SerializeToString()
    return _PACKET_TAG + varint(len(body)) + body


def track_uuid(pid: int, tid: int | None = None) -> int:
    """A stable non-zero uuid for a node's process track or one of its rows."""
    key = f"{pid}" if tid is None else f"{pid}/{tid}"
    return (zlib.crc32(key.encode()) << 20 | (pid & 0xFFFFF)) or 1


def _annotation(name: str, value: Any) -> pb.DebugAnnotation:
    found = pb.DebugAnnotation(name=name)
    if isinstance(value, bool):
        found.bool_value = value
    elif isinstance(value, int) and -(1 << 63) <= value < (1 << 63):
        found.int_value = value
    elif isinstance(value, float):
        found.double_value = value
    else:
        found.string_value = ", ".join(map(str, value)) if isinstance(value, list | tuple) \
            else str(value)
    return found


def _descriptors(placed: Layout) -> Iterator[pb.TracePacket]:
    for pid, label in sorted(process_names(placed.spans, placed.pids).items()):
        yield pb.TracePacket(trusted_packet_sequence_id=SEQUENCE_ID, track_descriptor=pb.
                             TrackDescriptor(uuid=track_uuid(pid), process=pb.
                                             ProcessDescriptor(pid=pid, process_name=label)))
    for (pid, tid), name in sorted(placed.thread_names.items()):
        descriptor = pb.TrackDescriptor(uuid=track_uuid(pid, tid), parent_uuid=track_uuid(pid))
        if tid < LANE_STRIDE:  # a process's own row; its lanes are named tracks under it
            descriptor.thread.CopyFrom(pb.ThreadDescriptor(pid=pid, tid=tid, thread_name=name))
        else:
            descriptor.name = name
        yield pb.TracePacket(trusted_packet_sequence_id=SEQUENCE_ID, track_descriptor=descriptor)


def _flows(placed: Layout) -> tuple[dict[int, list[int]], dict[int, int]]:
    """Span index → flow ids it starts (a task's first submit: one per execution), and
    span index → the flow id it ends (each execution)."""
    submits: dict[str, int] = {}
    for number, item in sorted(enumerate(placed.placed), key=lambda pair: pair[1].span.start_ns):
        task = item.span.get(attr.TASK_ID)
        if item.span.name == "task.submit" and task and str(task) not in submits:
            submits[str(task)] = number
    starts: dict[int, list[int]] = {}
    ends: dict[int, int] = {}
    flow = 0
    for number, item in enumerate(placed.placed):
        source = submits.get(str(item.span.get(attr.TASK_ID, "")))
        if item.span.name != "task.execute" or source is None:
            continue
        flow += 1
        starts.setdefault(source, []).append(flow)
        ends[number] = flow
    return starts, ends


def _slice_order(placed: list[Placed]) -> list[tuple[int, int, int, int]]:
    """(time, kind, tiebreak, span index) of every begin and end, in the order the
    packets go: by time; at one instant ends before begins, an inner slice's end before
    its outer's, an outer slice's begin before its inner's (slices on a track nest)."""
    marks = []
    for number, item in enumerate(placed):
        start, end = item.span.start_ns, max(item.span.start_ns, item.span.end_ns)
        marks.append((start, 1, -end, number))
        marks.append((end, 0, -start, number))
    marks.sort()
    return marks


def packets(placed: Layout) -> Iterator[pb.TracePacket]:
    """Every packet of the trace, descriptors first."""
    first = True
    for packet in _descriptors(placed):
        if first:
            packet.sequence_flags = 1  # SEQ_INCREMENTAL_STATE_CLEARED: a fresh sequence
            first = False
        yield packet
    starts, ends = _flows(placed)
    for time_ns, kind, _, number in _slice_order(placed.placed):
        item = placed.placed[number]
        event = pb.TrackEvent(track_uuid=track_uuid(item.pid, item.tid),
                              type=_BEGIN if kind else _END)  # type: ignore[arg-type]
        if kind:
            event.name = item.span.name
            event.categories.append(item.span.name.split(".", 1)[0])
            event.debug_annotations.extend(_annotation(key, value)
                                           for key, value in span_args(item.span).items())
            event.flow_ids.extend(starts.get(number, ()))
            if number in ends:
                event.terminating_flow_ids.append(ends[number])
        yield pb.TracePacket(timestamp=time_ns, trusted_packet_sequence_id=SEQUENCE_ID,
                             track_event=event)


def write_perfetto_trace(placed: Layout, out: BinaryIO) -> int:
    """Write the trace a packet at a time; returns how many packets."""
    count = 0
    for packet in packets(placed):
        out.write(framed(packet))
        count += 1
    return count
