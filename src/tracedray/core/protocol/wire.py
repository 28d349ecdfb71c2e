"""Protobuf's wire format where bytes are written by hand: the varint that prefixes a
length-delimited field (a task-stream frame's item, a task event and its fields, a
Perfetto trace packet)."""

from __future__ import annotations

_SMALL = [bytes((n,)) for n in range(0x80)]


def varint(n: int) -> bytes:
    """``n`` as a protobuf varint (a negative int32 as its 64-bit two's complement)."""
    if 0 <= n < 0x80:
        return _SMALL[n]
    if n < 0:
        n += 1 << 64
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)
