"""Drivers registered with this raylet that die without finishing their job.

A driver finishes its job at the GCS (``shutdown()``, or the exit hook at interpreter
exit). One that is SIGKILLed or crashes hard finishes nothing: its job would stay
``RUNNING`` and its non-detached actors would hold their resources for as long as the
cluster runs. Every driver registers with a raylet (``init()`` picks one on its own
machine), telling it its pid, gRPC port and job; the raylet watches it, about once a
second, and reports a dead one to the GCS (``ReportDriverDeath``), which fails the job
unless it ended already (``gcs/job_end.py``). A driver whose node dies is the GCS's to
notice: this raylet died with it.

Only a sure death is reported: a driver that is slow, busy or unreachable keeps its job
and its actors. What counts:

- the driver's process, when the raylet could tell at registration that it runs on this
  machine: the process with that pid listens on the driver's gRPC port, and its start
  time is kept. Then the pid gone, a zombie, or another process (a later start time: the
  pid was reused) is a death. A pid alone would not do: a driver in another container
  that shares the node's network but not its processes has a pid that means another
  process here.
- otherwise its gRPC port: connections refused ``REFUSALS_FOR_DEATH`` times in a row
  (nothing listens there any more). No answer in time proves nothing and starts the
  count again.

:func:`judge` decides, a pure function of the drivers, the verdicts of one round of
probes and the refusals counted so far; :func:`probe_driver` and
:func:`identify_local_process` do the I/O.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import psutil

from tracedray.core.address import Address
from tracedray.core.raylet import lease_reclaim as lr

# Refused connections in a row (one per round, about a second apart) that make a driver
# not known to run on this machine dead.
REFUSALS_FOR_DEATH = 3
# A process whose start time differs from the driver's by more than this is another one.
START_TIME_TOLERANCE_S = 1.0


@dataclass(frozen=True)
class WatchedDriver:
    """A driver as the raylet watches it."""

    worker_id: str
    job_id: bytes
    address: Address  # its gRPC server: node, ip, port, worker id, pid
    # When its process started, if the raylet found it on this machine at registration;
    # None: the pid means nothing here, only its port can tell.
    process_started: float | None


@dataclass(frozen=True)
class Judgement:
    dead: list[tuple[WatchedDriver, str]]  # with the evidence
    refusals: dict[str, int] = field(default_factory=dict)  # worker id -> refused in a row


def judge(drivers: Sequence[WatchedDriver], verdicts: Mapping[str, lr.Verdict],
          refusals: Mapping[str, int]) -> Judgement:
    """Which drivers are surely dead after this round of probes (``verdicts`` by worker
    id), and the refusals counted for the others."""
    dead: list[tuple[WatchedDriver, str]] = []
    counted: dict[str, int] = {}
    for driver in drivers:
        verdict = verdicts.get(driver.worker_id)
        if verdict is None:  # not probed this round: the count stands
            if driver.worker_id in refusals:
                counted[driver.worker_id] = refusals[driver.worker_id]
            continue
        if driver.process_started is not None:
            if verdict.liveness == lr.DEAD:
                dead.append((driver, verdict.why))
            continue
        if verdict.liveness != lr.DEAD:  # it answered, or did not in time: no evidence
            continue
        refused = refusals.get(driver.worker_id, 0) + 1
        if refused >= REFUSALS_FOR_DEATH:
            dead.append((driver, f"{verdict.why} ({refused} times in a row)"))
        else:
            counted[driver.worker_id] = refused
    return Judgement(dead, counted)


def identify_local_process(pid: int, port: int) -> float | None:
    """The start time of process ``pid`` on this machine if it is the driver, which
    listens on ``port``; None when no such process is here, it is another one, or it is
    not ours to inspect (another user's)."""
    if pid <= 0 or port <= 0:
        return None
    try:
        process = psutil.Process(pid)
        listening = any(c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port
                        for c in process.net_connections(kind="tcp"))
        return process.create_time() if listening else None
    except psutil.Error:
        return None


def probe_driver(driver: WatchedDriver, timeout_s: float = lr.PROBE_TIMEOUT_S) -> lr.Verdict:
    """Is the driver's process alive (on this machine), or else does its port accept?"""
    address = driver.address
    if driver.process_started is not None:
        return process_liveness_since(address.pid, driver.process_started)
    return lr.port_liveness(address.ip, address.port, timeout_s)


def process_liveness_since(pid: int, started: float) -> lr.Verdict:
    """Process ``pid`` on this machine, which started at ``started``: gone, a zombie, or
    its pid now another process's, is dead."""
    verdict = lr.process_liveness(pid)
    if verdict.liveness != lr.ALIVE:
        return verdict
    try:
        now_started = psutil.Process(pid).create_time()
    except psutil.NoSuchProcess:
        return lr.Verdict(lr.DEAD, f"process {pid} is gone")
    except psutil.Error:
        return verdict  # it exists: that is enough to keep its job
    if abs(now_started - started) > START_TIME_TOLERANCE_S:
        return lr.Verdict(lr.DEAD, f"process {pid} is gone (the pid is another process's now)")
    return verdict
