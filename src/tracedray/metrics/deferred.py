"""A ``/metrics`` endpoint whose port is bound at start and whose exposition code loads
on the first scrape (the raylet's).

prometheus-client, with the ``http.server``, ``wsgiref`` and ``email`` modules it
imports and tracedray's collectors, is ~2.5 MB of a raylet's memory
(benchmarks/results/footprint-2026-11-27c), and a node nobody scrapes never uses it.
The socket is bound and listening at start, so the port is known for the node's
registration and a scraper's first connection waits in its backlog; a thread waits for
that connection without accepting it, then loads the exposition code, builds the
registry from the collectors' factories and serves on the same socket
(``exposition.adopt_socket``): every scrape gets what ``start_server`` would have
served. The OTLP export needs the registry at once, so it loads it at start.
"""

from __future__ import annotations

import errno
import select
import socket
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from tracedray import logs
from tracedray.exceptions import ConfigError

if TYPE_CHECKING:
    from prometheus_client.registry import Collector, CollectorRegistry

log = logs.get_logger(__name__)
# How often the waiting thread looks whether the endpoint was stopped (as socketserver's
# serve_forever does); a connection wakes it at once.
POLL_S = 0.5


class DeferredMetricsServer:
    """A listening endpoint: where it listens, and the collectors it will serve."""

    def __init__(self, sock: socket.socket, host: str) -> None:
        self.host = host
        self.port = int(sock.getsockname()[1])
        self._socket = sock
        self._lock = threading.Lock()
        self._factories: list[Callable[[], Collector]] = []
        self._registry: CollectorRegistry | None = None
        self._server: Any = None
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True,
                                        name="tracedray-metrics")
        self._thread.start()

    @property
    def loaded(self) -> bool:
        """Whether the exposition code was loaded (a scrape came, or ``registry`` was read)."""
        return self._registry is not None

    def add(self, make_collector: Callable[[], Collector]) -> None:
        """Serve the collector ``make_collector`` builds (called when the code loads)."""
        with self._lock:
            if self._registry is None:
                self._factories.append(make_collector)
                return
            registry = self._registry
        registry.register(make_collector())

    @property
    def registry(self) -> CollectorRegistry:
        """The registry the collectors joined, loading the exposition code now if needed."""
        with self._lock:
            if self._registry is None:
                from prometheus_client.registry import CollectorRegistry

                registry = CollectorRegistry(auto_describe=False)
                for make_collector in self._factories:
                    registry.register(make_collector())
                self._factories.clear()
                self._registry = registry
            return self._registry

    def stop(self) -> None:
        self._stopped.set()
        if self._server is not None:
            self._server.shutdown()
        self._thread.join(timeout=2 * POLL_S)
        self._socket.close()

    def _serve(self) -> None:
        try:
            while not self._stopped.is_set():
                readable, _, _ = select.select([self._socket], [], [], POLL_S)
                if readable:
                    break
            else:
                return
            from tracedray.metrics.exposition import adopt_socket

            self._server = adopt_socket(self._socket, self.registry)
            if not self._stopped.is_set():
                self._server.serve_forever()
        except Exception as exc:  # noqa: BLE001 - metrics never take the node down
            log.warning("metrics.serve_failed", address=f"{self.host}:{self.port}",
                        error=f"{type(exc).__name__}: {exc}")
            self._socket.close()  # scrapers are refused, not left waiting in the backlog


def open_deferred(host: str, port: int) -> DeferredMetricsServer:
    """Listen on ``host:port`` (0: a free port). Raises ConfigError as
    ``exposition.start_server`` does when the port cannot be bound."""
    # The address family for the host, as prometheus-client's server picks it.
    family, _, _, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                                  flags=socket.AI_PASSIVE)[0]
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        # As socketserver.TCPServer's allow_reuse_address (http.server sets it).
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(5)  # socketserver's request_queue_size
    except OSError as exc:
        sock.close()
        taken = exc.errno == errno.EADDRINUSE
        raise ConfigError(
            f"cannot serve metrics on {host}:{port}: "
            f"{'the port is in use' if taken else exc.strerror or exc}; pass another "
            f"--metrics-export-port (0 picks a free one)") from exc
    return DeferredMetricsServer(sock, host)
