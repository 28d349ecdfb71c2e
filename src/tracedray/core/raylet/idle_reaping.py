"""Which idle workers to stop, and workers stuck at their start.

Idle workers beyond a soft limit (the node's CPU count) are stopped once they have been
idle long enough: a task blocked in ``get`` lends its CPU out, so a burst of nested work
can start many more workers than CPUs, and without this they would sit idle, holding
memory, until the node stops. ``workers_to_reap`` decides which (pure).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class IdleWorker:
    """What the reaping decision needs to know about one IDLE task worker."""

    worker_id: str
    idle_since: float  # same clock as ``now`` in workers_to_reap
    # It still holds something other processes need (objects it owns or borrows,
    # tasks it submitted): stopping it would lose them. Unknown counts as busy.
    busy: bool = False


def workers_to_reap(idle: Sequence[IdleWorker], live_workers: int, soft_limit: int,
                    now: float, threshold_s: float) -> list[str]:
    """Ids of the idle workers to stop now, oldest-idle first.

    ``live_workers`` counts the node's task workers that are alive and not already
    stopping (starting, idle, leased, blocked; actor workers are not in the pool's
    budget). Only as many as it exceeds ``soft_limit`` by are stopped, and only
    workers idle for at least ``threshold_s`` that are not busy, as Ray's
    ``idle_worker_killing_time_threshold_ms``: a short pause between two bursts
    keeps its warm workers.
    """
    excess = live_workers - soft_limit
    if excess <= 0:
        return []
    ready = sorted((w for w in idle_longer_than(idle, now, threshold_s) if not w.busy),
                   key=lambda w: (w.idle_since, w.worker_id))
    return [w.worker_id for w in ready[:excess]]


def with_answers(idle: Sequence[IdleWorker],
                 answers: Mapping[IdleWorker, list[str] | None]) -> list[IdleWorker]:
    """``idle`` (as it is now) with ``busy`` set from what the workers answered when
    asked what they still hold (``answers``, keyed by the worker as it was then). Free
    means: asked during its current idle spell (same ``idle_since``: not leased since)
    and answered "nothing". Not asked, not answering or holding something: busy."""
    free = {(w.worker_id, w.idle_since) for w, reasons in answers.items() if reasons == []}
    return [IdleWorker(w.worker_id, w.idle_since, busy=(w.worker_id, w.idle_since) not in free)
            for w in idle]


def idle_longer_than(idle: Sequence[IdleWorker], now: float,
                     threshold_s: float) -> list[IdleWorker]:
    return [w for w in idle if now - w.idle_since >= threshold_s]


def not_registered_in_time(started: Iterable[tuple[str, float]], now: float,
                           timeout_s: float) -> list[str]:
    """Of the workers still starting (``(worker id, started at)``, monotonic clock), those
    started ``timeout_s`` ago or more."""
    return [worker_id for worker_id, at in started if now - at >= timeout_s]


def soft_limit(cpus: float, configured: int | None) -> int:
    """How many task workers a node keeps alive when idle: the configured number, or
    its CPU count; at least 1 (a node with no CPUs still runs zero-CPU tasks)."""
    if configured is not None:
        return max(1, configured)
    return max(1, int(cpus))
