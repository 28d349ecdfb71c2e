"""Writer and reader file operations of a core worker."""

from __future__ import annotations

import os
import pickle
from pathlib import Path

import numpy as np
import pytest

from tracedray.core.object_store.client import map_object, read_spilled, write_object
from tracedray.core.object_store.layout import packed_size, unpack
from tracedray.exceptions import ObjectLostError, RaySystemError


def _serialize(value: object) -> tuple[bytes, list[pickle.PickleBuffer]]:
    buffers: list[pickle.PickleBuffer] = []
    return pickle.dumps(value, protocol=5, buffer_callback=buffers.append), buffers


def test_write_then_map_returns_zero_copy_read_only_arrays(tmp_path: Path) -> None:
    array = np.random.default_rng(0).random((256, 256))
    path = tmp_path / "obj-ab"
    inband, buffers = _serialize(array)
    size = write_object(path, inband, buffers)
    assert size == path.stat().st_size == packed_size(inband, buffers)
    assert oct(path.stat().st_mode & 0o777) == "0o600"

    view = map_object(path)
    assert view.readonly
    inband_view, buffer_views = unpack(view)
    restored = pickle.loads(inband_view, buffers=buffer_views)
    np.testing.assert_array_equal(restored, array)
    assert not restored.flags.writeable
    mapped = np.frombuffer(view, dtype=np.uint8)
    assert mapped.ctypes.data <= restored.ctypes.data < mapped.ctypes.data + view.nbytes


def test_mapping_survives_unlink_and_dropping_the_view(tmp_path: Path) -> None:
    path = tmp_path / "obj-cd"
    write_object(path, *_serialize(np.arange(10_000)))
    inband, buffers = unpack(map_object(path))
    restored = pickle.loads(inband, buffers=buffers)
    del inband, buffers  # only the array still references the mapping
    os.unlink(path)  # what free() does while a reader still holds the array
    np.testing.assert_array_equal(restored, np.arange(10_000))


def test_write_is_exclusive(tmp_path: Path) -> None:
    path = tmp_path / "obj-ef"
    write_object(path, b"first", [])
    with pytest.raises(RaySystemError, match="already exists"):
        write_object(path, b"second", [])
    inband, _ = unpack(map_object(path))
    assert bytes(inband) == b"first"


def test_failed_write_leaves_no_file(tmp_path: Path) -> None:
    path = tmp_path / "obj-01"
    strided = np.arange(10).data[::2]
    with pytest.raises(ValueError):
        write_object(path, b"x", [strided])
    assert not path.exists()


def test_missing_files_raise_object_lost(tmp_path: Path) -> None:
    with pytest.raises(ObjectLostError, match="does not exist") as info:
        map_object(tmp_path / "node-abc123")
    assert info.value.object_ref_hex == "abc123"
    with pytest.raises(ObjectLostError, match="does not exist"):
        read_spilled(tmp_path / "abc123")


def test_read_spilled_returns_the_same_bytes(tmp_path: Path) -> None:
    path = tmp_path / "feed"
    value = {"k": np.arange(300, dtype=np.int16)}
    write_object(path, *_serialize(value))
    view = read_spilled(path)
    assert view.readonly
    assert bytes(view) == path.read_bytes()
    inband, buffers = unpack(view)
    np.testing.assert_array_equal(pickle.loads(inband, buffers=buffers)["k"], value["k"])
