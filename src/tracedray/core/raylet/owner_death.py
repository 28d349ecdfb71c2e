"""Objects whose owner is gone: which ones a raylet frees, and how it learns of the death.

As in Ray, an object lives as long as its owner: the process that created it (a put's
caller; a task's caller for its returns, not the worker that ran the task and sealed
them). An owner that exits or dies can no longer count references, serve borrowers or
rebuild the object, so every copy of every object it owned goes, on every node: primary
copies, pulled copies and spill files. Left behind, they filled the store for good while
``tracedray memory`` found no reference to them, and the next driver failed with
``ObjectStoreFullError``.

A raylet learns that an owner is gone in four ways:

- the owner says so as it shuts down cleanly (``OwnerExiting``, sent to its own raylet
  and to those that hold its objects): "owner exited";
- a worker of this node exits (the raylet is its parent): "owner exited" after exit
  status 0, "owner died" otherwise;
- the driver watch finds a driver of this node dead (``driver_watch.py``): "owner died";
- about once a second the raylet checks the owners of the objects it holds that none of
  the above covers: owners on other nodes (their node declared dead by the GCS, or their
  gRPC port refusing connections, probed as ``lease_reclaim.py`` probes lessees) and
  owners here it does not know (by pid). Only a sure death frees anything: an owner that
  does not answer in time keeps its objects.

Each death is remembered (:class:`DeadOwners`): an object sealed for an owner after it
went (a task's return that arrives once its caller left) goes at the next check. Copies
pulled to other nodes go too: the raylet that served the pull tells them
(``object_frees.py``), and they check their owners themselves.

:func:`check_owners`, :func:`deaths` and :func:`objects_to_free` decide, pure
functions; the raylet does the probing and the freeing.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Collection, Mapping
from dataclasses import dataclass

from tracedray.core.address import Address
from tracedray.core.raylet import lease_reclaim as lr

# Free reasons (beside the store's "released"), as the object.free spans and the
# store's counts say them.
OWNER_EXITED = "owner exited"
OWNER_DIED = "owner died"
# How many deaths a raylet remembers: far more than can seal objects in the second
# before the next check.
REMEMBERED_DEATHS = 10_000


@dataclass(frozen=True)
class OwnerGone:
    """An owner that exited or died, and the evidence."""

    worker_id: str
    reason: str  # OWNER_EXITED | OWNER_DIED
    why: str  # e.g. "process 42 is gone", "it shut down"
    pid: int = 0
    node_id: str = ""


def exited(owner: Address, why: str) -> OwnerGone:
    return OwnerGone(owner.worker_id, OWNER_EXITED, why, owner.pid, owner.node_id)


def died(owner: Address, why: str) -> OwnerGone:
    return OwnerGone(owner.worker_id, OWNER_DIED, why, owner.pid, owner.node_id)


def after_worker_exit(owner: Address, exit_code: int, meaning: str) -> OwnerGone:
    """A worker of this node exited: a clean exit (status 0) is the owner exiting, any
    other end (a signal, an error status) its death."""
    why = f"its worker process exited: {meaning}" if meaning else "its worker process exited"
    return (exited if exit_code == 0 else died)(owner, why)


@dataclass(frozen=True)
class OwnerCheck:
    gone: dict[str, OwnerGone]  # owners of held objects known gone: their objects go now
    probe: list[Address]  # owners whose liveness this round must tell


def check_owners(owners: Mapping[str, Address | None], dead: Mapping[str, OwnerGone], *,
                 local_alive: Collection[str]) -> OwnerCheck:
    """What to do about the owners of the objects held here (``owners``: worker id ->
    address, None when unknown): those known gone (``dead``) lose their objects now;
    those known alive here (``local_alive``: this node's live workers and registered
    drivers, whose deaths reach the raylet directly) keep them; the others are probed,
    unless nothing can tell of them (no address)."""
    gone: dict[str, OwnerGone] = {}
    probe: list[Address] = []
    for worker_id, address in owners.items():
        if worker_id in dead:
            gone[worker_id] = dead[worker_id]
        elif worker_id not in local_alive and address is not None:
            probe.append(address)
    return OwnerCheck(gone, probe)


def deaths(verdicts: Mapping[Address, lr.Verdict]) -> dict[str, OwnerGone]:
    """The owners the probes found surely dead (alive or unknown keep their objects)."""
    return {owner.worker_id: died(owner, verdict.why) for owner, verdict in verdicts.items()
            if verdict.liveness == lr.DEAD}


def objects_to_free(owned: Mapping[str, Collection[str]], gone: Mapping[str, OwnerGone]
                    ) -> list[tuple[OwnerGone, list[str]]]:
    """Each owner in ``gone`` that owns objects here (``owned``: worker id -> object
    ids), with those objects, in a stable order."""
    return [(gone[owner], sorted(object_ids)) for owner, object_ids in sorted(owned.items())
            if owner in gone and object_ids]


class DeadOwners:
    """The owners known gone, the most recent ``capacity`` of them; the first account
    of a death is kept. Not thread-safe: the raylet uses it under its lock."""

    def __init__(self, capacity: int = REMEMBERED_DEATHS) -> None:
        self._capacity = capacity
        self._gone: OrderedDict[str, OwnerGone] = OrderedDict()

    def add(self, gone: OwnerGone) -> OwnerGone:
        """Remember ``gone``; returns the death as remembered (an earlier account wins)."""
        known = self._gone.get(gone.worker_id)
        if known is not None:
            return known
        self._gone[gone.worker_id] = gone
        while len(self._gone) > self._capacity:
            self._gone.popitem(last=False)
        return gone

    def among(self, worker_ids: Collection[str]) -> dict[str, OwnerGone]:
        """The deaths known of ``worker_ids``."""
        return {w: self._gone[w] for w in worker_ids if w in self._gone}

    def __contains__(self, worker_id: object) -> bool:
        return worker_id in self._gone

    def __len__(self) -> int:
        return len(self._gone)
