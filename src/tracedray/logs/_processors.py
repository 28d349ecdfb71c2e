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
from typing import Any, cast

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
    return "%s.%06dZ" % (text, micros)  # noqa: UP031 -- ~0.5k instructions under the f-string


def filter_by_level(_: Any, method_name: str, event_dict: dict[str, Any]) -> dict[str, Any]:
    if METHOD_LEVEL.get(method_name, 20) < state.min_level:
        raise structlog.DropEvent
    return event_dict


# The level a method logs at, where its name is not the level's.
_LEVEL_OF_METHOD = {"exception": "error", "warn": "warning", "fatal": "critical", "msg": "info"}


def add_timestamp_and_level(_: Any, method_name: str,
                            event_dict: dict[str, Any]) -> dict[str, Any]:
    event_dict["timestamp"] = utc_timestamp(time.time())
    event_dict["level"] = _LEVEL_OF_METHOD.get(method_name, method_name)
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


# This process's pid, renewed in a forked child (which may log before it reconfigures):
# os.getpid() is a system call, ~0.25 µs on this VM, which every line paid.
_pid = os.getpid()


def _renew_pid() -> None:
    global _pid
    _pid = os.getpid()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_renew_pid)


def add_process_fields(_: Any, __: str, event_dict: dict[str, Any]) -> dict[str, Any]:
    # Precedence: what the call and the task context (added just before this) set,
    # then fields set later with set_process_context (e.g. the driver's node_id, known
    # once its node runs), then the placeholders from configure().
    merged = {**_process_defaults(), **event_dict}
    merged["pid"] = _pid
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


def line_order(keys: tuple[str, ...]) -> tuple[str, ...]:
    """The keys of a line in the order it is written: the LEADING_FIELDS it has, in
    that order, then the others in the order they came."""
    present = set(keys)
    leading = tuple(key for key in LEADING_FIELDS if key in present)
    return leading + tuple(key for key in keys if key not in LEADING_FIELDS)


# A line's keys in the order they came -> a dict of those keys (values None) in the
# order they are written, which each line copies and fills: update() keeps the keys'
# places. Lines from one call site come with the same keys in the same order, so a
# handful of entries serve a process. Reordering key by key cost ~17k instructions a
# line, a quarter of the chain.
_TEMPLATES: dict[tuple[str, ...], dict[str, None]] = {}
MAX_TEMPLATES = 1024  # forgotten beyond that (a program logging ever new keys): built again


def render_json(_: Any, __: str, event_dict: dict[str, Any]) -> bytes:
    """The line as UTF-8 bytes (no newline): what the sink appends."""
    keys = tuple(event_dict)
    template = _TEMPLATES.get(keys)
    if template is None:
        if len(_TEMPLATES) >= MAX_TEMPLATES:
            _TEMPLATES.clear()
        template = _TEMPLATES[keys] = dict.fromkeys(line_order(keys))
    line = template.copy()
    line.update(event_dict)
    return _encode(line)


_format_exc_info = structlog.processors.format_exc_info


def format_exc_info(logger: Any, method_name: str, event_dict: dict[str, Any]) -> dict[str, Any]:
    """structlog's ``format_exc_info`` for the lines that carry ``exc_info``; the others
    (nearly all) pass by a key test, not its ~2k instructions."""
    if "exc_info" in event_dict:
        return cast(dict[str, Any], _format_exc_info(logger, method_name, event_dict))
    return event_dict


PROCESSORS = [
    filter_by_level,
    add_timestamp_and_level,
    add_task_context,
    add_process_fields,
    add_trace_ids,
    format_exc_info,
    render_json,
]
