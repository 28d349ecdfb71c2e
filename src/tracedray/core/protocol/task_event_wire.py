"""Task events written straight in protobuf's wire format (``gcs.proto``'s ``TaskEvent``).

Every task and actor call costs its process one event; building it as a message (a
constructor with keyword fields, two map fields filled key by key, then the serializer)
cost the actor about a fifth of a call's CPU. The bytes here are what the message would
serialize to, field for field (tests/unit/test_task_event_wire.py parses them back), and
the GCS parses them as before: only the sender changed.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping

from tracedray.core.protocol.wire import varint

_pack_double = struct.Struct("<d").pack
_pack_fixed64 = struct.Struct("<Q").pack


def _tag(field: int, wire_type: int) -> bytes:
    return varint(field << 3 | wire_type)


_VARINT, _FIXED64, _LEN = 0, 1, 2
# TaskEvent's fields (gcs.proto), by number.
TASK_ID, ATTEMPT, STATE, TIME = _tag(1, _LEN), _tag(2, _VARINT), _tag(3, _LEN), _tag(4, _FIXED64)
FUNCTION_NAME, JOB_ID, NODE_ID, WORKER_ID = (_tag(5, _LEN), _tag(6, _LEN), _tag(7, _LEN),
                                             _tag(8, _LEN))
WORKER_PID, ERROR_TYPE, ERROR_MESSAGE, ACTOR_ID = (_tag(9, _VARINT), _tag(10, _LEN),
                                                   _tag(11, _LEN), _tag(12, _LEN))
KIND, CALL_SITE, PARENT_TASK_ID, TRACE_ID = (_tag(13, _LEN), _tag(14, _LEN), _tag(15, _LEN),
                                             _tag(16, _LEN))
RESOURCES, STATE_TIMES, SUBMIT_SPAN_ID = _tag(17, _LEN), _tag(18, _LEN), _tag(19, _FIXED64)
# A map entry's key (1, string) and value (2, double).
_ENTRY_KEY, _ENTRY_VALUE = _tag(1, _LEN), _tag(2, _FIXED64)
# TaskEvents.events (1): the request AddTaskEvents takes.
_EVENTS = _tag(1, _LEN)


def raw(tag: bytes, value: bytes) -> bytes:
    """A length-delimited field; nothing when ``value`` is empty (proto3's default)."""
    return tag + varint(len(value)) + value if value else b""


def text(tag: bytes, value: str) -> bytes:
    return raw(tag, value.encode()) if value else b""


def number(tag: bytes, value: int) -> bytes:
    return tag + varint(value) if value else b""


def double(tag: bytes, value: float) -> bytes:
    return tag + _pack_double(value) if value else b""


def fixed64(tag: bytes, value: int) -> bytes:
    return tag + _pack_fixed64(value) if value else b""


def double_map(tag: bytes, entries: Mapping[str, float]) -> bytes:
    """A ``map<string, double>`` field, one entry per key."""
    out = []
    for key, value in entries.items():
        key_bytes = key.encode()
        entry = _ENTRY_KEY + varint(len(key_bytes)) + key_bytes + _ENTRY_VALUE \
            + _pack_double(value)
        out.append(tag + varint(len(entry)) + entry)
    return b"".join(out)


def events_request(events: Iterable[bytes]) -> bytes:
    """A serialized ``TaskEvents`` holding these serialized ``TaskEvent`` messages."""
    return b"".join([_EVENTS + varint(len(event)) + event for event in events])
