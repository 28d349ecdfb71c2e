"""How a raylet frees objects: when their owner lets go, on the nodes that pulled
copies, and when their owner is gone (``owner_death.py`` decides which).

An object's owner tells only the raylet holding its primary copy to free it; copies
other nodes pulled from that raylet (``PullObject``) stayed in their stores, where no
reference counts them, until evicted. So the raylet that serves a pull remembers which
raylet it went to (:class:`CopyHolders`) and passes each free of the object on to it.

A free can overtake the copy it is meant for: passed on while the pull is still under
way, it finds nothing to free at the puller. So a free marks the transfer of the object
under way here (``transfers.TransferTable.mark_freed``), and the pull frees the copy it
just stored (:meth:`ObjectFrees.after_pull`).

Every free is an ``object.free`` span with its reason (the store's), and the store counts
frees by reason; a batch freed because its owner is gone is one ``objects.owner_gone``
log line (owner, why, objects, bytes).
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Collection, Iterable, Mapping
from concurrent.futures import Executor
from dataclasses import dataclass

from tracedray import logs
from tracedray.core.address import Address
from tracedray.core.object_store.store import FREE_RELEASED, ObjectStore
from tracedray.core.protocol.raylet_client import RayletClient
from tracedray.core.raylet import lease_reclaim as lr
from tracedray.core.raylet import owner_death as od
from tracedray.core.raylet.transfers import TransferTable
from tracedray.exceptions import RaySystemError

log = logs.get_logger(__name__)

# A raylet that does not take a passed-on free within this long keeps its copy (it
# checks the copy's owner itself; a copy of a released object stays until evicted).
PASS_ON_TIMEOUT_S = 10.0


class CopyHolders:
    """Object id -> the raylets that pulled a copy of it from here. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._holders: dict[str, set[Address]] = {}

    def add(self, object_id: str, raylet: Address) -> None:
        with self._lock:
            self._holders.setdefault(object_id, set()).add(raylet)

    def pop(self, object_ids: Iterable[str]) -> dict[Address, list[str]]:
        """Forget the holders of ``object_ids`` (freed here); returns each holder with
        the ids of those objects it pulled."""
        by_holder: dict[Address, list[str]] = {}
        with self._lock:
            for object_id in object_ids:
                for raylet in self._holders.pop(object_id, ()):
                    by_holder.setdefault(raylet, []).append(object_id)
        return by_holder

    def __len__(self) -> int:
        with self._lock:
            return len(self._holders)


@dataclass(frozen=True)
class ObjectFreeStatistics:
    owners_gone: int  # owners known to have exited or died (the most recent 10,000)
    freed_for_gone_owners: int  # objects freed here because their owner was gone
    passed_on: int  # frees passed on to raylets holding pulled copies
    objects_with_copies: int  # objects here that other nodes pulled copies of


class ObjectFrees:
    """The raylet's frees (see the module docstring). ``local_alive`` names the owners
    this node knows alive (its live workers and registered drivers, whose deaths reach
    the raylet directly), ``dead_nodes`` the nodes the GCS declared dead; both are read
    once per check of the owners."""

    def __init__(self, *, store: ObjectStore, transfers: TransferTable, node_id: str,
                 background: Executor, local_alive: Callable[[], Collection[str]],
                 dead_nodes: Callable[[], Collection[str]]) -> None:
        self._store = store
        self._transfers = transfers
        self._node_id = node_id
        self._bg = background
        self._local_alive = local_alive
        self._dead_nodes = dead_nodes
        self._lock = threading.Lock()
        self._dead_owners = od.DeadOwners()
        self.copy_holders = CopyHolders()
        self._freed_for_gone = 0
        self._passed_on = 0

    def free(self, object_ids: Collection[str], reason: str = FREE_RELEASED) -> int:
        """Free the objects here and pass the free on to the raylets that pulled copies
        of them from here; returns the bytes freed here."""
        self._transfers.mark_freed(object_ids, reason)
        freed = self._store.free(object_ids, reason)
        for raylet, pulled in self.copy_holders.pop(object_ids).items():
            with self._lock:
                self._passed_on += 1
            self._bg.submit(_pass_on, raylet, pulled, reason)
        return freed

    def after_pull(self, object_id: str) -> None:
        """A pull (still under way for ``transfers``) stored its copy: if the object was
        freed here meanwhile, the free was meant for this copy too."""
        reason = self._transfers.freed_during(object_id)
        if reason is not None:
            log.info("object.freed_during_pull", object_id=object_id, reason=reason)
            self.free([object_id], reason)

    def owner_gone(self, gone: od.OwnerGone) -> int:
        """Remember that an owner exited or died, and free what it owns here now (and
        the copies pulled from here); returns how many objects went."""
        with self._lock:
            gone = self._dead_owners.add(gone)
        return self._free_owned({gone.worker_id: gone})

    def check_owners(self) -> int:
        """Free the objects held here whose owner is gone: known gone, or found dead by
        this round's probes (owner_death.check_owners). Returns how many went."""
        owners = self._store.owners()
        if not owners:
            return 0
        with self._lock:
            known = self._dead_owners.among(owners)
        check = od.check_owners(owners, known, local_alive=self._local_alive())
        found: dict[str, od.OwnerGone] = {}
        if check.probe:
            probe = functools.partial(lr.probe_lessee, local_node_id=self._node_id,
                                      dead_nodes=self._dead_nodes())
            verdicts = dict(zip(check.probe, self._bg.map(probe, check.probe), strict=True))
            with self._lock:
                found = {w: self._dead_owners.add(g) for w, g in od.deaths(verdicts).items()}
        return self._free_owned({**check.gone, **found})

    def _free_owned(self, gone: Mapping[str, od.OwnerGone]) -> int:
        count = 0
        for owner, object_ids in od.objects_to_free(self._store.owned_by(gone), gone):
            freed = self.free(object_ids, owner.reason)
            count += len(object_ids)
            log.info("objects.owner_gone", owner_worker_id=owner.worker_id,
                     owner_pid=owner.pid, owner_node_id=owner.node_id, reason=owner.reason,
                     why=owner.why, objects=len(object_ids), bytes=freed,
                     node_id=self._node_id)
        with self._lock:
            self._freed_for_gone += count
        return count

    def statistics(self) -> ObjectFreeStatistics:
        with self._lock:
            return ObjectFreeStatistics(len(self._dead_owners), self._freed_for_gone,
                                        self._passed_on, len(self.copy_holders))

    def __repr__(self) -> str:
        s = self.statistics()
        return (f"<ObjectFrees owners_gone={s.owners_gone} "
                f"freed_for_gone_owners={s.freed_for_gone_owners} passed_on={s.passed_on}>")


def _pass_on(raylet: Address, object_ids: list[str], reason: str) -> None:
    try:
        RayletClient(raylet.target).free_objects([bytes.fromhex(i) for i in object_ids],
                                                 reason=reason, timeout=PASS_ON_TIMEOUT_S)
    except RaySystemError as exc:
        log.warning("objects.pass_on_failed", raylet=raylet.target, node_id=raylet.node_id,
                    objects=len(object_ids), reason=reason, error=str(exc))
