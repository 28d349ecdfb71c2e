"""Seals over the raylet's Unix socket, and the gRPC fallback when it is not there."""

from __future__ import annotations

import threading
import uuid
from typing import Any

from tracedray._proto.v1 import common_pb2, raylet_pb2
from tracedray.core.raylet import seal_channel as sc
from tracedray.core.worker.object_io import ObjectIO


def _name() -> bytes:
    return sc.socket_name(f"/dev/shm/test-{uuid.uuid4().hex}-")


def test_names_differ_per_node_and_stay_abstract() -> None:
    a, b = sc.socket_name("/dev/shm/td-s-node1-"), sc.socket_name("/dev/shm/td-s-node2-")
    assert a != b and a.startswith(b"\0") and len(a) < 108
    assert sc.socket_name("/dev/shm/td-s-node1-") == a


def test_seals_round_trip_in_order_from_several_threads() -> None:
    seen: list[bytes] = []

    def seal(request: raylet_pb2.SealObjectRequest) -> raylet_pb2.SealObjectReply:
        seen.append(request.object_id)
        ok = request.size < 100
        return raylet_pb2.SealObjectReply(ok=ok, error="" if ok else "full",
                                          store_used=request.size, store_capacity=100)

    name = _name()
    server = sc.SealChannelServer(name, seal)
    channel = sc.SealChannel(name)
    try:
        replies: list[Any] = []

        def put(index: int) -> None:
            for size in (index, 100 + index):
                replies.append(channel.seal(raylet_pb2.SealObjectRequest(
                    object_id=bytes([index]), size=size)))

        threads = [threading.Thread(target=put, args=(i,)) for i in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(10)
        assert sorted((r.ok, r.store_used) for r in replies) == sorted(
            [(True, i) for i in range(4)] + [(False, 100 + i) for i in range(4)])
        assert sorted(seen) == sorted(bytes([i]) for i in range(4) for _ in range(2))
        stats = server.statistics()
        assert (stats.accepted_total, stats.seals_total, stats.refused_total) == (1, 8, 0)
    finally:
        channel.close()
        server.close()


class _GrpcRaylet:
    """The local raylet's gRPC side, as ObjectIO sees it: records the seals it gets."""

    def __init__(self) -> None:
        self.seals: list[bytes] = []

    def seal_object(self, request: raylet_pb2.SealObjectRequest) -> raylet_pb2.SealObjectReply:
        self.seals.append(request.object_id)
        return raylet_pb2.SealObjectReply(ok=True)

    def locate_object(self, request: raylet_pb2.LocateObjectRequest
                      ) -> raylet_pb2.LocateObjectReply:
        raise AssertionError("nothing is read in this test")


def test_object_io_seals_over_grpc_when_the_socket_is_missing() -> None:
    raylet = _GrpcRaylet()
    io = ObjectIO(raylet, f"/dev/shm/none-{uuid.uuid4().hex}-", node_id="n1",
                  raylet_address=common_pb2.Address(), owner=common_pb2.Address(),
                  release_dropped_refs=lambda: None, after_loss=lambda value: None)
    for object_id in (b"a", b"b"):
        assert io._seal(raylet_pb2.SealObjectRequest(object_id=object_id)).ok  # noqa: SLF001
    assert raylet.seals == [b"a", b"b"]
    io.close()


def test_a_closed_server_fails_the_channel_so_the_caller_falls_back() -> None:
    name = _name()
    server = sc.SealChannelServer(name, lambda r: raylet_pb2.SealObjectReply(ok=True))
    channel = sc.SealChannel(name)
    assert channel.seal(raylet_pb2.SealObjectRequest(object_id=b"x")).ok
    server.close()
    try:
        channel.seal(raylet_pb2.SealObjectRequest(object_id=b"y"))
    except (OSError, sc.RaySystemError):
        pass
    else:
        raise AssertionError("a seal through a closed channel succeeded")
    channel.close()


def test_a_sent_seal_is_applied_before_a_settled_lookup() -> None:
    """send() returns at once; settle() returns only once that seal was applied."""
    release = threading.Event()
    applied: list[bytes] = []

    def seal(request: raylet_pb2.SealObjectRequest) -> raylet_pb2.SealObjectReply:
        release.wait(10)
        applied.append(request.object_id)
        return raylet_pb2.SealObjectReply(ok=True)

    name = _name()
    server = sc.SealChannelServer(name, seal)
    channel = sc.SealChannel(name)
    try:
        release.set()  # the first seal on a connection waits for its reply
        assert channel.send(raylet_pb2.SealObjectRequest(object_id=b"0")) is not None
        release.clear()
        assert channel.send(raylet_pb2.SealObjectRequest(object_id=b"a")) is None
        settled: list[bool] = []
        waiter = threading.Thread(target=lambda: settled.append(server.settle()))
        waiter.start()
        waiter.join(0.3)
        assert waiter.is_alive() and applied == [b"0"]  # the lookup waits for the seal
        release.set()
        waiter.join(10)
        assert settled == [True] and applied == [b"0", b"a"]
        # A reply-wanting seal after it still gets its own reply, not a stray one.
        assert channel.seal(raylet_pb2.SealObjectRequest(object_id=b"b")).ok
        stats = server.statistics()
        assert (stats.seals_total, stats.unanswered_total, stats.settles_total) == (3, 1, 1)
        assert server.settle() and server.statistics().settles_total == 1  # nothing pending
    finally:
        release.set()
        channel.close()
        server.close()


def test_settle_gives_up_after_its_timeout() -> None:
    release = threading.Event()

    def seal(request: raylet_pb2.SealObjectRequest) -> raylet_pb2.SealObjectReply:
        release.wait(10)
        return raylet_pb2.SealObjectReply(ok=True)

    name = _name()
    server = sc.SealChannelServer(name, seal, settle_timeout_s=0.2)
    channel = sc.SealChannel(name)
    try:
        release.set()
        channel.seal(raylet_pb2.SealObjectRequest(object_id=b"0"))
        release.clear()
        channel.send(raylet_pb2.SealObjectRequest(object_id=b"a"))
        assert server.settle() is False
        assert server.statistics().settle_timeouts_total == 1
    finally:
        release.set()
        channel.close()
        server.close()


def test_seal_mode_waits_only_when_the_store_might_refuse() -> None:
    from tracedray.core.worker.object_io import SealMode, seal_mode

    assert seal_mode(10, room=100, capacity=100) is SealMode.SEND
    assert seal_mode(10, room=30, capacity=100) is SealMode.WAIT  # under a quarter left
    assert seal_mode(10, room=0, capacity=0) is SealMode.WAIT  # nothing known yet


def test_frees_go_behind_the_seals_on_the_same_connection() -> None:
    events: list[tuple[str, bytes]] = []

    def seal(request: raylet_pb2.SealObjectRequest) -> raylet_pb2.SealObjectReply:
        events.append(("seal", request.object_id))
        return raylet_pb2.SealObjectReply(ok=True, store_capacity=100)

    def free(request: raylet_pb2.FreeObjectsRequest) -> None:
        events.extend(("free", object_id) for object_id in request.object_ids)

    name = _name()
    server = sc.SealChannelServer(name, seal, free=free)
    channel = sc.SealChannel(name)
    try:
        channel.seal(raylet_pb2.SealObjectRequest(object_id=b"0"))
        assert channel.send(raylet_pb2.SealObjectRequest(object_id=b"a")) is None
        channel.free(raylet_pb2.FreeObjectsRequest(object_ids=[b"a", b"0"]))
        assert server.settle()
        assert events == [("seal", b"0"), ("seal", b"a"), ("free", b"a"), ("free", b"0")]
        stats = server.statistics()
        assert (stats.seals_total, stats.frees_total) == (2, 1)
    finally:
        channel.close()
        server.close()
