"""The processor chain: small functions with structlog's one signature.

``(logger, method_name, event_dict) -> event_dict``; the last one renders the
line. Each reads explicit module state set by ``configure`` (see _setup.py).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import structlog

from tracedray.logs import _context
from tracedray.telemetry._api import current_trace_ids

LEVELS = {"debug": 10, "info": 20, "warning": 30, "error": 40, "critical": 50}
# structlog method names that are aliases of a level
METHOD_LEVEL = {**LEVELS, "warn": 30, "exception": 40, "fatal": 50, "msg": 20}

# The fields a reader expects first; everything else follows in call order.
LEADING_FIELDS = ("timestamp", "level", "event", "component", "host", "ip", "pid", "node_id",
                  "session_id", "versions", "job_id", "task_id", "actor_id", "worker_id",
                  "task_name", "attempt", "trace_id", "span_id")


@dataclass
class ProcessorState:
    """What configure() decided; replaced as a whole, never mutated in place."""

    min_level: int = LEVELS["warning"]
    static_fields: Mapping[str, Any] = field(default_factory=dict)


state = ProcessorState()


def utc_timestamp(now: float) -> str:
    """ISO 8601 in UTC with microseconds and a ``Z``: 2026-11-21T22:30:32.109031Z."""
    seconds = int(now)
    micros = int((now - seconds) * 1_000_000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{micros:06d}Z"


def filter_by_level(_: Any, method_name: str, event_dict: dict[str, Any]) -> dict[str, Any]:
    if METHOD_LEVEL.get(method_name, 20) < state.min_level:
        raise structlog.DropEvent
    return event_dict


def add_timestamp_and_level(_: Any, method_name: str,
                            event_dict: dict[str, Any]) -> dict[str, Any]:
    event_dict["timestamp"] = utc_timestamp(time.time())
    level = "error" if method_name == "exception" else method_name
    event_dict["level"] = {"warn": "warning", "fatal": "critical", "msg": "info"}.get(level,
                                                                                     level)
    return event_dict


def add_process_fields(_: Any, __: str, event_dict: dict[str, Any]) -> dict[str, Any]:
    # Precedence (each step only fills what is missing): the task context (added just
    # before this), then fields set later with set_process_context (e.g. the driver's
    # node_id, known once its node runs), then the placeholders from configure().
    for key, value in _context.process_fields().items():
        event_dict.setdefault(key, value)
    for key, value in state.static_fields.items():
        event_dict.setdefault(key, value)
    # Read per line: a forked child that has not reconfigured still reports its own pid.
    event_dict["pid"] = os.getpid()
    return event_dict


def add_task_context(_: Any, __: str, event_dict: dict[str, Any]) -> dict[str, Any]:
    for key, value in _context.task_fields().items():
        event_dict.setdefault(key, value)
    return event_dict


def add_trace_ids(_: Any, __: str, event_dict: dict[str, Any]) -> dict[str, Any]:
    ids = current_trace_ids()
    if ids is not None:
        event_dict.setdefault("trace_id", ids[0])
        event_dict.setdefault("span_id", ids[1])
    return event_dict


_encode = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, default=repr).encode


def render_json(_: Any, __: str, event_dict: dict[str, Any]) -> str:
    ordered = {key: event_dict.pop(key) for key in LEADING_FIELDS if key in event_dict}
    ordered.update(event_dict)
    return _encode(ordered)


PROCESSORS = [
    filter_by_level,
    add_timestamp_and_level,
    add_task_context,
    add_process_fields,
    add_trace_ids,
    structlog.processors.format_exc_info,
    render_json,
]
