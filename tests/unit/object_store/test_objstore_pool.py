"""Freed object files reused for new puts (pool.py): reuse, bound, accounting, and that a
reused file never shows a reader another object's bytes. Real files and real flocks."""

from __future__ import annotations

import fcntl
import os
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from objstore_values import KB, array, load

from tracedray.core.object_store.client import hold_for_reading, map_object, write_object
from tracedray.core.object_store.deleter import (
    DEFERRED_BYTES,
    Deleter,
    DeleterStatistics,
    WhenToDelete,
    when_to_delete,
)
from tracedray.core.object_store.layout import pack_into, packed_size, unpack
from tracedray.core.object_store.pool import (
    FILES_PER_CLASS,
    MIN_POOLED_BYTES,
    PoolDecision,
    decide,
    idle_files,
    size_class,
)
from tracedray.core.object_store.store import ObjectStore
from tracedray.exceptions import ObjectLostError


def pooled_files(store: ObjectStore) -> list[str]:
    """The files in the store's pool folders, as ``<folder>/<file>``."""
    shm = store.object_path("00").parent
    return sorted(f"{d.name}/{p.name}" for d in shm.iterdir() if "-pool-" in d.name
                  for p in d.iterdir())


def test_decisions() -> None:
    big = MIN_POOLED_BYTES
    assert decide(big, 0, 10 * big, 0) is PoolDecision.KEEP
    assert decide(big - 1, 0, 10 * big, 0) is PoolDecision.TOO_SMALL
    assert decide(big, 9 * big + 1, 10 * big, 0) is PoolDecision.POOL_FULL
    assert decide(big, 0, 10 * big, FILES_PER_CLASS) is PoolDecision.CLASS_FULL
    assert [size_class(n) for n in (1, 2, 3, 4, 5, 1 << 20, (1 << 20) + 1)] == \
        [0, 1, 2, 2, 3, 20, 21]


def test_a_freed_file_is_reused_by_the_next_put_of_its_size(make_store, put) -> None:
    store: ObjectStore = make_store(4 << 20)
    size = put(store, "a1", array(1))
    inode = os.stat(store.object_path("a1")).st_ino
    store.free(["a1"])
    stats = store.statistics()
    assert (stats.used, stats.pool.files, stats.pool.bytes, stats.pool.kept_total) == \
        (0, 1, size, 1)
    assert len(pooled_files(store)) == 1
    assert put(store, "b2", array(2)) == size
    assert os.stat(store.object_path("b2")).st_ino == inode  # the same pages, reused
    np.testing.assert_array_equal(load(map_object(store.object_path("b2"))), array(2))
    stats = store.statistics()
    assert (stats.used, stats.pool.files, stats.pool.bytes, stats.pool.reused_total) == \
        (size, 0, 0, 1)
    assert pooled_files(store) == []


def test_the_pool_holds_at_most_what_the_objects_leave_free(make_store, put) -> None:
    store = make_store(2 << 20)  # 300 KB objects: six fit
    for oid in ("a1", "a2", "a3", "a4", "a5"):
        put(store, oid, array(1))
    store.free(["a1", "a2", "a3"])  # 1.2 MB of objects left free once they go: all kept
    stats = store.statistics()
    assert (stats.pool.files, stats.pool.full_total) == (3, 0)
    assert stats.used + stats.pool.bytes <= stats.capacity
    put(store, "b1", array(2, 600 * KB))  # another class: the pool gives up the room
    stats = store.statistics()
    assert stats.used + stats.pool.bytes <= stats.capacity
    assert stats.pool.trimmed_total >= 1 and stats.spilled_count == 0
    assert len(pooled_files(store)) == stats.pool.files


def test_a_freed_file_is_kept_when_its_object_leaves_no_room(make_store, put) -> None:
    """The pool only ever holds what the capacity leaves free: a file freed while the
    objects that stay fill the store is deleted, not kept."""
    store = make_store(1 << 20)
    put(store, "a1", array(1, 600 * KB))
    store.free(["a1"])
    assert store.statistics().pool.files == 1
    put(store, "a2", array(2, 200 * KB))  # trims nothing: 600 + 200 KB fit
    put(store, "a3", array(3, 300 * KB))  # another class; the pool file must go for it
    stats = store.statistics()
    assert (stats.pool.files, stats.pool.trimmed_total, stats.spilled_count) == (0, 1, 0)
    store.free(["a2"])  # 200 KB room left once it goes: kept
    assert store.statistics().pool.files == 1


def test_a_big_file_within_the_capacity_is_kept_and_reused(make_store, put) -> None:
    """A file of most of the store (a GB object on a 2.5 GB store) is kept like a small
    one, and the next put of its size class and a received copy take it."""
    store = make_store(8 << 20)
    size = put(store, "a1", array(1, 6 << 20))
    inode = os.stat(store.object_path("a1")).st_ino
    store.free(["a1"])
    stats = store.statistics()
    assert (stats.used, stats.pool.files, stats.pool.bytes) == (0, 1, size)
    assert put(store, "b1", array(2, 6 << 20)) == size
    assert os.stat(store.object_path("b1")).st_ino == inode
    np.testing.assert_array_equal(load(map_object(store.object_path("b1"))), array(2, 6 << 20))
    store.free(["b1"])
    data = store.object_path("b1").parent / "source"
    data.write_bytes(bytes(size))
    store.receive_into("c1", size, lambda fd: os.sendfile(fd, os.open(data, os.O_RDONLY), 0,
                                                          size), owner="d")
    assert os.stat(store.object_path("c1")).st_ino == inode  # a pulled copy took it
    assert store.statistics().pool.reused_total == 2


def test_an_idle_pool_gives_its_files_back(make_store, put) -> None:
    store = make_store(8 << 20, pool_idle_s=30.0)
    put(store, "a1", array(1, 300 * KB))
    put(store, "a2", array(2, 3 << 20))
    store.free(["a1", "a2"])
    assert store.release_idle_pool(now=time.monotonic()) == 0  # just freed: kept
    assert store.statistics().pool.files == 2
    assert store.release_idle_pool(now=time.monotonic() + 31.0) == 2  # small: deleted now
    stats = store.statistics()
    assert (stats.pool.files, stats.pool.bytes, stats.pool.released_idle_total) == (0, 0, 2)
    assert pooled_files(store) == []
    assert [p.name for p in store.object_path("00").parent.iterdir()
            if not p.name.endswith(tuple(f"-pool-{c}" for c in range(64)))] == []


def test_files_idle_long_enough_are_the_ones_released() -> None:
    kept_at = {11: 100.0, 12: 140.0, 13: 159.0}
    assert idle_files(kept_at, now=160.0, idle_s=20.0) == [11, 12]
    assert idle_files(kept_at, now=160.0, idle_s=float("inf")) == []


def test_a_malformed_idle_time_is_a_clear_error(make_store, monkeypatch) -> None:
    from tracedray.exceptions import ConfigError

    monkeypatch.setenv("TRACEDRAY_OBJECT_POOL_IDLE_S", "soon")
    with pytest.raises(ConfigError, match="TRACEDRAY_OBJECT_POOL_IDLE_S"):
        make_store(1 << 20)
    for bad in ("0", "-5", "nan"):
        monkeypatch.setenv("TRACEDRAY_OBJECT_POOL_IDLE_S", bad)
        with pytest.raises(ConfigError, match="positive"):
            make_store(1 << 20)
    with pytest.raises(ConfigError, match="positive"):
        make_store(1 << 20, pool_idle_s=0.0)


def test_big_files_are_deleted_off_the_lock_and_none_is_left(make_store, put) -> None:
    """A big file that is not kept (a reader maps it) is renamed out of the object's name
    at once and deleted by the deleter; after shutdown nothing is left."""
    store = make_store(64 << 20)
    put(store, "a1", array(1, DEFERRED_BYTES + 1))
    view = map_object(store.object_path("a1"))
    store.free(["a1"])
    assert not store.object_path("a1").exists()  # the name is free at once
    assert store.statistics().pool.in_use_total == 1
    put(store, "a2", array(2, DEFERRED_BYTES + 1))
    store.free(["a2"])  # into the pool
    store.shutdown()  # waits for the deleter
    assert list(store.object_path("00").parent.iterdir()) == []
    stats = store.statistics().deleter
    assert (stats.deleted_total, stats.pending, stats.pending_bytes) == (1, 0, 0)
    np.testing.assert_array_equal(load(view), array(1, DEFERRED_BYTES + 1))  # pages kept


def test_small_objects_are_deleted_not_pooled(make_store, put) -> None:
    store = make_store(4 << 20)
    put(store, "a1", array(1, MIN_POOLED_BYTES // 2))
    store.free(["a1"])
    assert store.statistics().pool.files == 0 and pooled_files(store) == []


def test_the_pool_goes_before_any_object_is_spilled(make_store, put) -> None:
    store = make_store(2 << 20)  # the pool may hold 512 KiB
    put(store, "a1", array(1, 400 * KB))
    put(store, "a2", array(2, 400 * KB))
    store.free(["a2"])  # into the pool: 400 KB of the capacity
    put(store, "a3", array(3, 600 * KB))  # another size class: the pool file stays
    assert store.statistics().pool.files == 1
    put(store, "a4", array(4, 700 * KB))  # fits only once the pool file is gone
    stats = store.statistics()
    assert (stats.pool.files, stats.pool.trimmed_total, stats.spilled_count) == (0, 1, 0)
    assert stats.used + stats.pool.bytes <= stats.capacity
    assert pooled_files(store) == []
    # Now full of objects: the next one spills, as it did before the pool existed.
    put(store, "a5", array(5, 500 * KB))
    assert store.statistics().spilled_count == 1


def test_a_file_someone_maps_is_not_pooled_and_keeps_its_bytes(make_store, put) -> None:
    store = make_store(4 << 20)
    put(store, "a1", array(1))
    view = map_object(store.object_path("a1"))
    store.free(["a1"])
    assert store.statistics().pool.in_use_total == 1 and pooled_files(store) == []
    for i, oid in enumerate(("b1", "b2", "b3")):
        put(store, oid, array(10 + i))
        store.free([oid])
    np.testing.assert_array_equal(load(view), array(1))


def test_a_transfer_descriptor_keeps_the_file_from_reuse(make_store, put) -> None:
    store = make_store(4 << 20)
    put(store, "a1", array(1))
    fd, size = store.open_for_transfer("a1")
    try:
        store.free(["a1"])
        put(store, "b1", array(2))
        assert store.statistics().pool.reused_total == 0
        np.testing.assert_array_equal(load(memoryview(os.pread(fd, size, 0))), array(1))
    finally:
        os.close(fd)


def _open_then_free(store: ObjectStore, put: Any) -> tuple[Path, int]:
    """Put "a1", open its file by name as a reader would, then free it (into the pool)."""
    put(store, "a1", array(1))
    path = store.object_path("a1")
    late = os.open(path, os.O_RDONLY)
    store.free(["a1"])
    return path, late


def test_a_late_reader_never_sees_the_next_objects_bytes(make_store, put) -> None:
    """A reader opened the file by name before the free, and locks it only after a writer
    reused it: it must find the object freed, not map the new object's bytes."""
    store = make_store(4 << 20)
    path, late = _open_then_free(store, put)
    try:
        put(store, "b2", array(2))
        assert store.statistics().pool.reused_total == 1  # the reader's inode, rewritten
        with pytest.raises(ObjectLostError, match="was freed"):
            hold_for_reading(late, path)
    finally:
        os.close(late)
    with pytest.raises(ObjectLostError):
        map_object(path)


def test_a_writer_skips_a_pool_file_a_late_reader_locked(make_store, put) -> None:
    store = make_store(4 << 20)
    _, late = _open_then_free(store, put)
    try:
        [slot] = pooled_files(store)
        fcntl.flock(late, fcntl.LOCK_SH)  # got its lock after the free, before any writer
        put(store, "b2", array(2))
        assert store.statistics().pool.reused_total == 0
        assert os.fstat(late).st_nlink == 0  # the writer gave the file up, fresh file made
        np.testing.assert_array_equal(load(memoryview(os.pread(late, 400 * KB, 0))), array(1))
        np.testing.assert_array_equal(load(map_object(store.object_path("b2"))), array(2))
        assert slot not in pooled_files(store)
    finally:
        os.close(late)


def test_a_reused_file_holds_exactly_the_new_objects_bytes(make_store, tmp_path: Path) -> None:
    """Padding between buffers and after them is written as zeros, and a larger old file is
    cut: the file equals the packed object byte for byte, whatever the file held before."""
    store = make_store(8 << 20)
    path = store.object_path("a1")
    old = [np.full(500 * KB, 0xAB, np.uint8)]  # the same size class, larger
    size = write_object(path, b"x" * 1000, old)
    store.seal("a1", size, owner="d")
    store.free(["a1"])
    parts = [np.full(300 * KB + 3, 1, np.uint8), np.full(17, 2, np.uint8), b""]
    inband = b"y" * 77
    size = write_object(store.object_path("b1"), inband, parts)
    assert store.seal("b1", size, owner="d") is None
    expected = bytearray(packed_size(inband, parts))
    pack_into(memoryview(expected), inband, parts)
    assert store.statistics().pool.reused_total == 1
    assert store.object_path("b1").read_bytes() == bytes(expected)


def test_shutdown_removes_the_pool(make_store, put) -> None:
    store = make_store(4 << 20)
    put(store, "a1", array(1))
    store.free(["a1"])
    assert pooled_files(store)
    store.shutdown()
    assert pooled_files(store) == []
    assert [p.name for p in store.object_path("00").parent.iterdir()] == []  # folders too


def test_remove_orphans_removes_pool_folders(make_store, put) -> None:
    from tracedray.core.object_store.files import remove_orphans

    store = make_store(4 << 20)
    put(store, "a1", array(1))
    put(store, "a2", array(2))
    store.free(["a1"])
    shm = store.object_path("00").parent
    assert remove_orphans(shm, "td-node1") == 2  # after a crash: one object, one pool file
    assert list(shm.iterdir()) == []


def test_a_free_before_its_seal_frees_the_object_when_the_seal_comes(make_store) -> None:
    store = make_store(4 << 20)
    path = store.object_path("a1")
    size = write_object(path, b"x", [array(1)])
    store.free(["a1"])  # the owner let go before the (unanswered) seal was applied
    store.seal("a1", size, owner="d")
    stats = store.statistics()
    assert (stats.num_objects, stats.used, stats.freed_count) == (0, 0, 1)
    assert not path.exists() and stats.pool.files == 1  # its file went to the pool
    assert store.locate("a1") is None


def test_a_lookup_waits_for_a_seal_sent_without_waiting(tmp_path: Path) -> None:
    """A real seal channel into a real store: the writer sends and goes on; the store's
    lookups of the object find it, however late the seal thread is."""
    import threading
    import uuid

    from tracedray._proto.v1 import raylet_pb2
    from tracedray.core.raylet import seal_channel as sc

    release = threading.Event()
    shm = tmp_path / "shm"
    shm.mkdir()
    server: list[sc.SealChannelServer] = []
    store = ObjectStore(node_id="n", capacity_bytes=4 << 20, name_prefix="td-n", shm_dir=shm,
                        spill_dir=tmp_path / "spill", settle=lambda: server[0].settle())

    def seal(request: raylet_pb2.SealObjectRequest) -> raylet_pb2.SealObjectReply:
        release.wait(10)
        store.seal(request.object_id.hex(), request.size, owner=request.owner)
        return raylet_pb2.SealObjectReply(ok=True)

    name = sc.socket_name(f"/dev/shm/test-{uuid.uuid4().hex}-")
    server.append(sc.SealChannelServer(name, seal))
    channel = sc.SealChannel(name)
    try:
        release.set()
        size = write_object(store.object_path("a0"), b"x", [array(6)])
        request = raylet_pb2.SealObjectRequest(object_id=bytes.fromhex("a0"), size=size, owner="d")
        assert channel.send(request) is not None  # the connection's first seal waits
        release.clear()
        size = write_object(store.object_path("a1"), b"x", [array(7)])
        assert channel.send(raylet_pb2.SealObjectRequest(
            object_id=bytes.fromhex("a1"), size=size, owner="d")) is None
        threading.Timer(0.3, release.set).start()
        location = store.locate("a1")
        assert location is not None and location.size == size
        _, [buffer] = unpack(map_object(location.path))
        assert bytes(buffer) == array(7).tobytes()
        assert server[0].statistics().settles_total == 1
    finally:
        release.set()
        channel.close()
        server[0].close()
        store.shutdown()


def test_the_deleter_unlinks_big_files_on_its_thread_and_small_ones_at_once(
        tmp_path: Path) -> None:
    deleter = Deleter(tmp_path, "td-x")
    small, big = tmp_path / "small", tmp_path / "big"
    small.write_bytes(b"s")
    big.write_bytes(b"b")
    assert when_to_delete(DEFERRED_BYTES - 1) is WhenToDelete.NOW
    deleter.delete([(small, 1), (big, DEFERRED_BYTES)])
    assert not small.exists()
    deleter.drain()
    assert not big.exists()
    assert deleter.statistics() == DeleterStatistics(0, 0, 1, DEFERRED_BYTES)
    deleter.close()
    late = tmp_path / "late"
    late.write_bytes(b"l")
    deleter.delete([(late, DEFERRED_BYTES)])  # after close: deleted on the caller's thread
    assert not late.exists()


def test_an_idle_pool_file_gives_its_pages_back_while_a_writer_maps_it(make_store) -> None:
    """A writer keeps a mapping of each file it wrote (writer.py), which would keep a
    deleted file's pages until its next put: a released pool file is emptied first."""
    from tracedray.core.object_store.writer import MappedFiles

    store = make_store(64 << 20)
    mappings = MappedFiles(budget_bytes=32 << 20)
    try:
        for object_id, size in (("a1", 3 << 20), ("a2", DEFERRED_BYTES)):
            path = store.object_path(object_id)
            store.seal(object_id, write_object(path, b"x", [array(1, size)], mappings), owner="d")
        opened = [os.open(store.object_path(o), os.O_RDONLY) for o in ("a1", "a2")]
        store.free(["a1", "a2"])
        assert store.statistics().pool.files == 2 and mappings.statistics().files == 2
        assert store.release_idle_pool(now=time.monotonic() + 3600) == 2
        store.shutdown()  # waits for the deleter
        assert [os.fstat(fd).st_blocks for fd in opened] == [0, 0]  # pages gone
        for fd in opened:
            os.close(fd)
    finally:
        mappings.close()
