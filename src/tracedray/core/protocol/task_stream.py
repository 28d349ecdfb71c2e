"""The task stream's wire format: length-prefixed protobuf frames over plain TCP.

A caller sends tasks to a worker and reads results back on one TCP connection
(``connection.WorkerConnection`` on the caller, ``task_stream_server`` on the
worker). It is not gRPC on purpose: grpcio hands every message across threads
(request iterator, channel poller, handler thread), each handoff a GIL round
trip, and together they were most of an empty actor call's cost. Here the thread
that has a frame writes it, and the thread that reads a frame acts on it
(benchmarks/results/history/architecture-notebook.md has the measurements).

A frame is a 4-byte big-endian payload length, then the payload: a serialized
``TaskBatch`` (caller to worker) or ``ResultBatch`` (worker to caller). Both are
``repeated <message> = 1``, so one task or result is encoded as that field
directly (tag, varint length, message bytes) without copying it into a batch,
and a receiver may find several in one payload.

The caller's first frame is a handshake holding the cluster's token
(``auth.handshake_payload``); the worker reads it before anything else and closes
a connection whose handshake is missing or wrong without reading further. One
handshake per stream: the frames after it cost nothing more.
"""

from __future__ import annotations

import errno
import socket
import struct
import time
from typing import cast

from tracedray._proto.v1 import common_pb2
from tracedray.core import auth, rpc, tls
from tracedray.core.protocol.tls_stream import LockedTlsSocket
from tracedray.core.protocol.wire import varint
from tracedray.exceptions import RaySystemError

_HEADER = struct.Struct(">I")
HEADER_BYTES = _HEADER.size
# The same ceiling as a gRPC message: inline values are far below it (large ones
# travel through the object store), so only a corrupt stream gets near it.
MAX_FRAME_BYTES = rpc.MAX_MESSAGE_BYTES
_FIELD_1_BYTES = b"\x0a"  # field 1, wire type 2 (length-delimited)
_INITIAL_READ_BUFFER = 256 * 1024
_SOCKET_BUFFER_BYTES = 1024 * 1024


class ProtocolError(RaySystemError):
    """The peer sent something that is not a task-stream frame."""


def frame(payload: bytes) -> bytes:
    """``payload`` with its length header."""
    if len(payload) > MAX_FRAME_BYTES:
        raise RaySystemError(f"a task-stream frame of {len(payload)} bytes exceeds the "
                             f"{MAX_FRAME_BYTES}-byte limit")
    return _HEADER.pack(len(payload)) + payload


def one_item_frame(message: common_pb2.TaskSpec | common_pb2.TaskResult) -> bytes:
    """A frame whose payload is a ``TaskBatch`` / ``ResultBatch`` holding ``message``."""
    body = message.SerializeToString()
    return frame(_FIELD_1_BYTES + varint(len(body)) + body)


def handshake_frame(token: str | None) -> bytes:
    return frame(auth.handshake_payload(token))


def read_handshake(sock: socket.socket, timeout_s: float) -> bytes | None:
    """The payload of the stream's first frame, if it is a plausible handshake that
    arrives within ``timeout_s``; None otherwise (a caller that skips it, stalls, or
    claims a large frame is read no further). Restores the socket to blocking."""
    deadline = time.monotonic() + timeout_s
    received = bytearray()
    needed = HEADER_BYTES
    try:
        while len(received) < needed:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            sock.settimeout(remaining)
            chunk = sock.recv(needed - len(received))
            if not chunk:
                return None
            received += chunk
            if needed == HEADER_BYTES and len(received) == HEADER_BYTES:
                (length,) = _HEADER.unpack_from(received)
                if length > auth.MAX_HANDSHAKE_BYTES:
                    return None
                needed += length
    except OSError:  # a timeout, or the caller went away
        return None
    finally:
        sock.settimeout(None)
    return bytes(received[HEADER_BYTES:])


def is_tls(sock: socket.socket) -> bool:
    return isinstance(sock, LockedTlsSocket)


def shutdown(sock: socket.socket, how: int) -> None:
    """Shut the TCP connection's ``how`` side (of a TLS stream too: the peer sees a
    clean end of the stream either way)."""
    sock.shutdown(how)


def _as_socket(tls_socket: LockedTlsSocket) -> socket.socket:
    # It has every socket method a task stream calls (tls_stream.py); the stream code
    # stays typed for the plain socket it uses without TLS.
    return cast(socket.socket, tls_socket)


def wrap_client(sock: socket.socket, ip: str) -> socket.socket:
    """``sock`` in TLS if ``TRACEDRAY_TLS_*`` configure it (handshake done), else itself."""
    files = tls.from_config()
    if files is None:
        return sock
    wrapped = tls.stream_client_context(files).wrap_socket(sock, server_hostname=ip)
    return _as_socket(LockedTlsSocket(wrapped))


def wrap_server(sock: socket.socket, timeout_s: float) -> socket.socket | None:
    """The server's side of :func:`wrap_client`; None if the TLS handshake fails."""
    try:
        files = tls.from_config()  # a bad setting: ConfigError (a ValueError), refused
        if files is None:
            return sock
        sock.settimeout(timeout_s)
        wrapped = tls.stream_server_context(files).wrap_socket(sock, server_side=True)
        return _as_socket(LockedTlsSocket(wrapped))
    except (OSError, ValueError):  # ssl.SSLError is an OSError
        return None


def tune(sock: socket.socket) -> None:
    """No Nagle delay (a frame is a whole request), roomy kernel buffers."""
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, _SOCKET_BUFFER_BYTES)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, _SOCKET_BUFFER_BYTES)


def describe_os_error(exc: OSError) -> str:
    """A short reason for a socket error, for messages read by users."""
    if exc.errno == errno.ECONNREFUSED:
        return "connection refused (nothing listens there: the process is gone)"
    if exc.errno in (errno.ECONNRESET, errno.EPIPE):
        return "connection reset (the peer process died or closed it)"
    if isinstance(exc, TimeoutError):
        return "timed out connecting"
    return exc.strerror or repr(exc)


class FrameReader:
    """Reads whole frames from a blocking socket into one reusable buffer."""

    def __init__(self, sock: socket.socket, initial_bytes: int = _INITIAL_READ_BUFFER) -> None:
        self._sock = sock
        self._buf = bytearray(initial_bytes)
        self._view = memoryview(self._buf)
        self._start = 0  # first unconsumed byte
        self._end = 0  # end of received bytes

    def read(self) -> list[memoryview] | None:
        """Block until at least one whole frame is buffered; return every whole frame's
        payload (views valid until the next call), or None at a clean end of stream.

        Raises ``OSError`` from the socket, ``ProtocolError`` for a bad length or a
        stream that ends inside a frame.
        """
        while True:
            payloads = self._whole_frames()
            if payloads:
                return payloads
            self._make_room(self._bytes_needed())
            received = self._sock.recv_into(self._view[self._end:])
            if received == 0:
                if self._end > self._start:
                    raise ProtocolError(f"the stream ended inside a frame "
                                        f"({self._end - self._start} bytes of it received)")
                return None
            self._end += received

    def _whole_frames(self) -> list[memoryview]:
        payloads = []
        start, end, view = self._start, self._end, self._view
        while end - start >= HEADER_BYTES:
            (length,) = _HEADER.unpack_from(self._buf, start)
            if length > MAX_FRAME_BYTES:
                raise ProtocolError(f"a frame claims {length} bytes (limit {MAX_FRAME_BYTES}): "
                                    "not a tracedray task stream")
            if end - start - HEADER_BYTES < length:
                break
            payloads.append(view[start + HEADER_BYTES:start + HEADER_BYTES + length])
            start += HEADER_BYTES + length
        self._start = start
        return payloads

    def _bytes_needed(self) -> int:
        """Bytes from ``_start`` that the next whole frame occupies (its header at least)."""
        if self._end - self._start < HEADER_BYTES:
            return HEADER_BYTES
        (length,) = _HEADER.unpack_from(self._buf, self._start)
        return HEADER_BYTES + length

    def _make_room(self, needed: int) -> None:
        """Move the partial frame to the front, growing the buffer if it cannot hold it."""
        pending = self._end - self._start
        if needed > len(self._buf):
            grown = bytearray(max(needed, 2 * len(self._buf)))
            grown[:pending] = self._view[self._start:self._end]
            # The old buffer lives on while payload views of the last read point into it.
            self._buf, self._view = grown, memoryview(grown)
        elif self._start and (pending == 0 or len(self._buf) - self._start < needed):
            self._buf[:pending] = self._buf[self._start:self._end]
        else:
            return
        self._start, self._end = 0, pending
