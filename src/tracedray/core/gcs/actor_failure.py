"""What one failure of an actor does: restart it, declare it dead, or nothing.

The GCS can hear of one death twice. A worker that dies during ``__init__`` ends the
creation task's stream (the placement sees it) and is reported by its raylet
(``ReportWorkerDeath``), in either order. Each path used to act on its own: the report
restarted the actor while the placement declared it dead, so an actor with restarts left
ended ``DEAD`` (or, had each restarted it, would have used two restarts and got two
workers for one death).

So each failure names the worker it is about, and the GCS keeps the worker the actor's
current incarnation is on (granted for its creation, or ``ALIVE`` on it; "" while it has
none: waiting for a worker). Only a failure of that worker counts; once counted the
actor has no current worker, so the other account of the same death, or a late one of
an earlier incarnation's worker, finds nothing to do. A failure without a worker (the
raylet granted none) is about the incarnation that is waiting for one.

As Ray does, an ``__init__`` that raised makes the actor dead whatever its restarts: it
would raise again. A worker that died (exit, signal, its node gone) is restarted while
``max_restarts`` allows (-1: for ever).

These functions decide; ``actor_manager`` applies the decision under its lock.
"""

from __future__ import annotations

DEAD = "DEAD"

IGNORE = "ignore"  # not the actor's current worker, or the actor is dead already
RESTART = "restart"  # a new incarnation: RESTARTING, placed again
DIE = "die"  # DEAD with the failure as its cause


def after_failure(actor_state: str, current_worker: str, failed_worker: str, *,
                  restartable: bool, num_restarts: int, max_restarts: int) -> str:
    """``current_worker`` is the worker id of the actor's current incarnation ("" while
    it has none), ``failed_worker`` the one the failure is about ("" when no worker was
    granted); ``restartable`` is False for an ``__init__`` that raised."""
    if actor_state == DEAD or failed_worker != current_worker:
        return IGNORE
    if restartable and (max_restarts < 0 or num_restarts < max_restarts):
        return RESTART
    return DIE
