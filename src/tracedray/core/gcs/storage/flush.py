"""The Flusher: one thread per GCS that periodically flushes every TieredTable.

Each flush that moved anything becomes a ``gcs.flush`` span (started when the
flush started, so its duration is the flush's) and a ``gcs.flush`` log line with
the same numbers, including the process RSS before and after and the entries left
in memory: the hot set, which is what the flush keeps bounded (RSS also moves with
the requests being handled and what the allocator keeps).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import psutil

from tracedray.core import allocator
from tracedray.core.gcs.storage.policy import FlushPolicy
from tracedray.core.gcs.storage.tiered import TableFlushResult, TieredTable
from tracedray.logs import get_logger
from tracedray.telemetry.cluster_events import GcsEvents

_log = get_logger(__name__)
_events = GcsEvents(_log)


@dataclass(frozen=True)
class FlushReport:
    entries: int
    bytes: int
    duration_s: float
    rss_before: int
    rss_after: int
    per_table: Mapping[str, TableFlushResult] = field(default_factory=dict)


@dataclass(frozen=True)
class FlusherStatistics:
    enabled: bool
    running: bool
    interval_s: float
    flushes: int  # flushes that moved at least one entry
    idle_flushes: int  # flushes that found nothing to move
    failures: int  # flushes that raised (storage unreachable); the thread carries on
    entries_flushed: int
    bytes_flushed: int
    last_duration_s: float
    last_rss_after: int


class Flusher:
    """Runs ``flush_now`` every ``policy.interval_s`` in a daemon thread once started.

    ``enabled=False`` (flushing off, the benchmark's baseline): ``start`` runs no
    thread and entries stay in memory; an explicit ``flush_now`` still works.
    """

    def __init__(
        self,
        tables: Mapping[str, TieredTable],
        policy: FlushPolicy,
        *,
        enabled: bool = True,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``clock`` must be the one the tables stamp finished entries with."""
        self._tables = dict(tables)
        self._policy = policy
        self._enabled = enabled
        self._clock = clock
        self._process = psutil.Process()
        self._flush_lock = threading.Lock()  # the thread and a manual flush_now never overlap
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._stats_lock = threading.Lock()
        self._flushes = 0
        self._idle_flushes = 0
        self._failures = 0
        self._entries = 0
        self._bytes = 0
        self._last_duration_s = 0.0
        self._last_rss_after = 0
        self._storage_label = ", ".join(
            sorted({table.storage.description for table in self._tables.values()})
        )

    def flush_now(self) -> FlushReport:
        """Flush every table once; emit the span and log line if anything moved."""
        with self._flush_lock:
            start_ns = time.time_ns()
            started = time.perf_counter()
            rss_before = self._process.memory_info().rss
            now = self._clock()
            per_table = {
                name: table.flush(now, self._policy) for name, table in self._tables.items()
            }
            if allocator.trim_due(sum(r.entries for r in per_table.values())):
                allocator.release_free_memory()
            rss_after = self._process.memory_info().rss
            report = FlushReport(
                entries=sum(r.entries for r in per_table.values()),
                bytes=sum(r.bytes for r in per_table.values()),
                duration_s=time.perf_counter() - started,
                rss_before=rss_before,
                rss_after=rss_after,
                per_table=per_table,
            )
        self._record(report)
        if report.entries:
            self._emit(report, start_ns)
        return report

    def _record(self, report: FlushReport) -> None:
        with self._stats_lock:
            if report.entries:
                self._flushes += 1
            else:
                self._idle_flushes += 1
            self._entries += report.entries
            self._bytes += report.bytes
            self._last_duration_s = report.duration_s
            self._last_rss_after = report.rss_after

    def _emit(self, report: FlushReport, start_ns: int) -> None:
        tables = {name: r.entries for name, r in report.per_table.items() if r.entries}
        _events.flushed(
            storage=self._storage_label, entries=report.entries, size=report.bytes,
            rss_before=report.rss_before, rss_after=report.rss_after, tables=tables,
            hot_entries={name: r.hot_after for name, r in report.per_table.items()},
            start_ns=start_ns, duration_s=report.duration_s)

    # --- background thread -------------------------------------------------------------

    def start(self) -> None:
        if not self._enabled or self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="tracedray-gcs-flusher", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the thread (after the flush in progress, if any)."""
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join()

    def _run(self) -> None:
        while not self._stop.wait(self._policy.interval_s):
            try:
                self.flush_now()
            except Exception as exc:  # noqa: BLE001 -- the flusher must outlive a bad flush
                # Entries that failed to move stay hot and are retried next interval;
                # nothing is lost, memory just grows until the storage is back.
                with self._stats_lock:
                    self._failures += 1
                _events.flush_failed(self._storage_label, exc)

    def statistics(self) -> FlusherStatistics:
        with self._stats_lock:
            return FlusherStatistics(
                enabled=self._enabled,
                running=self._thread is not None and self._thread.is_alive(),
                interval_s=self._policy.interval_s,
                flushes=self._flushes,
                idle_flushes=self._idle_flushes,
                failures=self._failures,
                entries_flushed=self._entries,
                bytes_flushed=self._bytes,
                last_duration_s=self._last_duration_s,
                last_rss_after=self._last_rss_after,
            )

    def __repr__(self) -> str:
        stats = self.statistics()
        return (
            f"<Flusher tables={len(self._tables)} running={stats.running} "
            f"flushes={stats.flushes} entries={stats.entries_flushed}>"
        )
