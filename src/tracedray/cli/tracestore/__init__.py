"""The CLI's read side of telemetry: span sources, logs, and the reconstruction engine.

Sources (session files, Jaeger api_v3) yield :class:`SpanRecord` s; :class:`Clocks`
moves every node's records onto the head's clock; pure functions turn them into a
task's story (:func:`task_story`) or a Chrome trace (:func:`build_chrome_trace`).
Nothing here talks to a running cluster.
"""

from tracedray.cli.tracestore.chrome_trace import build_chrome_trace, select_task_traces
from tracedray.cli.tracestore.clock import Clocks, OffsetTable, applied_offsets, offsets_note
from tracedray.cli.tracestore.logs import LogBatch, LogRecord, read_logs
from tracedray.cli.tracestore.model import SpanEvent, SpanRecord, parse_resource_spans
from tracedray.cli.tracestore.sources import (
    JaegerSource,
    SessionFileSource,
    SpanBatch,
    SpanQuery,
    TraceSource,
)
from tracedray.cli.tracestore.story import (
    StoryEvent,
    TaskStory,
    UnknownTask,
    close_matches,
    known_task_ids,
    task_story,
)

__all__ = [
    "Clocks",
    "JaegerSource",
    "LogBatch",
    "LogRecord",
    "OffsetTable",
    "SessionFileSource",
    "SpanBatch",
    "SpanEvent",
    "SpanQuery",
    "SpanRecord",
    "StoryEvent",
    "TaskStory",
    "TraceSource",
    "UnknownTask",
    "applied_offsets",
    "build_chrome_trace",
    "close_matches",
    "known_task_ids",
    "offsets_note",
    "parse_resource_spans",
    "read_logs",
    "select_task_traces",
    "task_story",
]
