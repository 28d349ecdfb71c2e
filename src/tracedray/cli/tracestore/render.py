"""Turn a TaskStory into terminal text (Rich) or JSON; no reconstruction happens here."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.text import Text

from tracedray.cli.tracestore.story import (
    FAILED,
    FINISHED,
    TaskStory,
    UnknownTask,
    duration_text,
    utc_text,
)

_KIND_STYLE = {"submitted": "cyan", "scheduled": "blue", "dispatched": "blue",
               "started": "green", "output": "white", "retry": "yellow", "final": "bold",
               "job_end": "red"}
_STATE_STYLE = {FINISHED: "bold green", FAILED: "bold red"}


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, bytes):
        return value.hex()
    return value


def story_to_dict(story: TaskStory,
                  clock_offsets: Mapping[str, Sequence[float]] | None = None) -> dict[str, Any]:
    """``clock_offsets``: per node, the offsets (s) that moved its records onto the head's
    clock (``tracestore.clock.applied_offsets``)."""
    return {
        "task_id": story.task_id,
        "function": story.function,
        "trace_id": story.trace_id,
        "jaeger_link": story.jaeger_link or None,
        "final_state": story.final_state,
        "start": utc_text(story.start_ns),
        "end": utc_text(story.end_ns),
        "duration_s": (story.end_ns - story.start_ns) / 1e9,
        "attempts": [{"attempt": a.attempt, "outcome": a.outcome, "time": utc_text(a.time_ns),
                      "summary": a.summary} for a in story.attempts],
        "events": [{"time": utc_text(e.time_ns), "time_unix_nano": e.time_ns, "kind": e.kind,
                    "attempt": e.attempt, "summary": e.summary,
                    "duration_s": None if e.duration_ns is None else e.duration_ns / 1e9,
                    "details": _plain(e.details), "traceback": e.traceback or None}
                   for e in story.events],
        "clock_offsets_s": {node: list(offsets)
                            for node, offsets in (clock_offsets or {}).items()},
    }


def unknown_to_dict(unknown: UnknownTask) -> dict[str, Any]:
    return {"error": unknown.message, "task_id": unknown.task_id,
            "suggestions": list(unknown.suggestions)}


def story_json(story: TaskStory | UnknownTask,
               clock_offsets: Mapping[str, Sequence[float]] | None = None) -> str:
    data = story_to_dict(story, clock_offsets) if isinstance(story, TaskStory) \
        else unknown_to_dict(story)
    return json.dumps(data, indent=2, default=str)


def print_story(story: TaskStory, console: Console, clock_note: str = "") -> None:
    """``clock_note``: which clock offsets moved records (``tracestore.clock.offsets_note``)."""
    state_style = _STATE_STYLE.get(story.final_state, "yellow")
    console.print(Text.assemble(("task ", "bold"), (story.task_id, "bold cyan"),
                                f"  {story.function}  ", (story.final_state, state_style)))
    console.print(f"trace {story.trace_id}"
                  + (f"  {escape(story.jaeger_link)}" if story.jaeger_link else ""))
    console.print(f"{utc_text(story.start_ns)} → {utc_text(story.end_ns)} "
                  f"({duration_text(story.end_ns - story.start_ns)}), times in UTC")
    if clock_note:
        console.print(Text(clock_note, style="dim"), soft_wrap=True)
    console.print()
    for event in story.events:
        style = _KIND_STYLE.get(event.kind, "")
        if event.kind == "ended":
            style = "green" if event.details.get("outcome") == "returned" else "red"
        line = Text(utc_text(event.time_ns)[11:], style="dim")
        line.append("  ")
        line.append(f"[{event.attempt}]" if event.attempt is not None else "   ", style="dim")
        line.append("  ")
        line.append(event.summary, style=style)
        if event.duration_ns is not None and event.kind not in ("output", "submitted"):
            line.append(f"  ({duration_text(event.duration_ns)})", style="dim")
        console.print(line, soft_wrap=True)
        if event.kind == "scheduled" and event.details.get("candidates"):
            console.print(Text(f"                    candidates: {_candidates(event.details)}",
                               style="dim"), soft_wrap=True)
        if event.traceback:
            for tb_line in event.traceback.rstrip().splitlines():
                console.print(Text("                    " + tb_line, style="red"),
                              soft_wrap=True)


def _candidates(details: Mapping[str, Any]) -> str:
    nodes = list(details.get("candidates") or [])
    local = list(details.get("local_bytes") or [])
    queues = list(details.get("queue_lengths") or [])
    parts = []
    for index, node in enumerate(nodes):
        extra = []
        if index < len(local):
            extra.append(f"{local[index]} B local")
        if index < len(queues):
            extra.append(f"queue {queues[index]}")
        parts.append(f"{str(node)[:12]}" + (f" ({', '.join(extra)})" if extra else ""))
    return "; ".join(parts)
