"""The processor chain: small functions with structlog's one signature.

``(logger, method_name, event_dict) -> event_dict``; the last one renders the
line. Each reads explicit module state set by ``configure`` (see _setup.py).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Mapping
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


_second_cache: tuple[int, str] = (-1, "")


def utc_timestamp(now: float) -> str:
    """ISO 8601 in UTC with microseconds and a ``Z``: 2026-11-21T22:30:32.109031Z."""
    global _second_cache
    seconds = int(now)
    micros = int((now - seconds) * 1_000_000)
    cached_second, text = _second_cache
    if cached_second != seconds:  # strftime is most of the cost; lines come many per second
        text = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds))
        _second_cache = (seconds, text)
    return f"{text}.{micros:06d}Z"


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


_merged_cache: tuple[object, object, Mapping[str, Any]] = (None, None, {})


def _process_defaults() -> Mapping[str, Any]:
    """Static fields overridden by process fields, merged once per change of either.

    Both mappings are replaced, never mutated, so their identities are the cache key.
    """
    global _merged_cache
    static, process = state.static_fields, _context.process_fields()
    cached_static, cached_process, merged = _merged_cache
    if cached_static is not static or cached_process is not process:
        merged = {**static, **process}
        _merged_cache = (static, process, merged)
    return merged


def add_process_fields(_: Any, __: str, event_dict: dict[str, Any]) -> dict[str, Any]:
    # Precedence: what the call and the task context (added just before this) set,
    # then fields set later with set_process_context (e.g. the driver's node_id, known
    # once its node runs), then the placeholders from configure().
    merged = {**_process_defaults(), **event_dict}
    # Read per line: a forked child that has not reconfigured still reports its own pid.
    merged["pid"] = os.getpid()
    return merged


def add_task_context(_: Any, __: str, event_dict: dict[str, Any]) -> dict[str, Any]:
    for key, value in _context.task_fields().items():
        event_dict.setdefault(key, value)
    return event_dict


def add_trace_ids(_: Any, __: str, event_dict: dict[str, Any]) -> dict[str, Any]:
    if "span_id" in event_dict and "trace_id" in event_dict:
        return event_dict  # given by the caller (a task's submission line): they win
    ids = current_trace_ids()
    if ids is not None:
        event_dict.setdefault("trace_id", ids[0])
        event_dict.setdefault("span_id", ids[1])
    return event_dict


_json_encode = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, default=repr).encode


def _encode_stdlib(record: dict[str, Any]) -> bytes:
    return _json_encode(record).encode("utf-8", "surrogateescape")


def _make_encoder() -> Callable[[dict[str, Any]], bytes]:
    """orjson when installed (~10x faster than json here), with json as the fallback.

    orjson refuses what json accepts (lone surrogates, non-str keys, ints beyond 64
    bits): such a record falls back to json, so the output never depends on it.
    """
    try:
        import orjson
    except ImportError:
        return _encode_stdlib
    dumps = orjson.dumps

    def encode(record: dict[str, Any]) -> bytes:
        try:
            return dumps(record, default=repr)
        except (TypeError, ValueError):  # orjson.JSONEncodeError is a TypeError
            return _encode_stdlib(record)

    return encode


_encode = _make_encoder()


def render_json(_: Any, __: str, event_dict: dict[str, Any]) -> bytes:
    """The line as UTF-8 bytes (no newline): what the sink appends."""
    # update() keeps the position of keys already present: the leading ones stay first.
    ordered = {key: event_dict[key] for key in LEADING_FIELDS if key in event_dict}
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
