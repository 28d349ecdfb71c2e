"""Starting a component's metrics: the endpoint first (its port goes into the node's
registration), then the collectors over the built component."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from tracedray import config, logs
from tracedray.core.process import process_alive
from tracedray.metrics import otlp, rpc_latency
from tracedray.metrics.discovery import DiscoveryWriter, Target
from tracedray.metrics.exposition import MetricsServer, SafeCollector, start_server
from tracedray.metrics.snapshot import METRICS_DIR, SnapshotReader

if TYPE_CHECKING:
    from tracedray.core.gcs.server import Gcs
    from tracedray.core.raylet.server import Raylet

log = logs.get_logger(__name__)


def open_endpoint(host: str, port: int | None) -> MetricsServer | None:
    """Serve ``/metrics`` on ``host:port`` (None: ``TRACEDRAY_METRICS_EXPORT_PORT``, 0: a
    free port), and time this process's RPC servers. None when metrics are off
    (``TRACEDRAY_METRICS=false``). Raises ConfigError when the port cannot be bound."""
    if not config.METRICS_ENABLED.get():
        return None
    server = start_server(host, config.METRICS_EXPORT_PORT.get() if port is None else port)
    rpc_latency.install()
    return server


def attach_raylet(server: MetricsServer, raylet: Raylet) -> None:
    from tracedray.metrics.node_metrics import NodeCollector

    reader = SnapshotReader(raylet.session_dir / METRICS_DIR / raylet.node_id, process_alive)
    collector = NodeCollector(raylet, reader, rpc_latency.install())
    server.register(SafeCollector("raylet", collector.collect))
    otlp.start(server.registry, "raylet", raylet.node_id, raylet.session_dir.name)
    log.info("metrics.serving", component="raylet", address=f"{server.host}:{server.port}")


def attach_gcs(server: MetricsServer, gcs: Gcs, session_dir: Path) -> DiscoveryWriter:
    """Collect the GCS's metrics, and keep ``prometheus_sd.json`` up to date."""
    from tracedray.metrics.gcs_metrics import GcsCollector

    collector = GcsCollector(gcs, rpc_latency.install())
    server.register(SafeCollector("gcs", collector.collect))
    writer = DiscoveryWriter(session_dir, gcs.node_list,
                             lambda: Target(server.host, server.port, collector.node_id(),
                                            "gcs"))
    writer.update()
    writer.start()
    otlp.start(server.registry, "gcs", "", session_dir.name)
    log.info("metrics.serving", component="gcs", address=f"{server.host}:{server.port}",
             discovery=str(writer.path))
    return writer
