"""Metrics of processes other than the raylet (drivers, workers, the telemetry agent),
as snapshot files the node's raylet merges at scrape time.

A process keeps its metrics in a :class:`ProcessMetrics` (a dict per metric, under one
lock: an ``inc`` costs a dict update) and writes them, when they changed, to
``<session>/metrics/<node_id>/<component>-<pid>.json`` about once a second and at exit
(written aside and renamed: a reader never sees half a file). The raylet of that node
reads the files of its node only (several raylets of one machine share the session
folder), merges them (:func:`merge`, pure) and serves the result on its ``/metrics``.

Across processes a counter's or histogram's series are summed (the node's total); a
gauge's series takes the value set last, as within one process. When a process has
exited, its counters and histograms are kept by the reader (:class:`Retired`) and its
file is removed: a task's worker reaped a second after it counted keeps its counts.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

COUNTER = "counter"
GAUGE = "gauge"
HISTOGRAM = "histogram"
KINDS = (COUNTER, GAUGE, HISTOGRAM)
METRICS_DIR = "metrics"
REPORT_INTERVAL_S = 1.0

Labels = tuple[str, ...]


@dataclass
class Series:
    """One label set's value: a number (counter, gauge), or a histogram's bucket counts
    (one per boundary, then +Inf; not cumulative), sum and count. ``at``: when a gauge
    was set (wall clock), so that the latest set wins across processes."""

    value: float = 0.0
    buckets: list[float] = field(default_factory=list)
    sum: float = 0.0
    count: float = 0.0
    at: float = 0.0


@dataclass
class Family:
    name: str
    kind: str
    help: str
    label_names: Labels
    boundaries: tuple[float, ...] = ()
    series: dict[Labels, Series] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "kind": self.kind, "help": self.help,
                "labels": list(self.label_names), "boundaries": list(self.boundaries),
                "series": [{"labels": list(labels), "value": s.value, "buckets": s.buckets,
                            "sum": s.sum, "count": s.count, "at": s.at}
                           for labels, s in self.series.items()]}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Family:
        family = cls(str(data["name"]), str(data["kind"]), str(data.get("help", "")),
                     tuple(str(x) for x in data.get("labels", ())),
                     tuple(float(b) for b in data.get("boundaries", ())))
        if family.kind not in KINDS:
            raise ValueError(f"unknown metric kind {family.kind!r}")
        for row in data.get("series", ()):
            labels = tuple(str(x) for x in row["labels"])
            family.series[labels] = Series(
                float(row.get("value", 0.0)), [float(b) for b in row.get("buckets", ())],
                float(row.get("sum", 0.0)), float(row.get("count", 0.0)),
                float(row.get("at", 0.0)))
        return family


def merge(families: Iterable[Family], into: dict[str, Family] | None = None
          ) -> dict[str, Family]:
    """Merge the families of several processes (pure but for ``into``, updated in place):
    counters and histograms summed per label set, gauges the latest set. A family whose
    kind, labels or boundaries differ from the first one seen of its name is left out
    (two processes disagree on what it is)."""
    merged: dict[str, Family] = {} if into is None else into
    for family in families:
        target = merged.get(family.name)
        if target is None:
            target = merged[family.name] = Family(family.name, family.kind, family.help,
                                                  family.label_names, family.boundaries)
        elif (target.kind, target.label_names, target.boundaries) != (
                family.kind, family.label_names, family.boundaries):
            continue
        for labels, series in family.series.items():
            _merge_series(target, labels, series)
    return merged


def _merge_series(target: Family, labels: Labels, series: Series) -> None:
    mine = target.series.get(labels)
    if mine is None:
        target.series[labels] = Series(series.value, list(series.buckets), series.sum,
                                       series.count, series.at)
    elif target.kind == GAUGE:
        if series.at >= mine.at:
            mine.value, mine.at = series.value, series.at
    elif target.kind == COUNTER:
        mine.value += series.value
    elif len(mine.buckets) == len(series.buckets):
        mine.buckets = [a + b for a, b in zip(mine.buckets, series.buckets, strict=True)]
        mine.sum += series.sum
        mine.count += series.count


def cumulative(buckets: Sequence[float]) -> list[float]:
    """Prometheus buckets count every observation at or below their bound."""
    out, total = [], 0.0
    for count in buckets:
        total += count
        out.append(total)
    return out


def bucket_index(boundaries: Sequence[float], value: float) -> int:
    """The bucket ``value`` falls in: the first boundary at or above it, else +Inf."""
    for i, bound in enumerate(boundaries):
        if value <= bound:
            return i
    return len(boundaries)


# --- the writing side: one per process ------------------------------------------------------


class ProcessMetrics:
    """This process's metrics, written to its snapshot file when they change."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._families: dict[str, Family] = {}
        self._version = 0
        self._written_version = 0
        self._thread: threading.Thread | None = None
        self._closed = threading.Event()
        self._writes = 0
        self._write_failures = 0
        self._destination: Callable[[], Path | None] = lambda: _worker_destination()
        # The file last written: a driver's final write (at exit, after shutdown()) goes
        # there, though the process no longer knows its cluster.
        self._last_path: Path | None = None

    def declare(self, name: str, kind: str, help: str, label_names: Labels,
                boundaries: tuple[float, ...] = ()) -> Family:
        with self._lock:
            family = self._families.get(name)
            if family is None:
                family = self._families[name] = Family(name, kind, help, label_names,
                                                       boundaries)
            elif (family.kind, family.label_names, family.boundaries) != (
                    kind, label_names, boundaries):
                raise ValueError(
                    f"metric {name!r} is already declared in this process as a {family.kind} "
                    f"with tag keys {family.label_names}; use another name")
        self._ensure_writer()
        return family

    def add(self, family: Family, labels: Labels, value: float) -> None:
        with self._lock:
            series = family.series.get(labels)
            if series is None:
                series = family.series[labels] = Series()
            series.value += value
            self._version += 1

    def set(self, family: Family, labels: Labels, value: float) -> None:
        with self._lock:
            series = family.series.get(labels)
            if series is None:
                series = family.series[labels] = Series()
            series.value, series.at = value, time.time()
            self._version += 1

    def observe(self, family: Family, labels: Labels, value: float) -> None:
        with self._lock:
            series = family.series.get(labels)
            if series is None:
                series = family.series[labels] = Series(
                    buckets=[0.0] * (len(family.boundaries) + 1))
            series.buckets[bucket_index(family.boundaries, value)] += 1
            series.sum += value
            series.count += 1
            self._version += 1

    def families(self) -> list[Family]:
        """A copy, for this process's own use (OTLP) and tests."""
        with self._lock:
            return [Family.from_json(f.to_json()) for f in self._families.values()]

    def set_destination(self, destination: Callable[[], Path | None]) -> None:
        """Where the snapshot goes (a callable: the file may be known only later)."""
        self._destination = destination

    def write(self) -> bool:
        """Write the snapshot if it changed since the last write; never raises."""
        with self._lock:
            if self._version == self._written_version:
                return False
            version = self._version
            payload = {"pid": os.getpid(), "written_at": time.time(),
                       "families": [f.to_json() for f in self._families.values()]}
        try:
            path = self._destination() or self._last_path
            if path is None:
                return False
            self._last_path = path
            # metrics/<node>/ are made if missing, nothing above: a session folder removed
            # under a process (its final write at exit) stays removed.
            path.parent.parent.mkdir(exist_ok=True)
            path.parent.mkdir(exist_ok=True)
            tmp = path.with_name(f".{path.name}.tmp")
            tmp.write_text(json.dumps(payload))
            tmp.replace(path)
        except (OSError, ValueError):
            with self._lock:
                self._write_failures += 1
            return False
        with self._lock:
            self._written_version = version
            self._writes += 1
        return True

    def statistics(self) -> dict[str, int]:
        with self._lock:
            return {"families": len(self._families), "writes": self._writes,
                    "write_failures": self._write_failures}

    def _ensure_writer(self) -> None:
        if self._thread is not None or self._closed.is_set():
            return
        with self._lock:
            if self._thread is not None:
                return
            self._thread = threading.Thread(target=self._run, daemon=True,
                                            name="tracedray-metrics-writer")
        self._thread.start()
        atexit.register(self.write)

    def close(self) -> None:
        """Stop the writer thread after a last write (an owner that outlives its metrics:
        a test, an embedded agent); what is declared afterwards is still written by
        ``write()``."""
        self._closed.set()
        thread = self._thread
        if thread is not None:
            thread.join()
            atexit.unregister(self.write)
        self.write()

    def _run(self) -> None:
        while not self._closed.wait(REPORT_INTERVAL_S):
            self.write()


def snapshot_path(session_dir: Path, node_id: str, component: str, pid: int) -> Path:
    return session_dir / METRICS_DIR / node_id / f"{component}-{pid}.json"


def _no_destination() -> Path | None:
    return None


# Where a driver's or worker's snapshot goes (None: nowhere yet). The core registers it
# (core/current_worker.py: its node's folder of its session), so this package imports no core.
_worker_destination: Callable[[], Path | None] = _no_destination


def set_worker_destination(destination: Callable[[], Path | None]) -> None:
    global _worker_destination
    _worker_destination = destination


_process_metrics: ProcessMetrics | None = None
_process_lock = threading.Lock()


def process_metrics() -> ProcessMetrics:
    global _process_metrics
    if _process_metrics is None:
        with _process_lock:
            if _process_metrics is None:
                _process_metrics = ProcessMetrics()
    return _process_metrics


def flush_process_metrics() -> None:
    """Write this process's snapshot now if it has metrics (before an ``os._exit``)."""
    if _process_metrics is not None:
        _process_metrics.write()


# --- the reading side: the raylet -----------------------------------------------------------


@dataclass(frozen=True)
class ReadResult:
    families: dict[str, Family]
    files: int
    bad_files: int


class SnapshotReader:
    """Reads a node's snapshot files at scrape time; keeps exited processes' counters."""

    def __init__(self, folder: Path, alive: Callable[[int], bool]) -> None:
        self._folder = folder
        self._alive = alive
        self._lock = threading.Lock()
        self._retired: dict[str, Family] = {}
        self._bad_files = 0

    def read(self) -> ReadResult:
        try:
            paths = sorted(self._folder.glob("*.json"))
        except OSError:
            paths = []
        live: list[Family] = []
        exited: list[tuple[Path, list[Family]]] = []
        bad = 0
        for path in paths:
            try:
                data = json.loads(path.read_text())
                pid = int(data["pid"])
                families = [Family.from_json(f) for f in data["families"]]
            except FileNotFoundError:
                continue
            except (OSError, ValueError, KeyError, TypeError):
                bad += 1
                continue
            if self._alive(pid):
                live.extend(families)
            else:
                exited.append((path, families))
        with self._lock:
            self._bad_files += bad
            for path, families in exited:
                merge((f for f in families if f.kind != GAUGE), into=self._retired)
                with contextlib.suppress(OSError):
                    path.unlink()
            retired = [Family.from_json(f.to_json()) for f in self._retired.values()]
        return ReadResult(merge([*retired, *live]), len(paths), bad)

    def statistics(self) -> dict[str, int]:
        with self._lock:
            return {"retired_families": len(self._retired), "bad_files": self._bad_files}
