"""The raylet-side ObjectStore against real files (temporary folders, one test on /dev/shm)."""

from __future__ import annotations

import os
import pickle
import threading
import uuid
from pathlib import Path

import numpy as np
import pytest
from objstore_values import KB, array, load

from tracedray.core.object_store.client import map_object, read_spilled, write_object
from tracedray.core.object_store.pool import size_class
from tracedray.core.object_store.store import ObjectStore, remove_orphans
from tracedray.exceptions import ObjectLostError, ObjectStoreFullError, RaySystemError


def files_in(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


def test_seal_accounts_the_object_and_locate_finds_it(make_store, put) -> None:
    store: ObjectStore = make_store(1 << 20)
    size = put(store, "aa01", array(1), owner="driver:123", call_site="app.py:7 in main")
    location = store.locate("aa01")
    assert location is not None
    assert (location.kind, location.path, location.size) == ("shm", store.object_path("aa01"), size)
    np.testing.assert_array_equal(load(map_object(location.path)), array(1))
    assert store.contains("aa01") and not store.contains("bb02")
    assert store.locate("bb02") is None
    [info] = store.objects()
    assert (info.object_id, info.size, info.owner, info.call_site) == \
        ("aa01", size, "driver:123", "app.py:7 in main")
    assert (info.spilled, info.pinned, info.primary) == (False, False, True)
    stats = store.statistics()
    assert (stats.used, stats.num_objects, stats.num_in_memory, stats.capacity) == \
        (size, 1, 1, 1 << 20)
    assert "objects=1" in repr(store) and f"used={size}/" in repr(store)


def test_full_store_without_spilling_raises_a_useful_error(make_store, put) -> None:
    store = make_store(1 << 20, spilling_enabled=False)
    for i in range(3):
        put(store, f"0{i}", array(i), call_site="train.py:12 in load_shards")
    before = store.statistics()
    with pytest.raises(ObjectStoreFullError) as info:
        put(store, "ff", array(9), call_site="train.py:30 in step")
    message = str(info.value)
    assert "cannot store an object of" in message
    assert "3 objects" in message
    assert "in 3 objects created at train.py:12 in load_shards" in message
    assert "object_spilling=False" in message
    assert "tracedray memory" in message
    # the refused file is gone and nothing else moved
    assert not store.object_path("ff").exists()
    after = store.statistics()
    assert (after.used, after.num_objects, after.spilled_count) == \
        (before.used, before.num_objects, 0)
    assert after.rejected_count == 1


def test_spilling_moves_least_recently_used_unpinned_primaries(make_store, put) -> None:
    store = make_store(1 << 20)
    sizes = {oid: put(store, oid, array(i)) for i, oid in enumerate(["a1", "a2", "a3"])}
    store.locate("a1")  # a read makes a1 recent: a2 is now the least recently used
    sizes["a4"] = put(store, "a4", array(4))
    assert store.locate("a2").kind == "spilled"
    assert [store.locate(o).kind for o in ("a1", "a3", "a4")] == ["shm"] * 3
    spill_dir = store.locate("a2").path.parent
    assert files_in(spill_dir) == ["a2"]
    assert not store.object_path("a2").exists()
    stats = store.statistics()
    assert (stats.spilled_count, stats.spilled_bytes) == (1, sizes["a2"])
    assert (stats.num_spilled, stats.spilled_bytes_now, stats.num_objects) == (1, sizes["a2"], 4)
    assert stats.used == sizes["a1"] + sizes["a3"] + sizes["a4"]
    assert stats.used == sum(o.size for o in store.objects() if not o.spilled)
    # the spilled copy is a complete object
    np.testing.assert_array_equal(load(read_spilled(spill_dir / "a2")), array(1))


def test_ensure_local_restores_identical_bytes_spilling_another(make_store, put) -> None:
    store = make_store(1 << 20)
    for i, oid in enumerate(["b1", "b2", "b3", "b4"]):
        put(store, oid, array(i + 1))
    spilled = store.locate("b1")
    assert spilled is not None and spilled.kind == "spilled"
    spilled_bytes = bytes(read_spilled(spilled.path))

    restored = store.ensure_local("b1")
    assert restored.kind == "shm" and restored.path == store.object_path("b1")
    assert bytes(map_object(restored.path)) == spilled_bytes
    np.testing.assert_array_equal(load(map_object(restored.path)), array(1))
    assert not spilled.path.exists()
    assert store.locate("b2").kind == "spilled"
    stats = store.statistics()
    assert (stats.restored_count, stats.restored_bytes) == (1, restored.size)
    assert (stats.spilled_count, stats.num_spilled) == (2, 1)
    # already local: nothing moves
    assert store.ensure_local("b1") == restored
    assert store.statistics().restored_count == 1


def test_pinned_objects_are_never_spilled(make_store, put) -> None:
    store = make_store(1 << 20)
    for i, oid in enumerate(["c1", "c2", "c3"]):
        put(store, oid, array(i))
    store.pin("c1")  # oldest, but in use by a running task
    put(store, "c4", array(4))
    assert store.locate("c1").kind == "shm"
    assert store.locate("c2").kind == "spilled"
    store.pin("c3")
    store.pin("c4")
    assert store.statistics().num_pinned == 3
    with pytest.raises(ObjectStoreFullError, match="pinned by running tasks"):
        put(store, "c5", array(5))
    # a spilled object that cannot come back stays readable where it is
    location = store.ensure_local("c2")
    assert location.kind == "spilled"
    np.testing.assert_array_equal(load(read_spilled(location.path)), array(1))


def test_pins_nest_and_unpin_releases_them(make_store, put) -> None:
    store = make_store(1 << 20)
    for i, oid in enumerate(["d1", "d2", "d3"]):
        put(store, oid, array(i))
    store.pin("d1")
    store.pin("d1")
    store.unpin("d1")
    assert [o.pinned for o in store.objects() if o.object_id == "d1"] == [True]
    store.unpin("d1")
    store.unpin("d1")  # one too many: ignored with a warning, no error
    assert store.statistics().num_pinned == 0
    put(store, "d4", array(4))
    assert store.locate("d1").kind == "spilled"
    with pytest.raises(ObjectLostError, match="not in the object store"):
        store.pin("zz")
    store.unpin("zz")  # freed meanwhile: nothing to do


def test_free_removes_shared_memory_and_spill_files(make_store, put, tmp_path: Path) -> None:
    store = make_store(1 << 20)
    sizes = [put(store, oid, array(i)) for i, oid in enumerate(["e1", "e2", "e3", "e4"])]
    assert store.statistics().num_spilled == 1
    freed = store.free(["e1", "e2", "unknown"])  # e1 is spilled, e2 in memory
    assert freed == sizes[0] + sizes[1]
    assert files_in(tmp_path / "node1-spill") == []
    # e2's file went into the pool (pool.py), in its class's folder
    assert files_in(tmp_path / "node1-shm") == ["td-node1-e3", "td-node1-e4",
                                                  f"td-node1-pool-{size_class(sizes[1])}"]
    stats = store.statistics()
    assert stats.pool.files == 1
    assert (stats.freed_count, stats.freed_bytes) == (2, sizes[0] + sizes[1])
    assert (stats.used, stats.num_objects, stats.num_spilled) == (sizes[2] + sizes[3], 2, 0)
    assert store.free(["e1"]) == 0  # freeing twice is harmless
    store.free(["e3", "e4"])
    assert [f for f in files_in(tmp_path / "node1-shm") if "-pool-" not in f] == []
    assert store.statistics().used == 0


def test_shutdown_removes_every_file_including_unsealed_ones(make_store, put,
                                                             tmp_path: Path) -> None:
    store = make_store(1 << 20)
    for i, oid in enumerate(["f1", "f2", "f3", "f4"]):
        put(store, oid, array(i))
    write_object(store.object_path("f5"), b"written but never sealed", [])
    assert files_in(tmp_path / "node1-spill") == ["f1"]
    store.shutdown()
    assert files_in(tmp_path / "node1-shm") == []
    assert files_in(tmp_path / "node1-spill") == []
    assert "closed" in repr(store)
    with pytest.raises(RaySystemError, match="shut down"):
        put(store, "f6", array(6))
    store.shutdown()  # idempotent


def test_real_dev_shm_zero_copy_and_no_leaks(tmp_path: Path) -> None:
    shm = Path("/dev/shm")
    if not shm.is_dir():
        pytest.skip("no /dev/shm on this system")
    prefix = f"tdtest-{uuid.uuid4().hex[:8]}"
    store = ObjectStore(node_id="n", capacity_bytes=64 << 20, name_prefix=prefix,
                        spill_dir=tmp_path / "spill")
    try:
        value = np.arange(1 << 20, dtype=np.float64)  # 8 MiB
        buffers: list[pickle.PickleBuffer] = []
        inband = pickle.dumps(value, protocol=5, buffer_callback=buffers.append)
        size = write_object(store.object_path("abcd"), inband, buffers)
        store.seal("abcd", size, owner="driver")
        assert store.object_path("abcd").parent == shm
        view = map_object(store.object_path("abcd"))
        restored = load(view)
        assert isinstance(restored, np.ndarray)
        mapped = np.frombuffer(view, dtype=np.uint8)
        assert mapped.ctypes.data <= restored.ctypes.data < mapped.ctypes.data + size
        assert not restored.flags.writeable
        store.free(["abcd"])
        np.testing.assert_array_equal(restored, value)  # still mapped after the unlink
        write_object(store.object_path("ef01"), b"unsealed", [])
    finally:
        store.shutdown()
    assert [p for p in os.listdir(shm) if p.startswith(prefix)] == []


def test_seal_checks_the_file_and_is_idempotent(make_store, put) -> None:
    store = make_store(1 << 20)
    with pytest.raises(RaySystemError, match="does not exist"):
        store.seal("0a", 100, owner="driver")
    size = write_object(store.object_path("0b"), b"abc", [])
    with pytest.raises(RaySystemError, match="writer reported"):
        store.seal("0b", size + 1, owner="driver")
    assert not store.object_path("0b").exists()
    size = put(store, "0c", array(1))
    store.seal("0c", size, owner="someone else")  # a retried task's result: keep the first
    assert [(o.object_id, o.owner) for o in store.objects()] == [("0c", "driver")]
    assert store.statistics().used == size
    with pytest.raises(RaySystemError, match="invalid object id"):
        store.object_path("../etc/passwd")


def test_transfer_between_nodes_makes_an_evictable_secondary_copy(make_store, put) -> None:
    evictions: list[list[str]] = []
    source = make_store(1 << 20, name="b")
    target = make_store(1 << 20, name="c", on_evict=lambda ids: evictions.append(list(ids)))
    size = put(source, "9a", array(7))
    target.receive("9a", size, (bytes(c) for c in source.read_chunks("9a", chunk_size=4096)),
                   owner="driver")
    assert bytes(map_object(target.object_path("9a"))) == \
        bytes(map_object(source.object_path("9a")))
    [info] = target.objects()
    assert not info.primary
    put(target, "9b", array(1))
    put(target, "9c", array(2))
    put(target, "9d", array(3))  # full: the copy goes first, though primaries are older
    assert not target.contains("9a")
    assert evictions == [["9a"]]
    stats = target.statistics()
    assert (stats.evicted_count, stats.evicted_bytes, stats.spilled_count) == (1, size, 0)
    assert not target.object_path("9a").exists()


def test_read_chunks_of_a_spilled_object_and_receive_is_idempotent(make_store, put) -> None:
    source = make_store(1 << 20, name="b")
    target = make_store(1 << 20, name="c")
    size = put(source, "8a", array(3))
    for i, oid in enumerate(["8b", "8c", "8d"]):
        put(source, oid, array(i))
    assert source.locate("8a").kind == "spilled"
    chunks = list(source.read_chunks("8a", chunk_size=100 * KB))
    assert len(chunks) == -(-size // (100 * KB))
    target.receive("8a", size, (bytes(c) for c in chunks), owner="driver")
    np.testing.assert_array_equal(load(map_object(target.object_path("8a"))), array(3))
    target.receive("8a", size, iter([b"never read"]), owner="driver")
    assert target.statistics().num_objects == 1


def test_truncated_transfer_leaves_no_file(make_store, tmp_path: Path) -> None:
    target = make_store(1 << 20, name="c")
    with pytest.raises(RaySystemError, match="ended after 5 of 100 bytes"):
        target.receive("7a", 100, iter([b"12345"]), owner="driver")
    assert files_in(tmp_path / "c-shm") == []
    assert not target.contains("7a")
    with pytest.raises(ObjectLostError):
        list(target.read_chunks("7a"))


def test_remove_orphans_removes_only_the_prefix(tmp_path: Path) -> None:
    for name in ["tracedray-s1-n1-aa", "tracedray-s2-n1-bb", "other-cc", "tracedrayx-dd"]:
        (tmp_path / name).write_bytes(b"x")
    assert remove_orphans(tmp_path, "tracedray-s1") == 1
    assert remove_orphans(tmp_path, "tracedray") == 1
    assert files_in(tmp_path) == ["other-cc", "tracedrayx-dd"]
    assert remove_orphans(tmp_path / "missing", "tracedray") == 0


def test_concurrent_puts_reads_and_frees_keep_the_books_straight(make_store, put,
                                                                 tmp_path: Path) -> None:
    store = make_store(2 << 20)
    errors: list[BaseException] = []

    def worker(thread: int) -> None:
        try:
            for i in range(20):
                oid = f"{thread:02x}{i:02x}"
                put(store, oid, array(i, 100 * KB))
                location = store.ensure_local(oid) if i % 3 else store.locate(oid)
                assert location is not None
                if i % 2:
                    store.free([oid])
        except BaseException as exc:  # surfaced below; a thread cannot fail the test itself
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    stats = store.statistics()
    objects = store.objects()
    assert stats.num_objects == len(objects) == 8 * 10
    assert stats.used == sum(o.size for o in objects if not o.spilled)
    assert stats.used + stats.pool.bytes <= stats.capacity
    in_shm = {p.name for p in (tmp_path / "node1-shm").iterdir() if p.is_file()}
    pooled = [f for d in (tmp_path / "node1-shm").glob("td-node1-pool-*") for f in d.iterdir()]
    assert len(pooled) == stats.pool.files
    assert in_shm == {f"td-node1-{o.object_id}" for o in objects if not o.spilled}
    spilled = set(files_in(tmp_path / "node1-spill"))
    assert spilled == {o.object_id for o in objects if o.spilled}


def test_spill_restore_evict_and_free_are_spans(make_store, put, tmp_path: Path) -> None:
    from tracedray import telemetry
    from tracedray.telemetry import attributes as attr
    from tracedray.telemetry.otlp_json import read_trace_dir, to_readable_spans

    session = tmp_path / "session"
    telemetry.configure("raylet", session_dir=session, node_id="node1")
    try:
        store = make_store(1 << 20)
        sizes = {oid: put(store, oid, array(i)) for i, oid in enumerate(["5a", "5b", "5c"])}
        put(store, "5d", array(4))  # spills 5a
        store.ensure_local("5a")  # restores 5a, spills 5b
        store.free(["5a"])
        store.receive("5e", sizes["5c"], store.read_chunks("5c"), owner="driver")
        put(store, "5f", array(6))  # full again: the copy 5e goes before any primary
    finally:
        telemetry.shutdown()
    resource_spans, warnings = read_trace_dir(session / "traces")
    assert warnings == []
    every = [(s.name, dict(s.attributes or {})) for s in to_readable_spans(resource_spans)]
    seals = [(a[attr.OBJECT_ID], a[attr.OBJECT_COPY], a[attr.STORE_USED])
             for name, a in every if name == "object.seal"]
    # Every copy that entered shared memory, with the store's use right after it (in
    # objects: all six are the same size, three fit).
    unit = sizes["5a"]
    assert set(sizes.values()) == {unit}
    assert [(oid, copy, used / unit) for oid, copy, used in seals] == [
        ("5a", "primary", 1), ("5b", "primary", 2), ("5c", "primary", 3),
        ("5d", "primary", 3), ("5e", "secondary", 3), ("5f", "primary", 3)]
    spans = [(name, a) for name, a in every if name != "object.seal"]
    assert [(name, a[attr.OBJECT_ID]) for name, a in spans] == [
        ("object.spill", "5a"), ("object.spill", "5b"), ("object.restore", "5a"),
        ("object.free", "5a"), ("object.evict", "5e"),
    ]
    spill = spans[0][1]
    assert spill[attr.OBJECT_SIZE] == sizes["5a"]
    assert spill[attr.NODE_ID] == "node1"
    assert spill[attr.SPILL_PATH] == str(tmp_path / "node1-spill" / "5a")
    assert spill[attr.STORE_CAPACITY] == 1 << 20
    assert spill[attr.STORE_USED] == sizes["5b"] + sizes["5c"]  # after the spill
