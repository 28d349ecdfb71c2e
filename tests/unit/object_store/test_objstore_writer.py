"""A writer's kept mappings (writer.py): a pool file it wrote before is rewritten through
its mapping, byte for byte what pwrite would have written; mappings stay bounded and
never outlive their file for long. Real files in a temporary folder, a real store."""

from __future__ import annotations

import os

import numpy as np
import pytest
from objstore_values import KB, array

from tracedray.core.object_store import client as client_module
from tracedray.core.object_store.client import map_object, write_object
from tracedray.core.object_store.layout import pack_into, packed_size
from tracedray.core.object_store.store import ObjectStore
from tracedray.core.object_store.writer import (
    AWAIT_BYTES,
    AWAIT_S,
    MIN_MAPPED_BYTES,
    MappedFiles,
    should_wait,
)


def _write(store: ObjectStore, mappings: MappedFiles | None, object_id: str, inband: bytes,
           buffers: list[np.ndarray]) -> int:
    size = write_object(store.object_path(object_id), inband, buffers, mappings)
    store.seal(object_id, size, owner="d")
    return size


def _packed(inband: bytes, buffers: list[np.ndarray]) -> bytes:
    expected = bytearray(packed_size(inband, buffers))
    pack_into(memoryview(expected), inband, buffers)
    return bytes(expected)


def test_a_reused_file_is_written_through_the_kept_mapping(make_store) -> None:
    store = make_store(8 << 20)
    mappings = MappedFiles(budget_bytes=4 << 20)
    try:
        _write(store, mappings, "a1", b"x" * 100, [array(1, 700 * KB)])
        inode = os.stat(store.object_path("a1")).st_ino
        assert mappings.statistics().files == 1
        store.free(["a1"])
        # Smaller, same class: written through the mapping, the old tail cut off.
        parts = [array(2, 600 * KB + 5), array(3, 7)]
        _write(store, mappings, "b2", b"y" * 33, parts)
        assert os.stat(store.object_path("b2")).st_ino == inode
        assert mappings.statistics().hits_total == 1
        assert store.object_path("b2").read_bytes() == _packed(b"y" * 33, parts)
        store.free(["b2"])
        # Larger than the file now is: pwrite (pages beyond it are not there yet).
        parts = [array(4, 1000 * KB)]
        _write(store, mappings, "c3", b"z", parts)
        stats = mappings.statistics()
        assert (stats.hits_total, stats.misses_total) == (1, 1)
        assert store.object_path("c3").read_bytes() == _packed(b"z", parts)
    finally:
        mappings.close()


def test_mappings_stay_within_their_budget_and_drop_deleted_files(make_store) -> None:
    store = make_store(16 << 20)
    mappings = MappedFiles(budget_bytes=1 << 20)  # room for one 600 KB file, not two
    try:
        for object_id in ("a1", "a2"):
            _write(store, mappings, object_id, b"x", [array(1, 600 * KB)])
        stats = mappings.statistics()
        assert stats.files == 1 and stats.bytes <= stats.budget_bytes
        store.free(["a2"])  # into the pool
        store.shutdown()  # deletes every file, the pool's too
        _write(make_store(16 << 20, name="other"), mappings, "b1", b"x",
               [array(2, 600 * KB)])
        assert mappings.statistics().files == 1  # the deleted file's mapping went
        mappings.set_budget(0)
        assert mappings.statistics().files == 0
    finally:
        mappings.close()


def test_small_objects_are_not_mapped(make_store) -> None:
    store = make_store(4 << 20)
    mappings = MappedFiles(budget_bytes=4 << 20)
    try:
        _write(store, mappings, "a1", b"x", [array(1, MIN_MAPPED_BYTES // 2)])
        assert mappings.statistics().files == 0
    finally:
        mappings.close()


def test_a_pool_file_with_a_kept_mapping_is_claimed_before_others(make_store) -> None:
    store = make_store(64 << 20)
    mappings = MappedFiles(budget_bytes=32 << 20)
    try:
        _write(store, mappings, "a1", b"x", [array(1, AWAIT_BYTES)])
        mine = os.stat(store.object_path("a1")).st_ino
        _write(store, None, "b1", b"x", [array(2, AWAIT_BYTES)])  # no mapping kept of it
        store.free(["b1"])
        store.free(["a1"])  # listed after b1's file
        _write(store, mappings, "c1", b"x", [array(3, AWAIT_BYTES)])
        assert os.stat(store.object_path("c1")).st_ino == mine
        assert mappings.statistics().hits_total == 1
    finally:
        mappings.close()


def test_when_a_big_writer_waits_for_its_own_freed_file() -> None:
    big = AWAIT_BYTES
    assert should_wait(big, mapped_in_pool=0, awaited=True, waited_s=0.0)
    assert not should_wait(big - 1, mapped_in_pool=0, awaited=True, waited_s=0.0)  # small
    assert not should_wait(big, mapped_in_pool=1, awaited=True, waited_s=0.0)  # it is there
    assert not should_wait(big, mapped_in_pool=0, awaited=False, waited_s=0.0)
    assert not should_wait(big, mapped_in_pool=0, awaited=True, waited_s=AWAIT_S)  # enough
    # The bound grows with what a pwrite would cost more than a memcpy, up to AWAIT_S.
    assert should_wait(100 << 20, mapped_in_pool=0, awaited=True, waited_s=0.005)
    assert not should_wait(big, mapped_in_pool=0, awaited=True, waited_s=0.005)
    assert not should_wait(10 << 30, mapped_in_pool=0, awaited=True, waited_s=AWAIT_S)


def test_a_big_put_waits_for_the_file_it_freed_to_reach_the_pool(
        make_store, monkeypatch: pytest.MonkeyPatch) -> None:
    """The raylet pools a freed file a moment after the writer's free: the writer's next
    put lists the pool again (here: the free is applied at its first wait) and writes
    through its mapping instead of pwriting into another pool file."""
    store = make_store(64 << 20)
    mappings = MappedFiles(budget_bytes=32 << 20)
    try:
        size = _write(store, mappings, "a1", b"x", [array(1, AWAIT_BYTES)])
        mine = os.stat(store.object_path("a1")).st_ino
        _write(store, None, "b1", b"x", [array(2, AWAIT_BYTES)])  # unmapped
        store.free(["b1"])  # in the pool
        mappings.freed([str(store.object_path("a1"))])  # the free is on its way
        assert mappings.awaited(size)
        waits: list[float] = []

        def raylet_catches_up(seconds: float) -> None:
            waits.append(seconds)
            store.free(["a1"])

        monkeypatch.setattr(client_module.time, "sleep", raylet_catches_up)
        _write(store, mappings, "c1", b"x", [array(3, AWAIT_BYTES)])
        assert len(waits) == 1
        assert os.stat(store.object_path("c1")).st_ino == mine
        stats = mappings.statistics()
        assert (stats.hits_total, stats.awaited_total) == (1, 1)
        assert not mappings.awaited(size)  # written again: nothing on its way
    finally:
        mappings.close()


def test_a_freed_file_that_was_deleted_is_not_waited_for(make_store) -> None:
    store = make_store(64 << 20)
    mappings = MappedFiles(budget_bytes=32 << 20)
    try:
        size = _write(store, mappings, "a1", b"x", [array(1, AWAIT_BYTES)])
        reader = map_object(store.object_path("a1"))  # so the raylet deletes it, not pools
        mappings.freed([str(store.object_path("a1"))])
        assert mappings.awaited(size)
        store.free(["a1"])
        store.shutdown()  # waits for the deleter
        assert not mappings.awaited(size)
        del reader
    finally:
        mappings.close()
