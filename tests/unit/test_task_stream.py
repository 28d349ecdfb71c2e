"""The task stream over real sockets: frames, the caller's connection, the worker's server."""

from __future__ import annotations

import os
import select
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from tracedray._proto.v1 import common_pb2, core_worker_pb2
from tracedray.core import auth
from tracedray.core.address import Address
from tracedray.core.protocol import task_stream
from tracedray.core.protocol.connection import WorkerConnection
from tracedray.core.worker.task_stream_server import Reply, TaskStreamServer
from tracedray.exceptions import RaySystemError


def _spec(i: int, payload: bytes = b"") -> common_pb2.TaskSpec:
    return common_pb2.TaskSpec(task_id=i.to_bytes(8, "big"), function_name="f",
                               call_site=payload.decode("latin-1"))


def _number(task_id: bytes) -> int:
    return int.from_bytes(task_id, "big")


def _echo(spec: common_pb2.TaskSpec, reply: Reply) -> None:
    reply(common_pb2.TaskResult(task_id=spec.task_id, attempt=len(spec.call_site)))


class Caller:
    """A WorkerConnection with what its callbacks saw."""

    def __init__(self, port: int, ip: str = "127.0.0.1") -> None:
        self.results: list[common_pb2.TaskResult] = []
        self.broken: list[BaseException | None] = []
        self.got = threading.Condition()
        self.broken_event = threading.Event()
        # Constructed under the lock the callbacks take, as the submitters do: a
        # connection can break before its constructor has returned.
        with self.got:
            self.conn = WorkerConnection(Address("node", ip, 1, "worker-abc", 4242, port),
                                         self._on_results, self._on_broken)

    def _on_results(self, conn: WorkerConnection, results: list[common_pb2.TaskResult]) -> None:
        with self.got:
            assert conn is self.conn
            self.results.extend(results)
            self.got.notify_all()

    def _on_broken(self, conn: WorkerConnection, error: BaseException | None) -> None:
        with self.got:
            assert conn is self.conn
            self.broken.append(error)
        self.broken_event.set()

    def wait_results(self, count: int, timeout_s: float = 20.0) -> list[int]:
        with self.got:
            assert self.got.wait_for(lambda: len(self.results) >= count, timeout_s), (
                f"{len(self.results)} of {count} results")
            return [_number(r.task_id) for r in self.results]

    def close_cleanly(self) -> None:
        """Close the stream; its reader ends without reporting it broken."""
        self.conn.close()
        self.wait_ended()
        assert self.broken == []

    def wait_ended(self, timeout_s: float = 10.0) -> None:
        self.conn._reader.join(timeout_s)
        assert not self.conn._reader.is_alive(), "the reader thread did not end"


def _wait(predicate: Callable[[], bool], timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.01)


TOKEN = "task-stream-test-token-0123456789"


@pytest.fixture(autouse=True)
def _token(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Callers and servers of these tests (subprocesses too) share this token. What this
    process learned of earlier clusters is set aside: a token remembered for an address
    that a server of these tests now reuses would be presented instead."""
    monkeypatch.setenv("TRACEDRAY_AUTH_TOKEN", TOKEN)
    monkeypatch.delenv("TRACEDRAY_AUTH_MODE", raising=False)
    monkeypatch.setattr(auth, "_known", {})
    auth.reset()
    auth.forget()
    yield
    auth.reset()
    auth.forget()


def _read_line(process: subprocess.Popen[str], timeout_s: float = 20.0) -> str:
    """The subprocess's next line, or a failure naming what it printed on stderr."""
    assert process.stdout is not None
    ready, _, _ = select.select([process.stdout], [], [], timeout_s)
    assert ready, f"no line from the subprocess within {timeout_s} s"
    return process.stdout.readline().strip()


@pytest.fixture
def server() -> Iterator[TaskStreamServer]:
    srv = TaskStreamServer("127.0.0.1", _echo)
    yield srv
    srv.stop()


# --- frames
def _read_all(reader: task_stream.FrameReader, count: int) -> list[bytes]:
    out: list[bytes] = []
    while len(out) < count:
        payloads = reader.read()
        assert payloads is not None
        out.extend(bytes(p) for p in payloads)
    return out


def test_frames_round_trip_large_and_many_small() -> None:
    a, b = socket.socketpair()
    big = os.urandom(5 * 1024 * 1024)
    small = [os.urandom(i % 50) for i in range(20_000)]
    sent = [big, *small, big[:3_000_000]]
    writer = threading.Thread(target=lambda: a.sendall(b"".join(task_stream.frame(p)
                                                                 for p in sent)))
    writer.start()
    reader = task_stream.FrameReader(b, initial_bytes=1024)  # forces growth and compaction
    assert _read_all(reader, len(sent)) == sent
    writer.join()
    a.close()
    assert reader.read() is None  # clean end of stream
    b.close()


def test_one_item_frame_is_a_batch_of_one() -> None:
    spec = _spec(7, b"x" * 300)  # a length that needs a two-byte varint
    data = task_stream.one_item_frame(spec)
    (length,) = struct.unpack(">I", data[:4])
    assert length == len(data) - 4
    assert list(core_worker_pb2.TaskBatch.FromString(data[4:]).tasks) == [spec]
    # Two items back to back are one valid batch of two: receivers may merge frames.
    two = data[4:] + task_stream.one_item_frame(_spec(8))[4:]
    assert [_number(t.task_id) for t in core_worker_pb2.TaskBatch.FromString(two).tasks] == [7, 8]


def test_stream_ending_inside_a_frame_is_a_protocol_error() -> None:
    a, b = socket.socketpair()
    a.sendall(task_stream.frame(b"hello")[:6])
    a.close()
    with pytest.raises(task_stream.ProtocolError, match="inside a frame"):
        task_stream.FrameReader(b).read()
    b.close()


def test_oversized_frames_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(task_stream, "MAX_FRAME_BYTES", 1000)
    with pytest.raises(RaySystemError, match="exceeds"):
        task_stream.frame(b"x" * 1001)
    a, b = socket.socketpair()
    a.sendall(struct.pack(">I", 1001))
    with pytest.raises(task_stream.ProtocolError, match="not a tracedray task stream"):
        task_stream.FrameReader(b).read()
    a.close()
    b.close()


# --- caller and worker over a real connection
def test_results_come_back_in_order_with_statistics(server: TaskStreamServer) -> None:
    caller = Caller(server.port)
    for i in range(2_000):
        caller.conn.send(_spec(i))
    assert caller.wait_results(2_000) == list(range(2_000))
    _wait(lambda: server.statistics().results_sent == 2_000)  # counted after the write
    stats = server.statistics()
    assert (stats.port, stats.accepted_total, stats.open_connections) == (server.port, 1, 1)
    assert (stats.tasks_received, stats.results_sent, stats.results_dropped) == (2_000, 2_000, 0)
    client = caller.conn.statistics()
    assert (client.frames_sent, client.pending_bytes) == (2_000, 0)
    assert 0 < client.frames_received <= 2_000  # frames read together are delivered together
    caller.close_cleanly()
    _wait(lambda: server.statistics().open_connections == 0)


def _holding_server(release: threading.Event,
                    holds: Callable[[int], bool]) -> TaskStreamServer:
    """A server that echoes each task, the ones ``holds`` names once ``release`` is set
    (their results stay due meanwhile)."""
    def held(spec: common_pb2.TaskSpec, reply: Reply) -> None:
        if holds(_number(spec.task_id)):
            release.wait(30)
        _echo(spec, reply)

    return TaskStreamServer("127.0.0.1", held)


def test_a_lone_call_is_written_directly_and_a_burst_in_batches() -> None:
    release = threading.Event()
    # The burst's results stay due while it is being sent.
    srv = _holding_server(release, lambda number: number >= 21)
    try:
        caller = Caller(srv.port)
        caller.conn.send(_spec(0))
        caller.wait_results(1)
        before = caller.conn.statistics().deferred_frames  # 0, or 1 if sent while connecting
        for i in range(1, 21):  # round trips: the stream is idle at every send
            caller.conn.send(_spec(i))
            caller.wait_results(i + 1)
        assert caller.conn.statistics().deferred_frames == before
        for i in range(21, 521):  # a burst: results are due from its second frame on
            caller.conn.send(_spec(i))
        assert caller.conn.statistics().deferred_frames == before + 499
        release.set()
        assert caller.wait_results(521) == list(range(521))
        caller.close_cleanly()
    finally:
        release.set()
        srv.stop()


def test_a_batch_is_written_directly_while_results_are_due() -> None:
    """send_many's frames already share one write: they skip the writer thread (the
    reader sends the tasks each batch of results makes room for), even while results
    are due, and stay in order behind single frames still pending."""
    release = threading.Event()
    # Results stay due while the batches are sent.
    srv = _holding_server(release, lambda number: number == 1)
    try:
        caller = Caller(srv.port)
        caller.conn.send(_spec(0))
        caller.wait_results(1)
        before = caller.conn.statistics().deferred_frames  # 0, or 1 if sent while connecting
        caller.conn.send(_spec(1))  # idle stream: written directly, its result now due
        for start in range(2, 42, 8):
            caller.conn.send_many([_spec(i) for i in range(start, start + 8)])
        assert caller.conn.statistics().deferred_frames == before
        release.set()
        assert caller.wait_results(42) == list(range(42))
        caller.close_cleanly()
    finally:
        release.set()
        srv.stop()


def test_slow_worker_never_blocks_the_sender_and_keeps_order() -> None:
    release = threading.Event()

    def slow(spec: common_pb2.TaskSpec, reply: Reply) -> None:
        release.wait(30)  # the worker stops reading: the caller's frames pile up
        _echo(spec, reply)

    srv = TaskStreamServer("127.0.0.1", slow)
    try:
        caller = Caller(srv.port)
        chunk = b"y" * 200_000
        started = time.monotonic()
        for i in range(150):  # 30 MB: far more than both kernel buffers hold
            caller.conn.send(_spec(i, chunk))
        assert time.monotonic() - started < 5.0
        stats = caller.conn.statistics()
        assert stats.deferred_frames > 0 and stats.pending_bytes > 0
        release.set()
        assert caller.wait_results(150, timeout_s=60) == list(range(150))
        assert all(r.attempt == len(chunk) for r in caller.results)  # payloads intact
        assert caller.conn.statistics().pending_bytes == 0
        caller.conn.send(_spec(150))  # back on the direct path after draining
        assert caller.wait_results(151)[-1] == 150
        caller.close_cleanly()
    finally:
        release.set()
        srv.stop()


def test_close_lets_running_tasks_answer_and_does_not_report_broken() -> None:
    def later(spec: common_pb2.TaskSpec, reply: Reply) -> None:
        threading.Timer(0.3, _echo, args=(spec, reply)).start()

    srv = TaskStreamServer("127.0.0.1", later)
    try:
        caller = Caller(srv.port)
        for i in range(5):
            caller.conn.send(_spec(i))
        caller.conn.close()
        caller.conn.send(_spec(99))  # after close: dropped, not sent
        assert sorted(caller.wait_results(5)) == [0, 1, 2, 3, 4]  # timers answer in any order
        caller.wait_ended()
        assert caller.broken == [] and not caller.conn.broken
        _wait(lambda: srv.statistics().open_connections == 0)
        assert srv.statistics().tasks_received == 5
    finally:
        srv.stop()


def test_close_before_connecting_ends_cleanly(server: TaskStreamServer) -> None:
    caller = Caller(server.port)
    caller.close_cleanly()


def test_worker_ending_the_stream_reports_broken_once(server: TaskStreamServer) -> None:
    caller = Caller(server.port)
    caller.conn.send(_spec(1))
    caller.wait_results(1)
    server.stop()
    assert caller.broken_event.wait(10)
    caller.wait_ended()
    assert len(caller.broken) == 1 and caller.conn.broken
    assert isinstance(caller.broken[0], RaySystemError)
    caller.conn.send(_spec(2))  # a broken stream drops sends quietly
    caller.conn.close()
    assert len(caller.broken) == 1


_KILLABLE_WORKER = """
import sys, threading
from tracedray.core.worker.task_stream_server import TaskStreamServer
started = threading.Event()
def hang(spec, reply):
    started.set()
    print("running", flush=True)
    threading.Event().wait()
srv = TaskStreamServer("127.0.0.1", hang)
print(srv.port, flush=True)
threading.Event().wait()
"""


def test_sigkilled_worker_surfaces_as_broken_promptly() -> None:
    process = subprocess.Popen([sys.executable, "-c", _KILLABLE_WORKER], stdout=subprocess.PIPE,
                               text=True)
    try:
        caller = Caller(int(_read_line(process)))
        caller.conn.send(_spec(1))
        assert _read_line(process) == "running", caller.broken
        os.kill(process.pid, signal.SIGKILL)
        started = time.monotonic()
        assert caller.broken_event.wait(5)
        assert time.monotonic() - started < 2.0
        assert len(caller.broken) == 1 and isinstance(caller.broken[0], RaySystemError)
        assert "worker-abc" in str(caller.broken[0]) and "pid 4242" in str(caller.broken[0])
    finally:
        process.kill()
        process.wait()
        if process.stdout is not None:
            process.stdout.close()


def test_connecting_to_nothing_is_a_clear_error() -> None:
    with socket.socket() as probe:  # a port that was free a moment ago: nobody listens
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    caller = Caller(port)
    caller.conn.send(_spec(1))
    assert caller.broken_event.wait(10)
    caller.wait_ended()
    [error] = caller.broken
    assert isinstance(error, RaySystemError) and "refused" in str(error)
    assert isinstance(error.__cause__, ConnectionRefusedError)


def test_an_address_without_task_port_is_a_clear_error() -> None:
    caller = Caller(0)
    assert caller.broken_event.wait(10)
    [error] = caller.broken
    assert isinstance(error, RaySystemError) and "has no task stream" in str(error)


def test_server_drops_a_garbage_connection_and_keeps_serving(server: TaskStreamServer) -> None:
    with socket.create_connection(("127.0.0.1", server.port)) as rogue:
        rogue.sendall(b"GET / HTTP/1.1\r\n\r\n")  # a length far over the limit
        rogue.settimeout(10)
        assert rogue.recv(100) == b""  # the server hung up
    caller = Caller(server.port)
    caller.conn.send(_spec(3))
    assert caller.wait_results(1) == [3]
    caller.conn.close()
    caller.wait_ended()


def test_results_for_a_vanished_caller_are_dropped() -> None:
    replies: list[tuple[common_pb2.TaskSpec, Reply]] = []
    srv = TaskStreamServer("127.0.0.1", lambda spec, reply: replies.append((spec, reply)))
    try:
        raw = socket.create_connection(("127.0.0.1", srv.port))
        raw.sendall(task_stream.handshake_frame(TOKEN) + task_stream.one_item_frame(_spec(1)))
        _wait(lambda: len(replies) == 1)
        raw.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        raw.close()  # a reset: the caller died
        _wait(lambda: srv.statistics().open_connections == 0)
        spec, reply = replies[0]
        _echo(spec, reply)  # must not raise
        assert srv.statistics().results_dropped == 1
    finally:
        srv.stop()


# --- the handshake
def _pushes_and_server() -> tuple[list[int], TaskStreamServer]:
    pushed: list[int] = []

    def push(spec: common_pb2.TaskSpec, reply: Reply) -> None:
        pushed.append(_number(spec.task_id))
        _echo(spec, reply)

    return pushed, TaskStreamServer("127.0.0.1", push)


@pytest.mark.parametrize("opening", [
    b"",  # no handshake: tasks straight away
    task_stream.handshake_frame("wrong-token-but-long-enough-0000"),
    task_stream.handshake_frame(None),
], ids=["no-handshake", "wrong-token", "empty-token"])
def test_a_stream_without_the_right_handshake_is_closed_without_effect(opening: bytes) -> None:
    pushed, srv = _pushes_and_server()
    try:
        with socket.create_connection(("127.0.0.1", srv.port)) as rogue:
            rogue.sendall(opening + task_stream.one_item_frame(_spec(7)))
            rogue.settimeout(10)
            assert rogue.recv(100) == b""  # closed, nothing answered
        _wait(lambda: srv.statistics().refused_total == 1)
        assert pushed == [] and srv.statistics().tasks_received == 0
        caller = Caller(srv.port)  # the right token still gets in
        caller.conn.send(_spec(8))
        assert caller.wait_results(1) == [8] and pushed == [8]
        caller.close_cleanly()
        assert srv.statistics().refused_total == 1
    finally:
        srv.stop()


def test_a_caller_that_never_sends_its_handshake_is_dropped(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from tracedray.core.worker import task_stream_server

    monkeypatch.setattr(task_stream_server, "HANDSHAKE_TIMEOUT_S", 0.3)
    pushed, srv = _pushes_and_server()
    try:
        with socket.create_connection(("127.0.0.1", srv.port)) as idle:
            idle.settimeout(10)
            assert idle.recv(100) == b""
        assert srv.statistics().refused_total == 1 and pushed == []
    finally:
        srv.stop()


def test_auth_disabled_accepts_any_handshake(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRACEDRAY_AUTH_MODE", "disabled")
    pushed, srv = _pushes_and_server()
    try:
        with socket.create_connection(("127.0.0.1", srv.port)) as raw:
            raw.sendall(task_stream.handshake_frame(None) + task_stream.one_item_frame(_spec(2)))
            raw.settimeout(10)
            reader = task_stream.FrameReader(raw)
            assert reader.read() is not None
        assert pushed == [2]
    finally:
        srv.stop()
