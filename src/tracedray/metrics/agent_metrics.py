"""The telemetry agent's own metrics: spans converted, rounds, and the OTLP export's
counts and backlog, written as the agent's snapshot (metrics/snapshot.py) from its
``statistics()`` once a second; its node's raylet serves them."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tracedray.metrics.snapshot import (
    COUNTER,
    GAUGE,
    REPORT_INTERVAL_S,
    ProcessMetrics,
    snapshot_path,
)

# (family, kind, help, the statistics field it reads)
_AGENT = (
    ("tracedray_spans_converted_total", COUNTER, "Spans the telemetry agent converted from "
     "spools into traces/*.jsonl", "spans_converted"),
    ("tracedray_telemetry_agent_rounds_total", COUNTER, "Conversion rounds of the agent",
     "rounds"),
    ("tracedray_telemetry_agent_rounds_deferred_total", COUNTER, "Rounds the agent put off "
     "because the machine was busy", "rounds_deferred"),
    ("tracedray_telemetry_agent_warnings_total", COUNTER, "Warnings of the agent's "
     "conversions (corrupt spools)", "warnings"),
    ("tracedray_trace_index_lines_total", COUNTER, "Lines of traces/ and logs/ the agent "
     "entered in the session's trace index", "lines_indexed"),
    ("tracedray_telemetry_rotated_total", COUNTER, "Log and trace files the agent rotated "
     "into parts (TRACEDRAY_LOG_ROTATION_BYTES)", "rotated"),
    ("tracedray_telemetry_compressed_total", COUNTER, "Rotated parts the agent compressed",
     "compressed"),
    ("tracedray_telemetry_retention_dropped_total", COUNTER, "Rotated parts the agent "
     "deleted (TRACEDRAY_SESSION_MAX_BYTES, the backup count): telemetry.retention_dropped",
     "retention_dropped"),
)
_EXPORT = (
    ("tracedray_otlp_spans_exported_total", COUNTER, "Spans sent to the OTLP endpoint",
     "spans_exported"),
    ("tracedray_otlp_logs_exported_total", COUNTER, "Log records sent to the OTLP endpoint",
     "logs_exported"),
    ("tracedray_otlp_export_failures_total", COUNTER, "OTLP requests that failed (retried)",
     "failed_attempts"),
    ("tracedray_otlp_export_backlog_bytes", GAUGE, "Bytes of span and log lines not exported "
     "to the OTLP endpoint yet", "pending_bytes"),
)


def report(metrics: ProcessMetrics, agent: Any, export: Any | None) -> None:
    """Copy the statistics into the families (the writer thread writes them)."""
    for fields, stats in ((_AGENT, agent), (_EXPORT, export)):
        if stats is None:
            continue
        for name, kind, help, field in fields:
            family = metrics.declare(name, kind, help, ())
            metrics.set(family, (), float(getattr(stats, field)))


def start_reporting(session_dir: Path, node_id: str, agent: Callable[[], Any],
                    export: Callable[[], Any] | None) -> None:
    """Report the agent's statistics for its node's raylet, once a second, on a daemon
    thread (it dies with the agent; a final write is made at exit)."""
    if not node_id:
        return
    metrics = ProcessMetrics()
    path = snapshot_path(session_dir, node_id, "agent", os.getpid())
    metrics.set_destination(lambda: path)

    def run() -> None:
        stop = threading.Event()
        while not stop.wait(REPORT_INTERVAL_S):
            try:
                report(metrics, agent(), export() if export is not None else None)
            except Exception:  # noqa: BLE001, S112 - metrics never end the agent
                continue

    report(metrics, agent(), export() if export is not None else None)
    metrics.write()  # the families are there from the node's first scrape on
    threading.Thread(target=run, daemon=True, name="tracedray-agent-metrics").start()
