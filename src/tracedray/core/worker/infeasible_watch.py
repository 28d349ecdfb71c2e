"""Work that fits no node of the cluster says so, on the caller's stderr.

A lease request for a resource shape that no alive node has waits at its raylet until a
node that fits joins (the raylet records the task as ``INFEASIBLE`` for `tracedray list
tasks`), but a driver blocked in ``get()`` would hear nothing and wait for ever. So a
caller whose requests for a shape have waited ``WARN_AFTER_S`` checks that shape against
the alive nodes' total resources and, when none has it, warns once per shape (again
after ``REPEAT_S`` while it still waits), as Ray's "cannot be scheduled right now"
warning does. The work keeps waiting: a node that fits may join.

The decisions are pure functions; :class:`InfeasibleWatch` does the one GCS call a check
needs, on the caller's background pool, never on the submission path.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from tracedray import logs
from tracedray.core.protocol.resources import feasible
from tracedray.exceptions import RayError
from tracedray.telemetry.cluster_events import OwnerEvents

log = logs.get_logger(__name__)
_events = OwnerEvents(log)

Shape = tuple[tuple[str, float], ...]  # a resource request, sorted by name

WARN_AFTER_S = 2.0  # a shape waited this long is checked (well within Ray's 5 s promise)
RECHECK_S = 5.0  # a shape found to fit is not asked about again for this long
REPEAT_S = 60.0  # an infeasible shape that still waits is warned about again this often


def shape_of(resources: Mapping[str, float]) -> Shape:
    return tuple(sorted((name, float(amount)) for name, amount in resources.items()
                        if amount > 0))


@dataclass(frozen=True)
class Waiting:
    """Work of one resource shape that waits for a worker: since when, and for what."""
    shape: Shape
    since: float  # monotonic time of the oldest waiting request
    what: str  # "task f", for the warning


def due(waiting: Iterable[Waiting], checked_at: Mapping[Shape, float], now: float) -> bool:
    """Whether some shape has waited long enough and was not looked at recently."""
    return any(now - w.since >= WARN_AFTER_S and now - checked_at.get(w.shape, -1e18) >= RECHECK_S
               for w in waiting)


def fits_no_node(shape: Shape, totals: Sequence[Mapping[str, float]]) -> bool:
    request = dict(shape)
    return not any(feasible(dict(total), request) for total in totals)


def to_warn(waiting: Iterable[Waiting], totals: Sequence[Mapping[str, float]],
            warned_at: Mapping[Shape, float], now: float) -> list[Waiting]:
    """The waiting work, one per shape, that fits no alive node and was not warned about
    within ``REPEAT_S``."""
    out: dict[Shape, Waiting] = {}
    for w in waiting:
        if (now - w.since >= WARN_AFTER_S and w.shape not in out
                and now - warned_at.get(w.shape, -1e18) >= REPEAT_S
                and fits_no_node(w.shape, totals)):
            out[w.shape] = w
    return list(out.values())


def cluster_totals(totals: Sequence[Mapping[str, float]]) -> dict[str, float]:
    summed: dict[str, float] = {}
    for total in totals:
        for name, amount in total.items():
            summed[name] = summed.get(name, 0.0) + amount
    return summed


def short_of(shape: Shape, totals: Sequence[Mapping[str, float]]) -> list[str]:
    """The resources of ``shape`` that no single node has enough of."""
    return [name for name, amount in shape
            if not any(feasible(dict(total), {name: amount}) for total in totals)]


def warning_text(w: Waiting, totals: Sequence[Mapping[str, float]], waited_s: float) -> str:
    request = {name: amount for name, amount in w.shape}
    missing = ", ".join(short_of(w.shape, totals)) or "their combination"
    return (f"tracedray: warning: {w.what} requires {request}, which no alive node of the "
            f"cluster has (no node has enough {missing}; the cluster has "
            f"{cluster_totals(totals)} on {len(totals)} node(s)); it has "
            f"waited {waited_s:.0f}s and will run when a node that fits joins. Check its "
            "num_cpus/num_gpus/resources options, or start a node with those resources.")


@dataclass(frozen=True)
class InfeasibleWatchStatistics:
    checks: int  # times the alive nodes were asked for
    warnings: int  # warnings given
    failed_checks: int  # the GCS did not answer (the check is tried again later)


class InfeasibleWatch:
    """Warns about waiting work no alive node can run; ``poll`` is cheap and non-blocking."""

    def __init__(self, node_totals: Callable[[], list[dict[str, float]]],
                 run_in_background: Callable[[Callable[[], None]], object],
                 *, clock: Callable[[], float] = time.monotonic) -> None:
        self._node_totals = node_totals
        self._run_in_background = run_in_background
        self._clock = clock
        self._lock = threading.Lock()
        self._checked_at: dict[Shape, float] = {}
        self._warned_at: dict[Shape, float] = {}
        self._checking = False
        # Actor creations are placed by the GCS, out of this process's sight: each is
        # watched from its creation until a check finds a node that fits it.
        self._creations: list[Waiting] = []
        self._checks = self._warnings = self._failed = 0

    def watch_creation(self, resources: Mapping[str, float], what: str) -> None:
        with self._lock:
            self._creations.append(Waiting(shape_of(resources), self._clock(), what))

    def poll(self, waiting: Sequence[Waiting]) -> None:
        """Start a check on the background pool when some waiting shape is due."""
        now = self._clock()
        with self._lock:
            everything = [*waiting, *self._creations]
            if self._checking or not due(everything, self._checked_at, now):
                return
            self._checking = True
        self._run_in_background(lambda: self._check(everything))

    def _check(self, waiting: list[Waiting]) -> None:
        try:
            totals = self._node_totals()
        except RayError as exc:
            with self._lock:
                self._checking = False
                self._failed += 1
            log.debug("task.infeasible_check_failed", error=str(exc))
            return
        now = self._clock()
        with self._lock:
            self._checking = False
            self._checks += 1
            for w in waiting:
                if now - w.since >= WARN_AFTER_S:
                    self._checked_at[w.shape] = now
            warn = to_warn(waiting, totals, self._warned_at, now)
            self._creations = [w for w in self._creations if fits_no_node(w.shape, totals)]
            for w in warn:
                self._warned_at[w.shape] = now
            self._warnings += len(warn)
        for w in warn:
            self._say(w, totals, now - w.since)

    @staticmethod
    def _say(w: Waiting, totals: list[dict[str, float]], waited_s: float) -> None:
        request = {name: amount for name, amount in w.shape}
        _events.task_infeasible(w.what, request, cluster_totals(totals), len(totals), waited_s)
        stream = sys.__stderr__
        if stream is not None:
            try:
                stream.write(warning_text(w, totals, waited_s) + "\n")
                stream.flush()
            except (OSError, ValueError):
                pass

    def statistics(self) -> InfeasibleWatchStatistics:
        with self._lock:
            return InfeasibleWatchStatistics(self._checks, self._warnings, self._failed)
