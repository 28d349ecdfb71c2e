"""The same metrics over OTLP, with ``OTEL_METRICS_EXPORTER=otlp``.

An OpenTelemetry SDK ``MeterProvider`` whose periodic reader exports to the endpoint of
the standard variables (``OTEL_EXPORTER_OTLP_[METRICS_]ENDPOINT``, ``..._PROTOCOL``,
``OTEL_METRIC_EXPORT_INTERVAL``, ...: the SDK's exporter reads them), with one
observable instrument per family of the component's Prometheus registry: each export
reads the very collectors a scrape reads (one collection shared by every instrument of
an export), so Prometheus and OTLP show the same numbers. Counters become observable
counters (cumulative), gauges observable gauges; a histogram's ``_bucket`` (with its
``le``), ``_count`` and ``_sum`` series go as observable counters, since OpenTelemetry
has no observable histogram.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from tracedray import logs
from tracedray.telemetry.export_config import GRPC, OTLP

if TYPE_CHECKING:  # the registry is handed in: a raylet loads it on its first scrape
    from prometheus_client.registry import CollectorRegistry

log = logs.get_logger(__name__)
DISCOVER_EVERY_S = 5.0
# One registry collection serves every instrument's callback of one export.
_SHARED_FOR_S = 1.0


def wanted(environ: Mapping[str, str]) -> bool:
    """Whether ``OTEL_METRICS_EXPORTER`` asks for OTLP (pure; unset: no)."""
    names = [n.strip().lower() for n in environ.get("OTEL_METRICS_EXPORTER", "").split(",")]
    return OTLP in names


def protocol(environ: Mapping[str, str]) -> str:
    return (environ.get("OTEL_EXPORTER_OTLP_METRICS_PROTOCOL")
            or environ.get("OTEL_EXPORTER_OTLP_PROTOCOL") or GRPC).strip()


def instruments_of(family_type: str, name: str) -> list[tuple[str, str, str]]:
    """(instrument name, kind, the sample suffix it reads) for a Prometheus family (pure):
    kind is ``counter`` or ``gauge``."""
    if family_type == "counter":
        return [(f"{name}_total", "counter", "_total")]
    if family_type == "gauge":
        return [(name, "gauge", "")]
    if family_type == "histogram":
        return [(f"{name}_{part}", "counter", f"_{part}") for part in ("bucket", "count", "sum")]
    return []


class RegistryBridge:
    """Observable instruments over a Prometheus registry's families."""

    def __init__(self, registry: CollectorRegistry, meter: Any) -> None:
        self._registry = registry
        self._meter = meter
        self._lock = threading.Lock()
        self._samples: dict[str, list[tuple[float, dict[str, str]]]] = {}
        self._at = 0.0
        self._instruments: set[str] = set()
        self.failures = 0

    def _collect(self) -> dict[str, list[tuple[float, dict[str, str]]]]:
        with self._lock:
            if time.monotonic() - self._at < _SHARED_FOR_S:
                return self._samples
            samples: dict[str, list[tuple[float, dict[str, str]]]] = {}
            for family in self._registry.collect():
                for sample in family.samples:
                    samples.setdefault(sample.name, []).append((sample.value, sample.labels))
            self._samples, self._at = samples, time.monotonic()
            return samples

    def discover(self) -> int:
        """Create instruments for the families not seen before; returns how many."""
        from opentelemetry.metrics import CallbackOptions, Observation

        created = 0
        for family in self._registry.collect():
            for name, kind, _ in instruments_of(family.type, family.name):
                if name in self._instruments:
                    continue
                self._instruments.add(name)

                def callback(options: CallbackOptions, sample: str = name
                             ) -> Iterable[Observation]:
                    try:
                        rows = self._collect().get(sample, [])
                    except Exception:  # noqa: BLE001 - an export never breaks the component
                        self.failures += 1
                        return []
                    return [Observation(value, labels) for value, labels in rows]

                make = (self._meter.create_observable_counter if kind == "counter"
                        else self._meter.create_observable_gauge)
                make(name, callbacks=[callback], description=family.documentation)
                created += 1
        return created


def start(registry: CollectorRegistry, component: str, node_id: str,
          session_dir_name: str, environ: Mapping[str, str] | None = None) -> Any | None:
    """Export the registry's metrics over OTLP when asked to; returns the provider (None
    when not asked). Never raises: a broken exporter costs the export, not the node."""
    env = os.environ if environ is None else environ
    if not wanted(env):
        return None
    try:
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader

        from tracedray.telemetry._resource import build_resource

        if protocol(env) == GRPC:
            from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import (
                OTLPMetricExporter,
            )
        else:
            from opentelemetry.exporter.otlp.proto.http.metric_exporter import (  # type: ignore[assignment]
                OTLPMetricExporter,
            )
        reader = PeriodicExportingMetricReader(OTLPMetricExporter())
        provider = MeterProvider(metric_readers=[reader], resource=build_resource(
            component, node_id=node_id, session_id=session_dir_name))
        bridge = RegistryBridge(registry, provider.get_meter("tracedray.metrics"))
        bridge.discover()
    except Exception as exc:  # noqa: BLE001 - say it once; the node runs on
        log.warning("metrics.otlp_failed", component=component,
                    error=f"{type(exc).__name__}: {exc}")
        return None

    def rediscover() -> None:  # users' families appear as processes declare them
        while True:
            time.sleep(DISCOVER_EVERY_S)
            try:
                bridge.discover()
            except Exception:  # noqa: BLE001, S112 - try again next time
                continue

    threading.Thread(target=rediscover, daemon=True, name="tracedray-metrics-otlp").start()
    log.info("metrics.otlp_start", component=component, protocol=protocol(env))
    return provider
