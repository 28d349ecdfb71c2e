"""The object data path: node-to-node object bytes outside the gRPC control channel.

Each raylet listens on a plain TCP port (``ObjectChunk.data_port``, offered in the
reply to a ``PullObject`` that asks for it). A puller opens a few connections and
asks each for byte ranges of the object in turn (:func:`fetch`): several ranges
are in flight at once, the holder sends each with ``sendfile`` from the object's
file (shared memory or spill file) and the puller ``splice``s it from the socket
through a pipe into the destination's pre-sized file, at the range's offset: the
bytes never enter either process, nor a protobuf. Where ``os.splice`` is missing
the puller receives into one small buffer per connection and ``pwrite``s it
(a fresh mapping of the destination took a page fault per page and was slower).
Measured against recv + pwrite on the reference machine (benchmarks/transfer.py,
two runs of 4 rounds, load 9-15): 100 MB 1.05 against 0.92 GB/s, 1 GB the same.
Receiving with ``recv_into`` straight into a mapping of the destination whose pages
were all there first (``posix_fallocate``, then ``MAP_POPULATE``) lost to splice too:
100 MB 0.54-0.93 against 1.11-1.26 GB/s into a reused file, 1 GB 0.62 against 1.10
(benchmarks/results/transfers-2026-11-27b). The destination is a pool file of its size
class when the store has one (``ObjectStore.receive_into``): no page to allocate.

Wire format and range planning: :mod:`.object_wire`.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import select
import socket
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from tracedray import logs
from tracedray.core.raylet import object_wire as wire
from tracedray.core.raylet.connection_server import ConnectionServer
from tracedray.exceptions import ObjectStoreFullError, RaySystemError

log = logs.get_logger(__name__)

# (fd, size) of an object's file, opened for reading; raises when the node lacks it.
OpenObject = Callable[[str], tuple[int, int]]

CHUNK_BYTES = 8 << 20  # one request's range: large enough that a request costs nothing
MAX_STREAMS = 4  # connections per transfer
BUFFER_BYTES = 1 << 20  # per connection: stays in the CPU cache between recv and pwrite
TIMEOUT_S = 120.0  # one recv or send; a holder that died resets the connection sooner
PIPE_BYTES = 1 << 20  # per connection, with splice
SPLICE = True  # socket -> pipe -> file in the kernel where os.splice exists
F_SETPIPE_SZ = 1031  # fcntl.F_SETPIPE_SZ (Linux)


@dataclass(frozen=True)
class ObjectDataStatistics:
    port: int
    open_connections: int
    connections_total: int
    ranges_sent: int
    bytes_sent: int
    failed_total: int  # requests answered with an error or cut off


class ObjectDataServer:
    """The holder's end: serves byte ranges of the objects of this node's store."""

    def __init__(self, host: str, open_object: OpenObject) -> None:
        self._open_object = open_object
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        listener = socket.create_server((host, 0), family=family, backlog=128)
        self.port: int = listener.getsockname()[1]
        self._lock = threading.Lock()
        self._ranges = self._bytes = self._failed = 0
        self._server = ConnectionServer(listener, self._serve, name="tracedray-object-data")

    def close(self) -> None:
        self._server.close()

    def statistics(self) -> ObjectDataStatistics:
        with self._lock:
            ranges, sent, failed = self._ranges, self._bytes, self._failed
        return ObjectDataStatistics(self.port, self._server.open_connections(),
                                    self._server.accepted, ranges, sent, failed)

    def __repr__(self) -> str:
        s = self.statistics()
        return f"<ObjectDataServer port={s.port} open={s.open_connections} sent={s.bytes_sent}>"

    def _serve(self, sock: socket.socket) -> None:
        try:
            sock.settimeout(TIMEOUT_S)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            for request in _requests(sock):
                sent = self._send_range(sock, request)
                with self._lock:
                    if sent:
                        self._ranges += 1
                        self._bytes += request.length
                    else:
                        self._failed += 1
        except OSError as exc:  # the puller went away mid-range
            with self._lock:
                self._failed += 1
            log.debug("object data connection ended", error=str(exc))

    def _send_range(self, sock: socket.socket, request: wire.Request) -> bool:
        """Send one range; False when it was answered with an error instead."""
        object_hex = request.object_id.hex()
        try:
            fd, size = self._open_object(object_hex)
        except Exception as exc:  # not here (freed, lost): the puller reports it
            sock.sendall(wire.encode_error(f"object {object_hex}: {exc}"))
            return False
        try:
            problem = wire.check_range(request.offset, request.length, size)
            if problem is not None:
                sock.sendall(wire.encode_error(problem))
                return False
            sock.sendall(wire.encode_reply(size))
            _sendfile_all(sock, fd, request.offset, request.length)
        finally:
            os.close(fd)
        return True


def connect(host: str, port: int) -> socket.socket:
    """A connection to a holder's data port; raises ``OSError`` when there is none."""
    sock = socket.create_connection((host, port), timeout=TIMEOUT_S)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def fetch(first: socket.socket, host: str, port: int, object_id: bytes, size: int, fd: int,
          *, chunk_bytes: int = CHUNK_BYTES, max_streams: int = MAX_STREAMS) -> int:
    """Copy the object's ``size`` bytes into ``fd`` (pre-sized), several ranges at once.

    ``first`` is an open connection (:func:`connect`), used and closed here; the other
    streams connect themselves. Returns how many connections were used. Raises
    :class:`RaySystemError` (or :class:`ObjectStoreFullError` when the destination's
    file system is full); what was written is then the caller's to remove.
    """
    ranges = iter(wire.plan_ranges(size, chunk_bytes))
    lock = threading.Lock()
    errors: list[BaseException] = []

    def next_range() -> wire.ByteRange | None:
        with lock:
            if errors:
                return None
            return next(ranges, None)

    def stream(sock: socket.socket | None) -> None:
        try:
            if sock is None:
                sock = connect(host, port)
            pipe = _pipe() if SPLICE else None
            try:
                with sock:
                    sock.settimeout(TIMEOUT_S)
                    buffer = memoryview(bytearray(0 if pipe else min(BUFFER_BYTES,
                                                                     max(size, 1))))
                    while (byte_range := next_range()) is not None:
                        _receive_range(sock, object_id, byte_range, size, fd, buffer, pipe)
            finally:
                if pipe is not None:
                    os.close(pipe[0])
                    os.close(pipe[1])
        except BaseException as exc:
            with lock:
                errors.append(exc)

    count = wire.stream_count(size, chunk_bytes, max_streams)
    helpers = [threading.Thread(target=stream, args=(None,), daemon=True,
                                name="tracedray-object-pull") for _ in range(count - 1)]
    for helper in helpers:
        helper.start()
    stream(first)
    for helper in helpers:
        helper.join()
    if errors:
        raise _as_transfer_error(errors[0], object_id, host, port)
    return count


def _receive_range(sock: socket.socket, object_id: bytes, byte_range: wire.ByteRange,
                   size: int, fd: int, buffer: memoryview,
                   pipe: tuple[int, int] | None) -> None:
    sock.sendall(wire.encode_request(object_id, byte_range.offset, byte_range.length))
    status, total = wire.REPLY.unpack(_recv_exactly(sock, wire.REPLY.size))
    if status != wire.STATUS_OK:
        (length,) = wire.ERROR_LENGTH.unpack(_recv_exactly(sock, wire.ERROR_LENGTH.size))
        raise RaySystemError(_recv_exactly(sock, length).decode("utf-8", "replace"))
    if total != size:
        raise RaySystemError(f"the holder has {total} bytes of the object, expected {size}")
    offset, end = byte_range.offset, byte_range.offset + byte_range.length
    if pipe is not None:
        _splice_range(sock, fd, offset, end, size, pipe)
        return
    while offset < end:
        received = sock.recv_into(buffer, min(len(buffer), end - offset))
        if received == 0:
            raise RaySystemError(f"the holder closed the connection at byte {offset} of "
                                 f"{size}")
        _pwrite_all(fd, buffer[:received], offset)
        offset += received


def _splice_range(sock: socket.socket, fd: int, offset: int, end: int, size: int,
                  pipe: tuple[int, int]) -> None:
    """Socket to pipe to file inside the kernel: the bytes skip this process."""
    read_end, write_end = pipe
    poller = select.poll()
    poller.register(sock.fileno(), select.POLLIN)
    while offset < end:
        try:
            moved = os.splice(sock.fileno(), write_end, min(PIPE_BYTES, end - offset))
        except BlockingIOError:  # the socket has a timeout, so it is non-blocking
            if not poller.poll(TIMEOUT_S * 1000):
                raise RaySystemError(f"the holder sent nothing for {TIMEOUT_S:g}s") from None
            continue
        if moved == 0:
            raise RaySystemError(f"the holder closed the connection at byte {offset} of "
                                 f"{size}")
        done = 0
        while done < moved:
            done += os.splice(read_end, fd, moved - done, offset_dst=offset + done)
        offset += moved


def _pipe() -> tuple[int, int] | None:
    """A pipe for splice, or None where there is none (then recv and pwrite)."""
    if not hasattr(os, "splice"):
        return None
    read_end, write_end = os.pipe2(os.O_CLOEXEC)
    with contextlib.suppress(OSError):  # capped by /proc/sys/fs/pipe-max-size
        fcntl.fcntl(write_end, F_SETPIPE_SZ, PIPE_BYTES)
    return read_end, write_end


def _as_transfer_error(exc: BaseException, object_id: bytes, host: str,
                       port: int) -> BaseException:
    if isinstance(exc, (RaySystemError, ObjectStoreFullError)):
        return exc
    if isinstance(exc, OSError) and exc.errno == errno.ENOSPC:
        return ObjectStoreFullError(f"shared memory ran out while receiving object "
                                    f"{object_id.hex()}; lower object_store_memory")
    if isinstance(exc, OSError):
        return RaySystemError(f"the data path to {host}:{port} failed: {exc}")
    return exc


def _requests(sock: socket.socket) -> Iterator[wire.Request]:
    """The requests on a connection until the puller closes it."""
    while True:
        header = _recv_exactly(sock, wire.REQUEST.size, eof_ok=True)
        if not header:
            return
        id_length, offset, length = wire.REQUEST.unpack(header)
        if id_length > wire.MAX_ID_BYTES:
            raise OSError(f"not an object data request (id of {id_length} bytes)")
        yield wire.Request(_recv_exactly(sock, id_length), offset, length)


def _recv_exactly(sock: socket.socket, count: int, *, eof_ok: bool = False) -> bytes:
    data = sock.recv(count, socket.MSG_WAITALL) if count else b""
    if len(data) == count or (eof_ok and not data):
        return data
    parts = [data]
    got = len(data)
    while got < count:
        more = sock.recv(count - got)
        if not more:
            raise RaySystemError(f"the connection ended after {got} of {count} header bytes")
        parts.append(more)
        got += len(more)
    return b"".join(parts)


def _sendfile_all(sock: socket.socket, fd: int, offset: int, length: int) -> None:
    # socket.sendfile, not os.sendfile: the socket has a timeout (it is non-blocking
    # underneath), and socket.sendfile waits for it to drain between calls.
    with open(fd, "rb", closefd=False) as file:
        sent = sock.sendfile(file, offset, length)
    if sent != length:
        raise OSError(f"the object's file ended at byte {offset + sent}")


def _pwrite_all(fd: int, view: memoryview, offset: int) -> None:
    done = 0
    while done < view.nbytes:
        done += os.pwrite(fd, view[done:], offset + done)
