"""``prometheus_sd.json`` in the session folder: every alive node's and the GCS's
metrics endpoint, in Prometheus ``file_sd`` format, so that a Prometheus pointed at the
file (deploy/prometheus.yml) scrapes the whole cluster as nodes join and die.

The GCS knows the nodes and their ``metrics_export_port`` (registered with each node);
a thread of its looks every ``INTERVAL_S`` and rewrites the file (aside, then renamed:
Prometheus never reads half of it) when the targets changed.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tracedray import logs

SD_FILE = "prometheus_sd.json"
INTERVAL_S = 0.5
log = logs.get_logger(__name__)


@dataclass(frozen=True)
class Target:
    host: str
    port: int
    node_id: str
    component: str  # "raylet" | "gcs"


def file_sd(targets: Iterable[Target], session: str) -> list[dict[str, Any]]:
    """The file_sd document: one group per target, so each carries its own labels (pure)."""
    return [{"targets": [f"{t.host}:{t.port}"],
             "labels": {"node_id": t.node_id, "ip": t.host, "session": session,
                        "component": t.component}}
            for t in sorted(targets, key=lambda t: (t.component != "gcs", t.node_id))
            if t.port > 0]


def node_targets(nodes: Iterable[Any]) -> list[Target]:
    """The alive nodes' endpoints, from the GCS's ``NodeWithLoad`` entries (pure)."""
    return [Target(n.info.raylet.ip, n.info.metrics_export_port, n.info.node_id, "raylet")
            for n in nodes if n.info.state == "ALIVE" and n.info.metrics_export_port > 0]


def write_atomically(path: Path, document: list[dict[str, Any]]) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(document, indent=1) + "\n")
    tmp.replace(path)


class DiscoveryWriter:
    """The GCS's thread that keeps the file in step with the alive nodes."""

    def __init__(self, session_dir: Path, nodes: Callable[[], list[Any]],
                 gcs: Callable[[], Target]) -> None:
        self.path = session_dir / SD_FILE
        self._session = session_dir.name
        self._nodes = nodes
        self._gcs = gcs
        self._stopped = threading.Event()
        # update() and close() one at a time: no update lands after close's empty file.
        self._lock = threading.Lock()
        self._written: list[dict[str, Any]] | None = None
        self._writes = 0
        self._failures = 0

    def update(self) -> bool:
        """Rewrite the file if its targets changed; never raises."""
        with self._lock:
            return False if self._stopped.is_set() else self._update()

    def _update(self) -> bool:
        try:
            document = file_sd([self._gcs(), *node_targets(self._nodes())], self._session)
            if document == self._written:
                return False
            write_atomically(self.path, document)
        except Exception as exc:  # noqa: BLE001 - discovery must not break the GCS
            self._failures += 1
            if self._failures == 1:
                log.warning("metrics.discovery_failed", path=str(self.path),
                            error=f"{type(exc).__name__}: {exc}")
            return False
        self._written = document
        self._writes += 1
        return True

    def start(self) -> None:
        threading.Thread(target=self._run, daemon=True, name="tracedray-metrics-sd").start()

    def stop(self) -> None:
        self._stopped.set()

    def close(self) -> None:
        """Stop, and leave the file with no target (the cluster is stopping)."""
        with self._lock:
            self.stop()
            try:
                write_atomically(self.path, [])
            except OSError as exc:
                log.warning("metrics.discovery_failed", path=str(self.path), error=str(exc))

    def _run(self) -> None:
        while not self._stopped.is_set():
            self.update()
            self._stopped.wait(INTERVAL_S)

    def statistics(self) -> dict[str, int]:
        return {"writes": self._writes, "failures": self._failures}
