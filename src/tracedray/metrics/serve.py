"""Starting a component's metrics: the endpoint first (its port goes into the node's
registration), then the component's collector (``core/raylet/metrics.py``,
``core/gcs/metrics.py``) over the built component."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from prometheus_client.core import Metric

from tracedray import config, logs
from tracedray.metrics import otlp, rpc_latency
from tracedray.metrics.exposition import MetricsServer, SafeCollector, start_server

log = logs.get_logger(__name__)


def open_endpoint(host: str, port: int | None,
                  add_server_interceptor: Callable[[Any], None]) -> MetricsServer | None:
    """Serve ``/metrics`` on ``host:port`` (None: ``TRACEDRAY_METRICS_EXPORT_PORT``, 0: a
    free port), and time this process's RPC servers (``add_server_interceptor``: the
    core's ``rpc.add_server_interceptor``). None when metrics are off
    (``TRACEDRAY_METRICS=false``). Raises ConfigError when the port cannot be bound."""
    if not config.METRICS_ENABLED.get():
        return None
    server = start_server(host, config.METRICS_EXPORT_PORT.get() if port is None else port)
    rpc_latency.install(add_server_interceptor)
    return server


def attach(server: MetricsServer, component: str, collect: Callable[[], Iterable[Metric]],
           *, node_id: str, session_name: str, **fields: str) -> None:
    """Serve ``collect``'s metrics on ``server`` and export them by OTLP when configured."""
    server.register(SafeCollector(component, collect))
    otlp.start(server.registry, component, node_id, session_name)
    log.info("metrics.serving", component=component, address=f"{server.host}:{server.port}",
             **fields)
