"""The object data path: ranges planned, served with sendfile, reassembled exactly."""

from __future__ import annotations

import fcntl
import os
import pickle
import socket
import threading
from pathlib import Path

import numpy as np
import pytest

from tracedray.core.object_store.client import map_object, write_object
from tracedray.core.object_store.layout import unpack
from tracedray.core.object_store.store import ObjectStore
from tracedray.core.raylet import object_data
from tracedray.core.raylet import object_wire as wire
from tracedray.exceptions import RaySystemError

OBJECT = "ab" * 14


def test_ranges_cover_the_object_once_in_order() -> None:
    ranges = wire.plan_ranges(10, 4)
    assert ranges == [wire.ByteRange(0, 4), wire.ByteRange(4, 4), wire.ByteRange(8, 2)]
    assert wire.plan_ranges(0, 4) == []
    assert sum(r.length for r in wire.plan_ranges(100_000_007, 8 << 20)) == 100_000_007
    with pytest.raises(ValueError):
        wire.plan_ranges(10, 0)


def test_stream_count_is_bounded_by_ranges_and_the_maximum() -> None:
    assert wire.stream_count(1, 8, 4) == 1
    assert wire.stream_count(17, 8, 4) == 3
    assert wire.stream_count(1 << 30, 8 << 20, 4) == 4
    assert wire.stream_count(0, 8, 4) == 1


def test_check_range_refuses_what_is_outside_the_object() -> None:
    assert wire.check_range(0, 10, 10) is None
    assert wire.check_range(5, 6, 10) is not None
    assert wire.check_range(0, 0, 10) is not None
    assert wire.check_range(-1, 2, 10) is not None


@pytest.fixture
def stores(tmp_path: Path):  # type: ignore[no-untyped-def]
    made = []
    for name in ("a", "b"):
        (tmp_path / f"{name}-shm").mkdir()
        made.append(ObjectStore(node_id=name, capacity_bytes=64 << 20, name_prefix=f"td-{name}",
                                shm_dir=tmp_path / f"{name}-shm",
                                spill_dir=tmp_path / f"{name}-spill"))
    yield made
    for store in made:
        store.shutdown()


def _put(store: ObjectStore, value: object) -> int:
    buffers: list[pickle.PickleBuffer] = []
    inband = pickle.dumps(value, protocol=5, buffer_callback=buffers.append)
    size = write_object(store.object_path(OBJECT), inband, buffers)
    store.seal(OBJECT, size, owner="driver", call_site="t.py:1")
    return size


def _pull(server: object_data.ObjectDataServer, into: ObjectStore, size: int, *,
          chunk_bytes: int, max_streams: int) -> list[int]:
    used: list[int] = []

    def fill(fd: int) -> None:
        first = object_data.connect("127.0.0.1", server.port)
        used.append(object_data.fetch(first, "127.0.0.1", server.port, bytes.fromhex(OBJECT),
                                      size, fd, chunk_bytes=chunk_bytes,
                                      max_streams=max_streams))

    into.receive_into(OBJECT, size, fill, owner="driver", call_site="t.py:1")
    return used


@pytest.mark.parametrize("splice", [True, False])
@pytest.mark.parametrize("spilled", [False, True])
def test_parallel_ranges_reassemble_the_object_exactly(stores, spilled: bool, splice: bool,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(object_data, "SPLICE", splice)  # both ways in: splice, recv + pwrite
    source, destination = stores
    value = np.random.default_rng(1).integers(0, 255, 3_000_001, dtype=np.uint8)
    size = _put(source, value)
    if spilled:
        source._spill(OBJECT)  # noqa: SLF001 (a spilled holder serves from its spill file)
    server = object_data.ObjectDataServer("127.0.0.1", source.open_for_transfer)
    try:
        used = _pull(server, destination, size, chunk_bytes=256 * 1024, max_streams=4)
        assert used == [4]
        received = destination.describe(OBJECT)
        assert received is not None and not received.primary and received.size == size
        inband, buffers = unpack(map_object(destination.object_path(OBJECT)))
        np.testing.assert_array_equal(pickle.loads(inband, buffers=buffers), value)
        stats = server.statistics()
        assert stats.bytes_sent == size and stats.failed_total == 0
        assert stats.ranges_sent == len(wire.plan_ranges(size, 256 * 1024))
    finally:
        server.close()
    assert server.statistics().open_connections == 0


def test_a_failed_transfer_leaves_no_partial_object(stores, tmp_path: Path) -> None:
    source, destination = stores
    server = object_data.ObjectDataServer("127.0.0.1", source.open_for_transfer)
    try:  # the holder lacks the object: every stream's first range is refused
        with pytest.raises(RaySystemError, match="not in the object store"):
            _pull(server, destination, 1_000_000, chunk_bytes=100_000, max_streams=3)
        assert server.statistics().failed_total >= 1
    finally:
        server.close()
    assert destination.describe(OBJECT) is None
    assert os.listdir(tmp_path / "b-shm") == []


def test_a_holder_that_hangs_up_mid_range_fails_the_transfer(stores, tmp_path: Path) -> None:
    _, destination = stores
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def holder() -> None:  # answers the first range with 10 of its bytes, then hangs up
        peer, _ = listener.accept()
        peer.recv(wire.REQUEST.size + 14, socket.MSG_WAITALL)
        peer.sendall(wire.encode_reply(1000) + b"x" * 10)
        peer.close()

    def fill(fd: int) -> None:
        first = object_data.connect("127.0.0.1", port)
        object_data.fetch(first, "127.0.0.1", port, bytes.fromhex(OBJECT), 1000, fd,
                          max_streams=1)

    thread = threading.Thread(target=holder, daemon=True)
    thread.start()
    try:
        with pytest.raises(RaySystemError, match="closed the connection"):
            destination.receive_into(OBJECT, 1000, fill, owner="driver")
    finally:
        thread.join(10)
        listener.close()
    assert destination.describe(OBJECT) is None
    assert os.listdir(tmp_path / "b-shm") == []


def test_receive_into_pre_sizes_the_destination(stores) -> None:
    _, destination = stores
    sizes: list[int] = []

    def fill(fd: int) -> None:
        sizes.append(os.fstat(fd).st_size)
        os.pwrite(fd, b"z", 4999)  # the last byte first: the file already has its size

    destination.receive_into(OBJECT, 5000, fill, owner="driver")
    assert sizes == [5000]
    assert os.stat(destination.object_path(OBJECT)).st_size == 5000


def test_a_received_copy_reuses_a_freed_file_of_its_class(stores) -> None:
    _, destination = stores
    size = 300 << 10
    _put(destination, np.full(size, 7, dtype=np.uint8))
    stored = destination.describe(OBJECT)
    assert stored is not None
    inode = os.stat(destination.object_path(OBJECT)).st_ino
    destination.free([OBJECT])
    assert destination.statistics().pool.files == 1
    new = "cd" * 14
    seen: list[tuple[int, int]] = []

    def fill(fd: int) -> None:
        seen.append((os.fstat(fd).st_ino, os.fstat(fd).st_size))
        os.pwrite(fd, b"n" * (stored.size - 1000), 0)
        os.pwrite(fd, b"e" * 990, stored.size - 1000)

    destination.receive_into(new, stored.size - 10, fill, owner="driver")
    assert seen == [(inode, stored.size - 10)]  # the freed file, cut to the copy's size
    stats = destination.statistics().pool
    assert (stats.files, stats.bytes, stats.reused_total) == (0, 0, 1)
    copy = map_object(destination.object_path(new))
    assert copy.nbytes == stored.size - 10 and bytes(copy[-990:]) == b"e" * 990
    assert destination.describe(new) is not None


def test_a_pool_file_a_reader_still_locks_is_not_received_into(stores) -> None:
    _, destination = stores
    size = _put(destination, np.full(300 << 10, 7, dtype=np.uint8))
    destination.free([OBJECT])
    (slot,) = [p for d in (destination.object_path("00").parent).iterdir()
               if "-pool-" in d.name for p in d.iterdir()]
    late_reader = os.open(slot, os.O_RDONLY)
    try:
        fcntl.flock(late_reader, fcntl.LOCK_SH)  # mapped it just before it was pooled
        inodes: list[int] = []
        destination.receive_into("cd" * 14, size, lambda fd: inodes.append(os.fstat(fd).st_ino),
                                 owner="driver")
        assert inodes != [os.fstat(late_reader).st_ino]  # a new file instead
        assert not slot.exists()  # the late reader's file left the pool, deleted
        assert os.pread(late_reader, 4, size - 4) != b""  # its bytes are still readable
    finally:
        os.close(late_reader)
