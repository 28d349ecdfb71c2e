"""A listening socket served one thread per connection, and closed whole.

The raylet's plain-socket servers (the object data port, the seal channel) share this
shape: an accept loop that admits a connection (or refuses it), a thread that serves it
until it ends, and a close that wakes every blocked ``accept``/``recv``.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Callable


class ConnectionServer:
    """Accepts on ``listener``; ``serve(sock)`` runs on a thread of its own per admitted
    connection, which is closed when it returns. ``admit`` refuses a connection (closed
    at once, counted in ``refused``)."""

    def __init__(self, listener: socket.socket, serve: Callable[[socket.socket], None], *,
                 name: str, admit: Callable[[socket.socket], bool] = lambda sock: True) -> None:
        self._listener = listener
        self._serve = serve
        self._admit = admit
        self._name = name
        self._lock = threading.Lock()
        self._connections: set[socket.socket] = set()
        self._closed = False
        self.accepted = self.refused = 0
        self._thread = threading.Thread(target=self._accept_loop, daemon=True, name=name)
        self._thread.start()

    def open_connections(self) -> int:
        with self._lock:
            return len(self._connections)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            connections = list(self._connections)
        for sock in [self._listener, *connections]:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)  # wakes accept() and recv()
        self._listener.close()
        self._thread.join(5)

    def _accept_loop(self) -> None:
        while True:
            try:
                sock, _ = self._listener.accept()
            except OSError:
                return  # closed
            admitted = self._admit(sock)
            with self._lock:
                if self._closed or not admitted:
                    self.refused += not admitted
                    sock.close()
                    if self._closed:
                        return
                    continue
                self._connections.add(sock)
                self.accepted += 1
            threading.Thread(target=self._run, args=(sock,), daemon=True,
                             name=f"{self._name}-conn").start()

    def _run(self, sock: socket.socket) -> None:
        try:
            self._serve(sock)
        finally:
            with self._lock:
                self._connections.discard(sock)
            sock.close()
