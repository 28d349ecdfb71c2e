"""Starting a component's metrics: the endpoint first (its port goes into the node's
registration), then the component's collector (``core/raylet/metrics.py``,
``core/gcs/metrics.py``) over the built component.

The GCS serves at once (``open_endpoint``, ``attach``); the raylet binds its port at start
and loads the exposition code on the first scrape (``open_deferred_endpoint``,
``attach_deferred``; ``deferred.py``). This module imports no prometheus-client itself,
so that a raylet nobody scrapes never does."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from tracedray import config, logs
from tracedray.metrics import otlp, rpc_latency
from tracedray.metrics.deferred import DeferredMetricsServer, open_deferred

if TYPE_CHECKING:
    from prometheus_client.core import Metric

    from tracedray.metrics.exposition import MetricsServer

log = logs.get_logger(__name__)


def open_endpoint(host: str, port: int | None,
                  add_server_interceptor: Callable[[Any], None]) -> MetricsServer | None:
    """Serve ``/metrics`` on ``host:port`` (None: ``TRACEDRAY_METRICS_EXPORT_PORT``, 0: a
    free port), and time this process's RPC servers (``add_server_interceptor``: the
    core's ``rpc.add_server_interceptor``). None when metrics are off
    (``TRACEDRAY_METRICS=false``). Raises ConfigError when the port cannot be bound."""
    from tracedray.metrics.exposition import start_server

    if not config.METRICS_ENABLED.get():
        return None
    server = start_server(host, config.METRICS_EXPORT_PORT.get() if port is None else port)
    rpc_latency.install(add_server_interceptor)
    return server


def attach(server: MetricsServer, component: str, collect: Callable[[], Iterable[Metric]],
           *, node_id: str, session_name: str, **fields: str) -> None:
    """Serve ``collect``'s metrics on ``server`` and export them by OTLP when configured."""
    from tracedray.metrics.exposition import SafeCollector

    server.register(SafeCollector(component, collect))
    otlp.start(server.registry, component, node_id, session_name)
    log.info("metrics.serving", component=component, address=f"{server.host}:{server.port}",
             **fields)


def open_deferred_endpoint(host: str, port: int | None,
                           add_server_interceptor: Callable[[Any], None],
                           ) -> DeferredMetricsServer | None:
    """As :func:`open_endpoint`, the exposition code loading on the first scrape."""
    if not config.METRICS_ENABLED.get():
        return None
    server = open_deferred(host, config.METRICS_EXPORT_PORT.get() if port is None else port)
    rpc_latency.install(add_server_interceptor)
    return server


def attach_deferred(server: DeferredMetricsServer, component: str,
                    make_collect: Callable[[], Callable[[], Iterable[Metric]]],
                    *, node_id: str, session_name: str, **fields: str) -> None:
    """As :func:`attach`; ``make_collect`` (which may import the component's collector
    module) is called when the exposition code loads: on the first scrape, or now when
    the metrics go by OTLP too."""

    def make_collector() -> Any:
        from tracedray.metrics.exposition import SafeCollector

        return SafeCollector(component, make_collect())

    server.add(make_collector)
    if otlp.wanted(os.environ):
        otlp.start(server.registry, component, node_id, session_name)
    log.info("metrics.serving", component=component, address=f"{server.host}:{server.port}",
             **fields)
