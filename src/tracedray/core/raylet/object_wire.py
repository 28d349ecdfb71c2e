"""The object data path's wire format and how a transfer is cut into ranges (pure).

A puller opens plain TCP connections to the holder's data port
(:mod:`.object_data`) and asks for byte ranges of one object, one request at a
time per connection:

* request: ``!HQQ`` (object id length, offset, length), then the object id;
* reply: ``!BQ`` (status, the object's total size), then either ``length`` raw
  bytes (status OK) or ``!H`` and that many bytes of UTF-8 error text.

No protobuf and no framing per chunk: the holder ``sendfile``\\ s straight from
the object's file and the puller writes what it receives straight into the
destination file, so the bytes are never a Python object on either side.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

REQUEST = struct.Struct("!HQQ")
REPLY = struct.Struct("!BQ")
ERROR_LENGTH = struct.Struct("!H")
STATUS_OK = 0
STATUS_ERROR = 1
MAX_ID_BYTES = 1024  # object ids are 28 bytes; anything past this is not a puller


@dataclass(frozen=True)
class ByteRange:
    offset: int
    length: int


@dataclass(frozen=True)
class Request:
    object_id: bytes
    offset: int
    length: int


def encode_request(object_id: bytes, offset: int, length: int) -> bytes:
    return REQUEST.pack(len(object_id), offset, length) + object_id


def encode_reply(total_size: int) -> bytes:
    return REPLY.pack(STATUS_OK, total_size)


def encode_error(message: str) -> bytes:
    text = message.encode("utf-8", "replace")[:0xFFFF]
    return REPLY.pack(STATUS_ERROR, 0) + ERROR_LENGTH.pack(len(text)) + text


def check_range(offset: int, length: int, total_size: int) -> str | None:
    """Why ``[offset, offset + length)`` cannot be served from an object of ``total_size``
    bytes; None when it can."""
    if length <= 0 or offset < 0 or offset + length > total_size:
        return f"range {offset}+{length} is outside the object's {total_size} bytes"
    return None


def plan_ranges(size: int, chunk_bytes: int) -> list[ByteRange]:
    """``[0, size)`` cut into consecutive ranges of at most ``chunk_bytes``."""
    if chunk_bytes <= 0:
        raise ValueError(f"chunk_bytes must be positive, got {chunk_bytes}")
    return [ByteRange(offset, min(chunk_bytes, size - offset))
            for offset in range(0, size, chunk_bytes)]


def stream_count(size: int, chunk_bytes: int, max_streams: int) -> int:
    """How many connections a transfer of ``size`` bytes opens: one per range in flight,
    never more ranges than there are, at least one."""
    ranges = -(-size // chunk_bytes) if size > 0 else 0
    return max(1, min(max_streams, ranges))
