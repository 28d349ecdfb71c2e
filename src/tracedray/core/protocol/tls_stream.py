"""A TLS socket that a task stream's reader and writer threads may use at once.

Both ends of a task stream read on one thread and write on another. An OpenSSL
connection must not be used by two threads at a time (tried: records get mixed
up, the peer answers with a decode-error alert). Here every TLS call happens
under one lock on a non-blocking socket, and waiting for the network happens
outside it (``poll``), so a reader blocked on an idle stream never holds up a
writer. Only used when ``TRACEDRAY_TLS_*`` turn TLS on; plain TCP is untouched.
"""

from __future__ import annotations

import errno
import select
import socket
import ssl
import threading
import time
from typing import Any


class LockedTlsSocket:
    def __init__(self, sock: ssl.SSLSocket) -> None:
        sock.setblocking(False)
        self._sock = sock
        self._lock = threading.Lock()
        self._timeout: float | None = None  # of recv, as settimeout() gives it

    # --- the socket calls the task stream makes
    def settimeout(self, timeout: float | None) -> None:
        self._timeout = timeout

    def recv_into(self, buffer: Any, nbytes: int = 0) -> int:
        return int(self._call(lambda: self._sock.recv_into(buffer, nbytes), self._timeout))

    def recv(self, size: int) -> bytes:
        return bytes(self._call(lambda: self._sock.recv(size), self._timeout))

    def sendall(self, data: bytes | memoryview) -> None:
        view = memoryview(data).cast("B")
        while view:
            # A write that must wait is retried with the same bytes, as OpenSSL wants.
            sent = int(self._call(lambda chunk=view: self._sock.send(chunk), None))
            view = view[sent:]

    def shutdown(self, how: int) -> None:
        # The TCP side only: SSLSocket.shutdown would drop TLS for reads still to come.
        socket.socket.shutdown(self._sock, how)

    def close(self) -> None:
        self._sock.close()

    def fileno(self) -> int:
        return self._sock.fileno()

    def setsockopt(self, level: int, option: int, value: int) -> None:
        self._sock.setsockopt(level, option, value)

    # --- one TLS call under the lock, the waiting outside it
    def _call(self, operation: Any, timeout: float | None) -> Any:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            with self._lock:
                try:
                    return operation()
                except ssl.SSLWantReadError:
                    events = select.POLLIN
                except ssl.SSLWantWriteError:
                    events = select.POLLOUT
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                raise TimeoutError("timed out")
            fd = self._sock.fileno()
            if fd < 0:  # closed by the other thread meanwhile
                raise OSError(errno.EBADF, "the task stream was closed")
            poller = select.poll()
            poller.register(fd, events)
            poller.poll(None if remaining is None else max(1, int(remaining * 1000)))
