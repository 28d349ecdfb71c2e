"""Seals over a local socket: a put's round trip to its raylet without gRPC.

A core worker writes an object's file itself and then asks its raylet to seal it
(``ObjectStore.seal``); the put waits for the answer, since a full store must
fail the put. Over gRPC that round trip cost about twice the write of a 1 MB
object (benchmarks/transfer.py). The raylet also listens on a Unix socket in the
abstract namespace (no file to clean up; named after the node's object-file
prefix, which its workers know) and answers the same ``SealObjectRequest`` there:
``!I``-length-prefixed request, the same framing for the ``SealObjectReply``.
Only processes of the raylet's own user are served (``SO_PEERCRED``), as only
they can write its object files. A worker that cannot reach the socket seals
over gRPC (sealing twice is harmless: the store keeps the first).

A writer that knows the store has room does not wait at all (:meth:`SealChannel.send`):
the length's top bit marks a request that wants no reply. Its seal is then on its
way while the writer goes on, so the raylet makes every lookup of an object it does
not hold wait for the seals already sent (:meth:`SealChannelServer.settle`): a seal
is always sent before anything that names the object can reach the raylet.

A writer's frees of objects on this node go the same way (:meth:`SealChannel.free`,
the length's second bit marks a ``FreeObjectsRequest``; never answered): they arrive
after the seals of their objects, and soon enough that the freed file is back in the
store's pool for the writer's next put.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import socket
import struct
import termios
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from tracedray import logs
from tracedray._proto.v1 import raylet_pb2
from tracedray.core.raylet.connection_server import ConnectionServer
from tracedray.exceptions import RaySystemError

log = logs.get_logger(__name__)

Seal = Callable[[raylet_pb2.SealObjectRequest], raylet_pb2.SealObjectReply]
Free = Callable[[raylet_pb2.FreeObjectsRequest], object]
_LENGTH = struct.Struct("!I")
_CREDENTIALS = struct.Struct("3i")  # struct ucred: pid, uid, gid
_MAX_FRAME = 1 << 20
_NO_REPLY = 1 << 31  # in the length prefix: the sender does not wait for a reply
_FREE = 1 << 30  # in the length prefix: a FreeObjectsRequest (never answered)
_FLAGS = _NO_REPLY | _FREE
MAX_FREE_IDS = 4096  # more in one release go over gRPC
_COUNT = struct.Struct("i")


def socket_name(object_path_prefix: str) -> bytes:
    """The abstract socket name of the raylet whose object files start with the prefix."""
    digest = hashlib.sha256(object_path_prefix.encode()).hexdigest()[:32]
    return b"\0tracedray-seal-" + digest.encode()


def peer_uid(sock: socket.socket) -> int:
    _pid, uid, _gid = _CREDENTIALS.unpack(
        sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _CREDENTIALS.size))
    return int(uid)


@dataclass(frozen=True)
class SealChannelStatistics:
    open_connections: int
    accepted_total: int
    refused_total: int  # connections from another user
    seals_total: int
    unanswered_total: int  # seals whose sender did not wait for the reply
    settles_total: int  # lookups that waited for the seals sent before them
    settle_timeouts_total: int
    frees_total: int  # free requests (each of one or more objects)


class SealChannelServer:
    """The raylet's end: answers each connection's seal requests in order."""

    def __init__(self, name: bytes, seal: Seal, *, free: Free | None = None,
                 settle_timeout_s: float = 10.0) -> None:
        self._seal = seal
        self._free = free
        self._settle_timeout_s = settle_timeout_s
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(name)
        listener.listen(128)
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        # Connection -> whether its thread is taking a request in; consuming bytes only
        # while it says so is what lets settle() see every seal sent before it.
        self._busy: dict[socket.socket, bool] = {}
        self._seals = self._unanswered = self._settles = self._settle_timeouts = 0
        self._frees = 0
        # Only its own user's processes: only they can write the raylet's object files.
        self._server = ConnectionServer(listener, self._serve, name="tracedray-seal-channel",
                                        admit=lambda sock: peer_uid(sock) == os.getuid())

    def close(self) -> None:
        self._server.close()

    def statistics(self) -> SealChannelStatistics:
        with self._lock:
            counts = (self._seals, self._unanswered, self._settles, self._settle_timeouts,
                      self._frees)
        return SealChannelStatistics(self._server.open_connections(), self._server.accepted,
                                     self._server.refused, *counts)

    def settle(self) -> bool:
        """Wait until every seal sent to this raylet before the call has been applied
        (what a lookup of an unknown object does first); ``False`` when that took longer
        than the timeout and the caller goes on without."""
        deadline = time.monotonic() + self._settle_timeout_s
        with self._lock:
            counted = False
            while any(busy or _unread(sock) for sock, busy in self._busy.items()):
                if not counted:
                    self._settles += 1
                    counted = True
                left = deadline - time.monotonic()
                if left <= 0:
                    self._settle_timeouts += 1
                    log.warning("seal channel settle timed out",
                                timeout_s=self._settle_timeout_s)
                    return False
                self._idle.wait(min(left, 0.05))
        return True

    def __repr__(self) -> str:
        s = self.statistics()
        return f"<SealChannelServer open={s.open_connections} seals={s.seals_total}>"

    def _serve(self, sock: socket.socket) -> None:
        with self._lock:
            self._busy[sock] = False
        try:
            while _wait_readable(sock):
                with self._lock:
                    self._busy[sock] = True
                try:
                    if (framed := _read_frame(sock)) is None:
                        return
                    frame, flags = framed
                    wants_reply = not flags
                    if flags & _FREE:
                        if self._free is not None:
                            self._free(raylet_pb2.FreeObjectsRequest.FromString(frame))
                        with self._lock:
                            self._frees += 1
                        continue
                    request = raylet_pb2.SealObjectRequest.FromString(frame)
                    reply = self._seal(request)
                    with self._lock:  # counted before the caller can see the reply
                        self._seals += 1
                        self._unanswered += not wants_reply
                finally:
                    with self._lock:
                        self._busy[sock] = False
                        self._idle.notify_all()
                if wants_reply:
                    _write_frame(sock, reply.SerializeToString())
        except (OSError, RaySystemError) as exc:
            log.debug("seal channel connection ended", error=str(exc))
        except Exception as exc:  # a malformed request: drop the connection, keep serving
            log.warning("seal channel request failed", error=repr(exc))
        finally:
            with self._lock:
                self._busy.pop(sock, None)
                self._idle.notify_all()


class SealChannel:
    """A worker's end: one connection, opened on first use, shared under a lock."""

    def __init__(self, name: bytes) -> None:
        self._name = name
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None
        self._answered = False  # a seal was answered on this connection

    def seal(self, request: raylet_pb2.SealObjectRequest) -> raylet_pb2.SealObjectReply:
        """Raises ``OSError`` or :class:`RaySystemError` when the raylet cannot be reached
        here (the caller seals over gRPC instead)."""
        with self._lock:
            return self._seal_locked(request)

    def _seal_locked(self, request: raylet_pb2.SealObjectRequest) -> raylet_pb2.SealObjectReply:
        sock = self._connected_locked()
        try:
            _write_frame(sock, request.SerializeToString())
            reply = _read_frame(sock)
            if reply is None:
                raise RaySystemError("the raylet closed the seal channel")
        except BaseException:
            self._close_locked()
            raise
        self._answered = True
        return raylet_pb2.SealObjectReply.FromString(reply[0])

    def send(self, request: raylet_pb2.SealObjectRequest) -> raylet_pb2.SealObjectReply | None:
        """Send the seal without waiting for it to be applied (``None``): once this returns,
        the raylet makes any lookup of the object wait for it. On a connection no seal was
        answered on yet, waits (and returns the reply): only once the raylet serves the
        connection can it see what waits there. Raises as :meth:`seal` does."""
        with self._lock:
            if not self._answered:
                return self._seal_locked(request)
            sock = self._connected_locked()
            try:
                _write_frame(sock, request.SerializeToString(), flags=_NO_REPLY)
            except BaseException:
                self._close_locked()
                raise
        return None

    def free(self, request: raylet_pb2.FreeObjectsRequest) -> None:
        """Send a free of objects on this node; never waits. Raises as :meth:`seal` does."""
        with self._lock:
            sock = self._connected_locked()
            try:
                _write_frame(sock, request.SerializeToString(), flags=_FREE | _NO_REPLY)
            except BaseException:
                self._close_locked()
                raise

    def _connected_locked(self) -> socket.socket:
        if self._sock is None:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
            try:
                sock.connect(self._name)
            except OSError:
                sock.close()
                raise
            self._sock = sock
        return self._sock

    def close(self) -> None:
        with self._lock:
            self._close_locked()

    def _close_locked(self) -> None:
        self._answered = False
        if self._sock is not None:
            self._sock.close()
            self._sock = None


def _write_frame(sock: socket.socket, payload: bytes, *, flags: int = 0) -> None:
    sock.sendall(_LENGTH.pack(len(payload) | flags) + payload)


def _read_frame(sock: socket.socket) -> tuple[bytes, int] | None:
    """(payload, its flags: 0 for a seal that waits for its reply); None at a clean end."""
    header = _recv_exactly(sock, _LENGTH.size)
    if header is None:
        return None
    (word,) = _LENGTH.unpack(header)
    length = word & ~_FLAGS
    if length > _MAX_FRAME:
        raise RaySystemError(f"a seal frame of {length} bytes is not a seal request")
    payload = _recv_exactly(sock, length)
    if payload is None:
        raise RaySystemError("the seal channel ended mid-frame")
    return payload, word & _FLAGS


def _wait_readable(sock: socket.socket) -> bool:
    """Block until ``sock`` has bytes (or its end) to read, without taking any."""
    try:
        return bool(sock.recv(1, socket.MSG_PEEK))
    except OSError:
        return False


def _unread(sock: socket.socket) -> bool:
    """Whether bytes wait in ``sock``'s receive queue (``FIONREAD``)."""
    try:
        return _COUNT.unpack(fcntl.ioctl(sock.fileno(), termios.FIONREAD, bytes(4)))[0] > 0
    except OSError:
        return False


def _recv_exactly(sock: socket.socket, count: int) -> bytes | None:
    """``count`` bytes; None at a clean end before the first byte."""
    data = sock.recv(count, socket.MSG_WAITALL) if count else b""
    if not data and count:
        return None
    while len(data) < count:
        more = sock.recv(count - len(data))
        if not more:
            raise RaySystemError(f"the seal channel ended after {len(data)} of {count} bytes")
        data += more
    return data
