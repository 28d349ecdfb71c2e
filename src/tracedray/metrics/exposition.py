"""The ``/metrics`` HTTP endpoint of a raylet or the GCS (prometheus-client's server:
Prometheus text 0.0.4, or OpenMetrics when the scraper asks for it in ``Accept``), and
the conversion of merged snapshot families into prometheus-client metric families."""

from __future__ import annotations

import errno
import socket
import threading
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector, CollectorRegistry

from tracedray import logs
from tracedray.exceptions import ConfigError
from tracedray.metrics.snapshot import COUNTER, GAUGE, Family, cumulative

log = logs.get_logger(__name__)


@dataclass
class MetricsServer:
    """A running endpoint: where it listens, and the registry its collectors join."""

    host: str
    port: int
    registry: CollectorRegistry
    _server: Any
    _thread: threading.Thread

    def register(self, collector: Collector) -> None:
        self.registry.register(collector)

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def start_server(host: str, port: int) -> MetricsServer:
    """Serve an empty registry on ``host:port`` (0: a free port); collectors join later,
    so the port is known before the component that they read is built."""
    from prometheus_client import start_http_server

    registry = CollectorRegistry(auto_describe=False)
    try:
        server, thread = start_http_server(port, addr=host, registry=registry)
    except OSError as exc:
        taken = exc.errno == errno.EADDRINUSE
        raise ConfigError(
            f"cannot serve metrics on {host}:{port}: "
            f"{'the port is in use' if taken else exc.strerror or exc}; pass another "
            f"--metrics-export-port (0 picks a free one)") from exc
    return MetricsServer(host, int(server.server_port), registry, server, thread)


def adopt_socket(sock: socket.socket, registry: CollectorRegistry) -> Any:
    """prometheus-client's server (as ``start_server`` runs it: its WSGI app, a thread
    per request, no request log) on ``sock``, already bound and listening
    (``deferred.py``); the caller runs its ``serve_forever``."""
    from wsgiref.simple_server import WSGIRequestHandler

    from prometheus_client.exposition import ThreadingWSGIServer, make_wsgi_app

    class Handler(WSGIRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            """Log nothing (prometheus-client's server logs no request either)."""

    class AdoptingServer(ThreadingWSGIServer):
        def server_bind(self) -> None:
            # http.server's and wsgiref's server_bind without the bind: the socket is.
            self.server_address = self.socket.getsockname()
            host, port = self.server_address[:2]
            self.server_name = socket.getfqdn(str(host))
            self.server_port = port
            self.setup_environ()

    server = AdoptingServer(sock.getsockname()[:2], Handler, bind_and_activate=False)
    server.socket.close()  # the one it made; it serves on ``sock``
    server.socket = sock
    server.address_family = sock.family
    server.server_bind()
    server.set_app(make_wsgi_app(registry))
    return server


def to_prometheus(families: Iterable[Family],
                  const_labels: Mapping[str, str]) -> Iterator[Metric]:
    """Snapshot families as prometheus-client families, each series with
    ``const_labels`` (``node_id``) added before its own labels."""
    extra_names = list(const_labels)
    extra_values = list(const_labels.values())
    for family in families:
        names = extra_names + [n for n in family.label_names if n not in const_labels]
        metric: Metric
        if family.kind == COUNTER:
            name = family.name[:-6] if family.name.endswith("_total") else family.name
            metric = CounterMetricFamily(name, family.help, labels=names)
            for labels, series in family.series.items():
                metric.add_metric(extra_values + list(labels), series.value)
        elif family.kind == GAUGE:
            metric = GaugeMetricFamily(family.name, family.help, labels=names)
            for labels, series in family.series.items():
                metric.add_metric(extra_values + list(labels), series.value)
        else:
            metric = HistogramMetricFamily(family.name, family.help, labels=names)
            bounds = [_bound(b) for b in family.boundaries] + ["+Inf"]
            for labels, series in family.series.items():
                if len(series.buckets) != len(bounds):
                    continue
                metric.add_metric(extra_values + list(labels),
                                  list(zip(bounds, cumulative(series.buckets), strict=True)),
                                  series.sum)
        yield metric


def _bound(value: float) -> str:
    return repr(float(value))


class SafeCollector:
    """A collector whose failure costs its families, not the scrape: telemetry never
    breaks the runtime, and one bad source must not hide the others."""

    def __init__(self, name: str, collect: Any) -> None:
        self._name = name
        self._collect = collect
        self.failures = 0

    def collect(self) -> Iterator[Metric]:
        try:
            metrics = list(self._collect())
        except Exception as exc:  # noqa: BLE001 - a scrape must answer with the rest
            self.failures += 1
            log.warning("metrics.collect_failed", collector=self._name,
                        error=f"{type(exc).__name__}: {exc}")
            return iter(())
        return iter(metrics)


def gauge(name: str, help: str, labels: list[str], values: list[str],
          value: float) -> GaugeMetricFamily:
    """One gauge family holding one series."""
    family = GaugeMetricFamily(name, help, labels=labels)
    family.add_metric(values, value)
    return family


def counter(name: str, help: str, labels: list[str], values: list[str],
            value: float) -> CounterMetricFamily:
    """One counter family holding one series (``name`` without ``_total``)."""
    family = CounterMetricFamily(name, help, labels=labels)
    family.add_metric(values, value)
    return family
