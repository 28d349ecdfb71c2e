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
too: its worker goes as well, as Ray's does.

These functions decide; ``actor_manager`` does the RPCs, never under its lock.
"""

from __future__ import annotations

DEAD = "DEAD"
# The cause the raylet gets (its log, the discarded worker's exit reason) is one line:
# an ``__init__`` that raised has its whole traceback in the actor's death cause.
CAUSE_LIMIT = 200

# After the raylet answered the request for a worker:
CREATE = "create"  # granted, and the actor still wants it: run __init__ on it
FAIL = "fail"  # no worker (refused, raylet unreachable): restart or die, as any failure
WITHDRAWN = "withdrawn"  # the actor died meanwhile and no worker came: nothing to undo
DISCARD = "discard"  # the actor is dead but holds a worker: the raylet must kill it
# After __init__ ran (also DISCARD):
ALIVE = "alive"  # __init__ returned: the actor is ALIVE on that worker
DIE = "die"  # __init__ raised (or its worker died): the actor is DEAD, its worker goes


def after_lease(actor_state: str, granted: bool) -> str:
    """What to do with the raylet's answer to the request for the actor's worker
    (``granted`` False also for an RPC that failed)."""
    if actor_state == DEAD:
        return DISCARD if granted else WITHDRAWN
    return CREATE if granted else FAIL


def after_init(actor_state: str, error: str) -> str:
    """What to do once the creation task is over: ``error`` is "" when ``__init__``
    returned, else the cause of death. An actor declared dead meanwhile stays dead,
    whatever ``__init__`` did, and its worker is discarded."""
    if actor_state == DEAD:
        return DISCARD
    return DIE if error else ALIVE


def one_line_cause(cause: str) -> str:
    """An actor's death cause on one line of at most ``CAUSE_LIMIT`` characters: its
    first line, and the next one too when the first ends with a colon ("the actor's
    __init__ raised:" is followed by the error's own first line)."""
    lines = [line.strip() for line in cause.splitlines() if line.strip()]
    if not lines:
        return ""
    line = f"{lines[0]} {lines[1]}" if lines[0].endswith(":") and len(lines) > 1 else lines[0]
    return line if len(line) <= CAUSE_LIMIT else line[:CAUSE_LIMIT - 1] + "…"
