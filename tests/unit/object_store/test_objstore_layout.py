"""The packed-object byte layout: round trips, zero-copy, alignment, corruption."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from tracedray.core.object_store.layout import (
    ALIGNMENT,
    pack_into,
    packed_size,
    segments,
    unpack,
)
from tracedray.exceptions import ObjectLostError


def _serialize(value: object) -> tuple[bytes, list[pickle.PickleBuffer]]:
    buffers: list[pickle.PickleBuffer] = []
    inband = pickle.dumps(value, protocol=5, buffer_callback=buffers.append)
    return inband, buffers


def _pack(value: object) -> bytearray:
    inband, buffers = _serialize(value)
    target = bytearray(packed_size(inband, buffers))
    pack_into(memoryview(target), inband, buffers)
    return target


def test_round_trip_of_plain_values_without_buffers() -> None:
    value = {"a": [1, 2.5, "x"], "b": (None, b"bytes")}
    inband, buffers = unpack(memoryview(bytes(_pack(value))))
    assert buffers == []
    assert pickle.loads(inband) == value


def test_numpy_arrays_come_back_zero_copy_read_only_and_aligned() -> None:
    arrays = [np.arange(1000, dtype=np.float64), np.ones((3, 5), dtype=np.int8),
              np.asfortranarray(np.arange(12, dtype=np.int32).reshape(3, 4))]
    packed = bytes(_pack(arrays))  # immutable, like a read-only mmap
    view = memoryview(packed)
    inband, buffers = unpack(view)
    assert len(buffers) == 3
    restored = pickle.loads(inband, buffers=buffers)
    base = np.frombuffer(packed, dtype=np.uint8).ctypes.data
    for original, copy in zip(arrays, restored, strict=True):
        np.testing.assert_array_equal(copy, original)
        assert not copy.flags.writeable
        address = copy.ctypes.data
        # the array's data lies inside the packed bytes: no copy was made
        assert base <= address < base + len(packed)
        assert (address - base) % ALIGNMENT == 0
    with pytest.raises(ValueError):
        restored[0][0] = 1.0


def test_empty_buffers_and_empty_arrays_round_trip() -> None:
    value = [np.array([], dtype=np.float32), np.zeros(7, dtype=np.uint8)]
    inband, buffers = unpack(memoryview(bytes(_pack(value))))
    restored = pickle.loads(inband, buffers=buffers)
    assert restored[0].shape == (0,)
    np.testing.assert_array_equal(restored[1], value[1])


def test_segments_cover_exactly_what_pack_into_writes() -> None:
    inband, buffers = _serialize([np.arange(100), np.arange(33, dtype=np.int8)])
    total, parts = segments(inband, buffers)
    rebuilt = bytearray(total)
    for offset, view in parts:
        rebuilt[offset:offset + view.nbytes] = view
    assert total == packed_size(inband, buffers)
    assert rebuilt == _pack([np.arange(100), np.arange(33, dtype=np.int8)])


def test_pack_into_a_dirty_target_zeroes_the_padding() -> None:
    inband, buffers = _serialize(np.arange(5))
    size = packed_size(inband, buffers)
    dirty = bytearray(b"\xff" * size)
    pack_into(memoryview(dirty), inband, buffers)
    clean = bytearray(size)
    pack_into(memoryview(clean), inband, buffers)
    assert dirty == clean


def test_pack_into_a_too_small_target_fails() -> None:
    inband, buffers = _serialize(np.arange(100))
    with pytest.raises(ValueError, match="needs"):
        pack_into(memoryview(bytearray(10)), inband, buffers)


def test_non_contiguous_buffer_is_rejected_with_a_clear_error() -> None:
    strided = np.arange(20).data[::2]
    with pytest.raises(ValueError, match="contiguous"):
        packed_size(b"x", [strided])


@pytest.mark.parametrize(("mutate", "message"), [
    (lambda b: b[:10], "shorter than"),
    (lambda b: b"NOTMAGIC" + b[8:], "bad magic"),
    (lambda b: b[:8] + (99).to_bytes(4, "little") + b[12:], "version 99"),
    (lambda b: b[:-1], "truncated"),
    # buffer count far beyond what the object holds
    (lambda b: b[:12] + (10**6).to_bytes(4, "little") + b[16:], "buffer table"),
])
def test_corrupt_data_raises_object_lost(mutate, message) -> None:
    packed = bytes(_pack(np.arange(50)))
    with pytest.raises(ObjectLostError, match=message) as info:
        unpack(memoryview(mutate(packed)))
    assert "corrupt" in info.value.reason


def test_buffer_offset_out_of_bounds_is_detected() -> None:
    packed = bytearray(_pack(np.arange(50)))
    # first table entry: offset at byte 32, point it past the end
    packed[32:40] = (len(packed) + 64).to_bytes(8, "little")
    with pytest.raises(ObjectLostError, match="out of bounds"):
        unpack(memoryview(bytes(packed)))
