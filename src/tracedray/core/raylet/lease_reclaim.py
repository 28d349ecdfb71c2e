"""Task leases whose holder died: which ones the raylet takes back, and how it tells.

A task lease belongs to the process that asked for it (its lessee: a driver, or a
worker submitting nested tasks), which returns it once it has no more work. A lessee
that dies first (SIGKILL, a crash, an exit that dropped its last returns) returns
nothing, and the worker would stay leased, its resources gone, for as long as the node
runs: the next driver's tasks would wait for ever. As Ray does when an owner dies, the
raylet kills such a worker (it may still be running the dead lessee's task, whose
result nobody will read); its exit releases the lease like any other worker exit.

Actor leases are not reclaimed here: an actor's lifetime is the GCS's to decide
(a detached actor outlives its creator), and the GCS withdraws the creation of an actor
it declared dead (``Raylet.withdraw_actor_creation``).

:func:`orphaned_leases` decides, a pure function of the leases and a verdict per
lessee; :func:`probe_lessee` does the I/O that gives the verdicts. Only a sure death
reclaims a lease: a lessee that does not answer in time is "unknown" and keeps it.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

import psutil

from tracedray.core.address import Address

ALIVE, DEAD, UNKNOWN = "alive", "dead", "unknown"
# How often the raylet looks for leases whose lessee died.
RECLAIM_INTERVAL_S = 1.0
# A lessee's gRPC port that does not accept within this long is "unknown", not dead.
PROBE_TIMEOUT_S = 0.5


@dataclass(frozen=True)
class Verdict:
    liveness: str  # ALIVE | DEAD | UNKNOWN
    why: str


@dataclass(frozen=True)
class HeldLease:
    """A task lease as the decision needs it: which worker, and who holds it."""

    lease_id: str
    worker_id: str
    worker_pid: int
    lessee: Address


def distinct_lessees(leases: Sequence[HeldLease]) -> list[Address]:
    """Each lessee once (in the order first seen): one probe per process per round."""
    return list(dict.fromkeys(lease.lessee for lease in leases))


def orphaned_leases(leases: Sequence[HeldLease], verdicts: Mapping[Address, Verdict]
                    ) -> list[tuple[HeldLease, Verdict]]:
    """The leases whose lessee is surely dead, with the verdict that says why. A lessee
    without a verdict, alive or unknown keeps its leases."""
    orphaned = []
    for lease in leases:
        verdict = verdicts.get(lease.lessee)
        if verdict is not None and verdict.liveness == DEAD:
            orphaned.append((lease, verdict))
    return orphaned


def probe_lessee(lessee: Address, *, local_node_id: str, dead_nodes: Collection[str],
                 timeout_s: float = PROBE_TIMEOUT_S) -> Verdict:
    """Whether ``lessee`` lives: its node declared dead by the GCS (``dead_nodes``, from
    the raylet's view of its peers), its process on this node, or else whether its gRPC
    port accepts a connection."""
    if lessee.node_id and lessee.node_id in dead_nodes:
        return Verdict(DEAD, f"its node {lessee.node_id[:12]} is DEAD")
    if lessee.node_id == local_node_id and lessee.pid > 0:
        return process_liveness(lessee.pid)
    if lessee.ip and lessee.port > 0:
        return port_liveness(lessee.ip, lessee.port, timeout_s)
    return Verdict(UNKNOWN, "neither a process on this node nor a port to probe")


def process_liveness(pid: int) -> Verdict:
    """A process on this node: gone, a zombie (exited, not yet reaped by its parent),
    or running."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return Verdict(DEAD, f"process {pid} is gone")
    except PermissionError:
        return Verdict(ALIVE, f"process {pid} runs (as another user)")
    except OSError as exc:
        return Verdict(UNKNOWN, f"process {pid}: {exc!r}")
    try:
        if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
            return Verdict(DEAD, f"process {pid} exited (a zombie, not yet reaped)")
    except psutil.NoSuchProcess:
        return Verdict(DEAD, f"process {pid} is gone")
    except psutil.Error:
        pass  # the signal said it exists: that is enough to keep its leases
    return Verdict(ALIVE, f"process {pid} runs")


def port_liveness(ip: str, port: int, timeout_s: float) -> Verdict:
    """A lessee elsewhere: a refused connection means nothing listens on its port any
    more; no answer in time (or another error) proves nothing."""
    try:
        with socket.create_connection((ip, port), timeout=timeout_s):
            return Verdict(ALIVE, f"{ip}:{port} accepts connections")
    except ConnectionRefusedError:
        return Verdict(DEAD, f"{ip}:{port} refuses connections")
    except OSError as exc:
        return Verdict(UNKNOWN, f"{ip}:{port} did not answer: {exc!r}")
