"""What the GCS does at each step of an actor's creation, given the actor's state now.

An actor can be declared DEAD while its creation is under way: its job finished, it was
killed with ``tracedray.kill``. Its worker request may still wait in a raylet's queue
(no CPU free), or a worker may have been granted it a moment ago. A worker started for a
dead actor would stay ``ACTOR``, holding its resources, for as long as the node runs: the
next driver's tasks would wait for ever.

So when the GCS declares such an actor dead it withdraws the creation from the raylet
(``WithdrawActorCreation``: the waiting request is answered, a worker already granted is
killed), and the placement looks at the actor's state again after each step, which covers
the other order: a request that reached the raylet only after the withdrawal is granted,
and its worker is then discarded the same way. An actor whose ``__init__`` raised is dead
too: its worker goes as well, as Ray's does. One whose worker died during ``__init__`` is
restarted while its ``max_restarts`` allow (``actor_failure`` decides, once per death).

These functions decide; ``actor_manager`` does the RPCs, never under its lock.
"""

from __future__ import annotations

DEAD = "DEAD"
# The cause the raylet gets (its log, the discarded worker's exit reason) is one line:
# an ``__init__`` that raised has its whole traceback in the actor's death cause.
CAUSE_LIMIT = 200

# After the raylet answered the request for a worker:
CREATE = "create"  # granted, and the actor still wants it: run __init__ on it
# no worker (refused, raylet unreachable), or after __init__ a failure: restart or die,
# as any failure (``actor_failure``)
FAIL = "fail"
WITHDRAWN = "withdrawn"  # the actor died meanwhile and no worker came: nothing to undo
DISCARD = "discard"  # the actor is dead but holds a worker: the raylet must kill it
# How the creation task ended:
RETURNED = "returned"
RAISED = "raised"
WORKER_DIED = "worker_died"  # the task stream ended: the worker process is gone
# After __init__ ran (also DISCARD and FAIL):
ALIVE = "alive"  # __init__ returned: the actor is ALIVE on that worker
SUPERSEDED = "superseded"  # its worker's death was counted already: another incarnation
                           # is under way, whose creation must not be withdrawn


def after_lease(actor_state: str, granted: bool) -> str:
    """What to do with the raylet's answer to the request for the actor's worker
    (``granted`` False also for an RPC that failed)."""
    if actor_state == DEAD:
        return DISCARD if granted else WITHDRAWN
    return CREATE if granted else FAIL


def after_init(actor_state: str, current: bool, outcome: str) -> str:
    """What to do once the creation task is over: ``current`` says whether its worker is
    still the actor's current one (the raylet's report of that worker's death, counted
    first, made it not), ``outcome`` how the task ended. An actor declared dead meanwhile
    stays dead, whatever ``__init__`` did, and its worker is discarded. A failure
    (``__init__`` raised, the worker died) is for ``actor_failure`` to decide."""
    if actor_state == DEAD:
        return DISCARD
    if not current:
        return SUPERSEDED
    return ALIVE if outcome == RETURNED else FAIL


def one_line_cause(cause: str) -> str:
    """An actor's death cause on one line of at most ``CAUSE_LIMIT`` characters: its
    first line, and the next one too when the first ends with a colon ("the actor's
    __init__ raised:" is followed by the error's own first line)."""
    lines = [line.strip() for line in cause.splitlines() if line.strip()]
    if not lines:
        return ""
    line = f"{lines[0]} {lines[1]}" if lines[0].endswith(":") and len(lines) > 1 else lines[0]
    return line if len(line) <= CAUSE_LIMIT else line[:CAUSE_LIMIT - 1] + "…"
