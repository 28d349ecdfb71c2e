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
"""

from __future__ import annotations

import hashlib
import os
import socket
import struct
import threading
from collections.abc import Callable
from dataclasses import dataclass

from tracedray import logs
from tracedray.core.raylet.connection_server import ConnectionServer
from tracedray.exceptions import RaySystemError
from tracedray.v1 import raylet_pb2

log = logs.get_logger(__name__)

Seal = Callable[[raylet_pb2.SealObjectRequest], raylet_pb2.SealObjectReply]
_LENGTH = struct.Struct("!I")
_CREDENTIALS = struct.Struct("3i")  # struct ucred: pid, uid, gid
_MAX_FRAME = 1 << 20


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


class SealChannelServer:
    """The raylet's end: answers each connection's seal requests in order."""

    def __init__(self, name: bytes, seal: Seal) -> None:
        self._seal = seal
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(name)
        listener.listen(128)
        self._lock = threading.Lock()
        self._seals = 0
        # Only its own user's processes: only they can write the raylet's object files.
        self._server = ConnectionServer(listener, self._serve, name="tracedray-seal-channel",
                                        admit=lambda sock: peer_uid(sock) == os.getuid())

    def close(self) -> None:
        self._server.close()

    def statistics(self) -> SealChannelStatistics:
        with self._lock:
            seals = self._seals
        return SealChannelStatistics(self._server.open_connections(), self._server.accepted,
                                     self._server.refused, seals)

    def __repr__(self) -> str:
        s = self.statistics()
        return f"<SealChannelServer open={s.open_connections} seals={s.seals_total}>"

    def _serve(self, sock: socket.socket) -> None:
        try:
            while (frame := _read_frame(sock)) is not None:
                request = raylet_pb2.SealObjectRequest.FromString(frame)
                reply = self._seal(request)
                with self._lock:  # counted before the caller can see the reply
                    self._seals += 1
                _write_frame(sock, reply.SerializeToString())
        except (OSError, RaySystemError) as exc:
            log.debug("seal channel connection ended", error=str(exc))
        except Exception as exc:  # a malformed request: drop the connection, keep serving
            log.warning("seal channel request failed", error=repr(exc))


class SealChannel:
    """A worker's end: one connection, opened on first use, shared under a lock."""

    def __init__(self, name: bytes) -> None:
        self._name = name
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None

    def seal(self, request: raylet_pb2.SealObjectRequest) -> raylet_pb2.SealObjectReply:
        """Raises ``OSError`` or :class:`RaySystemError` when the raylet cannot be reached
        here (the caller seals over gRPC instead)."""
        frame = request.SerializeToString()
        with self._lock:
            if self._sock is None:
                sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
                try:
                    sock.connect(self._name)
                except OSError:
                    sock.close()
                    raise
                self._sock = sock
            try:
                _write_frame(self._sock, frame)
                reply = _read_frame(self._sock)
                if reply is None:
                    raise RaySystemError("the raylet closed the seal channel")
            except BaseException:
                self._close_locked()
                raise
        return raylet_pb2.SealObjectReply.FromString(reply)

    def close(self) -> None:
        with self._lock:
            self._close_locked()

    def _close_locked(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None


def _write_frame(sock: socket.socket, payload: bytes) -> None:
    sock.sendall(_LENGTH.pack(len(payload)) + payload)


def _read_frame(sock: socket.socket) -> bytes | None:
    header = _recv_exactly(sock, _LENGTH.size)
    if header is None:
        return None
    (length,) = _LENGTH.unpack(header)
    if length > _MAX_FRAME:
        raise RaySystemError(f"a seal frame of {length} bytes is not a seal request")
    payload = _recv_exactly(sock, length)
    if payload is None:
        raise RaySystemError("the seal channel ended mid-frame")
    return payload


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
