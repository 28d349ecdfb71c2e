"""The node's telemetry agent: span spools in, OTLP JSON lines out, off the hot path.

Every process of the node records its spans in a spool (telemetry/spool_format.py);
this process, started by the raylet, converts them into the ``traces/*.jsonl`` files
(and copies the complete lines of every log spool into ``logs/*.jsonl``,
telemetry/line_spool.py) every ``--interval`` seconds — or, while other processes
keep a quarter or more of the machine's CPU busy, up to ``--max-defer`` seconds later
(conversion_policy.py: even at the lowest priority its work slowed a burst of tasks).
It runs at the lowest CPU priority: ``SCHED_IDLE``
where the OS has it (Linux; it then never preempts a runtime process when it wakes
and gets a core only when nothing else wants it), and nice 19. While
tasks keep every core busy it falls behind, and readers convert what it has not
(telemetry/spool_convert.py), so no span is ever missing; when the cores have a
moment, it catches up. It never takes a lock another converter holds, so it cannot
slow a reader down, and it converts at most AGENT_BYTES_PER_ROUND per lock it
takes: a reader (or a writer closing its spool) that waits for a lock the
starved agent holds waits for that much work, not for the round budget's.
On SIGTERM, or when the raylet is gone, it converts everything
left and exits.

With an OTLP destination configured (``OTEL_TRACES_EXPORTER``/``OTEL_LOGS_EXPORTER``,
``OTEL_EXPORTER_OTLP_*``: telemetry/export_config.py), it also sends the lines of
``traces/*.jsonl`` (and ``logs/*.jsonl``) to it, on a thread of its own
(telemetry/agent_export.py): no process exports its own spans, so a SIGKILLed one
loses none and none waits for the endpoint on its way out. When asked to stop it
converts what is left, tells the raylet so on its stdout (the raylet waits for that,
not for the export), then keeps exporting for up to TRACEDRAY_OTLP_EXPORT_LINGER_S
while the endpoint is down or slow, and exits.

A driver on a machine where no agent exports its session folder to its destination
(one that joined a cluster whose nodes run elsewhere) starts one for its own files:
:func:`start_for_driver`.

``python -m tracedray.core.raylet.telemetry_agent --session-dir D --node-id N
--parent-pid P [--only-pid PID]``
"""

# ruff: noqa: E402  (rich is set aside before the first import that would load it)
from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

# Run as the agent (``python -m``), it writes JSON lines only: structlog would load rich
# (~70 modules, ~4 MB of RSS) for tracebacks it never renders, as the raylet and the GCS
# never do. Imported by a driver, whose program may use rich, it leaves rich alone.
if __name__ == "__main__":
    sys.modules.setdefault("rich", None)  # type: ignore[arg-type]

from tracedray import logs
from tracedray.core.process import process_alive
from tracedray.core.raylet.agent_process import NICENESS, lower_priority, start_agent
from tracedray.core.raylet.conversion_policy import CpuMeter, conversion_due
from tracedray.telemetry import export_config
from tracedray.telemetry._host import advertise_ip
from tracedray.telemetry.line_spool import has_uncopied, sync_lines_dir
from tracedray.telemetry.rotation_io import Rotator
from tracedray.telemetry.spool_convert import (
    MAX_BYTES_PER_ROUND,
    MAX_ROUNDS_PER_SYNC,
    has_unconverted,
    sync_traces_dir,
)
from tracedray.telemetry.trace_index import DEFAULT_MAX_BYTES as INDEX_BYTES_PER_TRANSACTION
from tracedray.telemetry.trace_index import IndexWriter

DEFAULT_INTERVAL_S = 0.5
AGENT_BYTES_PER_ROUND = 256 << 10  # ~700 spans, ~5 ms of CPU under one lock: a starved
# SCHED_IDLE agent holding a lock a reader waits on finishes that much, not more
POLL_S = 0.05
PARENT_CHECK_S = 0.5
WRITERS_POLL_S = 0.25  # how often a stopped agent looks for what live writers added

if TYPE_CHECKING:
    from tracedray.telemetry.agent_export import ExportLoop

log = logs.get_logger(__name__)
_driver_agents: list[subprocess.Popen[bytes]] = []


@dataclass
class AgentStatistics:
    rounds: int = 0
    rounds_deferred: int = 0  # the machine was busy (conversion_policy.py)
    spans_converted: int = 0
    busiest_round_spans: int = 0
    warnings: int = 0
    lines_indexed: int = 0  # lines entered in the session's trace index (trace_index.py)
    rotated: int = 0  # files rotated into parts (telemetry/rotation_io.py)
    compressed: int = 0  # parts compressed
    retention_dropped: int = 0  # parts deleted (the session limit, the backup count)


class SpoolConverter:
    """The agent's loop, apart from the process around it (tests drive it directly)."""

    def __init__(self, traces_dir: Path, interval_s: float = DEFAULT_INTERVAL_S, *,
                 max_defer_s: float = 0.0, meter: CpuMeter | None = None,
                 logs_dir: Path | None = None) -> None:
        self.traces_dir = traces_dir
        # Log spools beside it: their complete lines are copied to logs/*.jsonl
        # (telemetry/line_spool.py), the only way those files are written while a
        # process runs mapped.
        self.logs_dir = logs_dir if logs_dir is not None else traces_dir.parent / "logs"
        self.interval_s = interval_s
        self.max_defer_s = max_defer_s
        self._meter = meter if meter is not None else CpuMeter()
        self._stats = AgentStatistics()
        self._lock = threading.Lock()
        # After each round, the lines it wrote go into the session's index, here, at the
        # agent's priority: no reader or runtime process waits for it.
        self._index = IndexWriter(traces_dir.parent)
        # Then the files that grew past their size rotate, quiet parts are compressed,
        # and parts beyond the session's limits go (telemetry/rotation_io.py).
        self._rotator = Rotator(traces_dir.parent)

    def convert_once(self, *, blocking: bool = False) -> int:
        # The final (blocking) pass runs when the node stops: nothing waits on it then.
        result = sync_traces_dir(self.traces_dir, blocking=blocking, max_bytes=(
            MAX_BYTES_PER_ROUND if blocking else AGENT_BYTES_PER_ROUND))
        copied = sync_lines_dir(self.logs_dir, blocking=blocking, max_bytes=(
            MAX_BYTES_PER_ROUND if blocking else AGENT_BYTES_PER_ROUND))
        result.warnings.extend(copied.warnings)
        lines_indexed = self._update_index(blocking, result.warnings)
        rotation = self._rotator.run_once()
        result.warnings.extend(rotation.warnings)
        for dropped in rotation.dropped:  # what is gone, and why: said once, in the log
            log.warning("telemetry.retention_dropped", kind=dropped.kind, file=dropped.name,
                        bytes=dropped.bytes, reason=dropped.reason)
        with self._lock:
            self._stats.lines_indexed += lines_indexed
            self._stats.rotated += rotation.rotated
            self._stats.compressed += rotation.compressed
            self._stats.retention_dropped += len(rotation.dropped)
            self._stats.rounds += 1
            self._stats.spans_converted += result.spans
            self._stats.busiest_round_spans = max(self._stats.busiest_round_spans,
                                                  result.spans)
            self._stats.warnings += len(result.warnings)
        for warning in result.warnings[:5]:  # a corrupt spool repeats itself each round
            log.warning("telemetry.spool_warning", detail=warning)
        return result.spans

    def _update_index(self, blocking: bool, warnings: list[str]) -> int:
        """Index what this round wrote, trace_index.DEFAULT_MAX_BYTES per transaction
        (one write lock another node's agent may wait on: fewer, larger commits cost the
        index a fraction of the CPU), as many as a sync converts; the last pass
        (``blocking``) indexes everything."""
        budget = MAX_BYTES_PER_ROUND if blocking else INDEX_BYTES_PER_TRANSACTION
        lines = 0
        for _ in range(1 << 30 if blocking else MAX_ROUNDS_PER_SYNC):
            update = self._index.update(max_bytes=budget)
            lines += update.lines
            if update.error:
                warnings.append(update.error)
            if not update.pending or not update.lines or update.error:
                break
        return lines

    def run(self, should_stop: Callable[[], bool]) -> None:
        """Convert every interval until ``should_stop()``; then convert what is left.

        ``should_stop`` is polled, not waited on: a SIGTERM handler may only set a
        flag (an Event's lock taken in a handler can deadlock the thread it interrupted).
        """
        next_round = time.monotonic() + self.interval_s
        # When the agent first saw spans it has put off since (None: nothing waits).
        # Counted from there, not from its own last round: a reader (the CLI, the
        # pytest plugin, a benchmark) may have converted everything in between, and
        # spans written after that have waited no time at all.
        waiting_since: float | None = None
        while not should_stop():
            now = time.monotonic()
            if now >= next_round:
                busy = self._meter.busy_fraction()
                due = conversion_due(busy, 0.0, max_defer_s=self.max_defer_s)
                if not due:  # a busy machine: how long have spans waited?
                    if not (has_unconverted(self.traces_dir)
                            or has_uncopied(self.logs_dir)):
                        waiting_since = None
                    elif waiting_since is None:
                        waiting_since = now
                    else:
                        due = conversion_due(busy, now - waiting_since,
                                             max_defer_s=self.max_defer_s)
                if due:
                    try:
                        self.convert_once()
                    except Exception as exc:  # a bad round must not end the agent
                        log.warning("telemetry.agent_round_failed",
                                    error=f"{type(exc).__name__}: {exc}")
                    waiting_since = None
                else:
                    with self._lock:
                        self._stats.rounds_deferred += 1
                next_round = time.monotonic() + self.interval_s
            time.sleep(POLL_S)
        self.convert_once(blocking=True)

    def statistics(self) -> AgentStatistics:
        with self._lock:
            return AgentStatistics(**vars(self._stats))


def start_for_driver(session_dir: Path) -> subprocess.Popen[bytes] | None:
    """Start an agent for this driver's files, if they are to be exported and no agent
    on this machine exports ``session_dir`` to the same destination; None otherwise.

    A driver whose node runs elsewhere (``init(address="host:port")`` of a remote head)
    writes its spans to a session folder of its own that no raylet reads. Its agent
    converts and exports the driver's files while it runs, and after it ends (exit or
    SIGKILL) it sends the rest and exits; the driver never waits for it.
    """
    from tracedray.telemetry.agent_export import agent_serves

    try:
        settings = export_config.export_config(os.environ)
        targets = settings.otlp_targets
        if not targets or all(agent_serves(session_dir, t) for t in targets):
            return None
        process = start_agent(session_dir, "", only_pid=os.getpid())
        _driver_agents.append(process)  # kept: it runs on after this process, unwaited
        return process
    except Exception as exc:  # export must never stop a driver from starting
        log.warning("telemetry.agent_start_failed", error=f"{type(exc).__name__}: {exc}")
        return None


def main() -> None:
    parser = argparse.ArgumentParser(description="tracedray telemetry agent")
    parser.add_argument("--session-dir", type=Path, required=True)
    parser.add_argument("--node-id", default="")
    parser.add_argument("--parent-pid", type=int, default=0)
    parser.add_argument("--interval", type=float, default=DEFAULT_INTERVAL_S)
    parser.add_argument("--max-defer", type=float, default=0.0)
    parser.add_argument("--linger", type=float, default=0.0)
    parser.add_argument("--only-pid", type=int, default=0)
    parser.add_argument("--ip", default="")  # the node's advertised address, for its lines
    args = parser.parse_args()
    advertise_ip(args.ip)
    os.umask(0o077)  # the traces it writes are its user's alone, like every session file
    policy = lower_priority(0)  # before any thread starts: threads inherit it
    # Logs only: the agent records no spans of its own (it would feed its own input).
    logs.configure("agent", session_dir=args.session_dir, node_id=args.node_id,
                   session_id=args.session_dir.name,
                   config={"interval_s": args.interval, "max_defer_s": args.max_defer,
                           "niceness": NICENESS,
                           "scheduler": policy})
    converter = SpoolConverter(args.session_dir / "traces", args.interval,
                               max_defer_s=args.max_defer)
    export = _start_export(args.session_dir, args.interval, args.only_pid)
    if not args.only_pid:  # the node's agent: its counts on the raylet's /metrics
        from tracedray.metrics.agent_metrics import start_reporting

        start_reporting(args.session_dir, args.node_id, converter.statistics,
                        export.exporter.statistics if export is not None else None)
    started = time.monotonic()
    stop_requested = [False]
    signal.signal(signal.SIGTERM, lambda signum, frame: stop_requested.__setitem__(0, True))
    # A Ctrl-C meant for the driver reaches its whole process group: the agent ends
    # with its parent instead, after its last conversion and export.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGTERM])  # agent_process.start_agent
    last_parent_check = [0.0]

    def should_stop() -> bool:
        if stop_requested[0]:
            return True
        now = time.monotonic()
        if args.parent_pid > 0 and now - last_parent_check[0] >= PARENT_CHECK_S:
            last_parent_check[0] = now
            return not process_alive(args.parent_pid)
        return False

    converter.run(should_stop)
    stats = converter.statistics()
    log.info("telemetry.agent_stop", rounds=stats.rounds, rounds_deferred=stats.rounds_deferred,
             spans_converted=stats.spans_converted, lines_indexed=stats.lines_indexed,
             busiest_round_spans=stats.busiest_round_spans, warnings=stats.warnings,
             run_time_s=round(time.monotonic() - started, 3))
    _say_converted()
    if export is not None:
        _finish_export(export, converter, args.session_dir, args.linger, args.only_pid)
    logs.record_process_exit(0)


def _start_export(session_dir: Path, interval_s: float, only_pid: int) -> ExportLoop | None:
    """The export thread, when an OTLP destination is configured; None otherwise."""
    settings = export_config.export_config(os.environ)
    for note in settings.notes:
        log.warning("telemetry.export_config", note=note)
    if not settings.exports_otlp:
        return None
    # Only now: the export's code brings urllib.request, http.client, email, gzip and the
    # OTLP encoders (~1.5 MB of the agent's memory), which a node exporting nowhere never uses.
    from tracedray.telemetry.agent_export import ExportLoop, SessionExporter

    exporter = SessionExporter(session_dir, settings, warn=_warn, only_pid=only_pid,
                               service_name=os.environ.get("OTEL_SERVICE_NAME") or "tracedray")
    log.info("telemetry.export_start", destinations=list(exporter.statistics().destinations),
             only_pid=only_pid or None)
    loop = ExportLoop(exporter, interval_s)
    loop.start()
    return loop


def _warn(event: str, fields: Mapping[str, object]) -> None:
    log.warning(event, **fields)


def live_writers(session_dir: Path, only_pid: int = 0) -> list[int]:
    """Pids of the live processes (other than this one) with a span or log spool in the
    session: their spans and lines may still come. ``only_pid``: that one's alone."""
    pids = set()
    for folder in (session_dir / "traces", session_dir / "logs"):
        with contextlib.suppress(OSError):
            for entry in os.scandir(folder):
                stem, _, suffix = entry.name.rpartition(".")
                pid_text = stem.rpartition("-")[2]
                if suffix == "spool" and pid_text.isdigit():
                    pids.add(int(pid_text))
    pids.discard(os.getpid())
    if only_pid:
        pids &= {only_pid}
    return sorted(pid for pid in pids if process_alive(pid))


def _say_converted() -> None:
    """Tell the raylet (agent_process.stop_agent) that the last conversion is done."""
    with contextlib.suppress(OSError, ValueError):
        sys.stdout.write("converted\n")
        sys.stdout.flush()
        # Close the pipe (its reader sees the end) and keep a valid stdout for the rest.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)


def _finish_export(export: ExportLoop, converter: SpoolConverter, session_dir: Path,
                   linger_s: float, only_pid: int) -> None:
    """Export what is left, then what the session's other writers on this machine still
    record (the GCS stops after the raylet; a driver may outlive a node), until none is
    left or ``linger_s`` has passed."""
    started = time.monotonic()
    deadline = started + linger_s
    while True:
        writers = live_writers(session_dir, only_pid)
        converter.convert_once()
        drained = export.drain(deadline)
        if not drained or not writers:
            break  # out of time, or everything the writers had ended was exported
        time.sleep(WRITERS_POLL_S)
    stats = export.exporter.statistics()
    export.exporter.close()
    (log.info if drained else log.warning)(
        "telemetry.export_stop", drained=drained, spans_exported=stats.spans_exported,
        logs_exported=stats.logs_exported, failed_attempts=stats.failed_attempts,
        dropped=stats.dropped, pending_bytes=stats.pending_bytes, last_error=stats.last_error,
        drain_s=round(time.monotonic() - started, 3))


if __name__ == "__main__":
    main()
