"""The drivers connected to this node: their addresses (asked for stacks and reference
tables), and a watch on those with a job, which tells the GCS when one dies
(``driver_watch.py`` decides from probes run without the lock)."""

from __future__ import annotations

import threading
from concurrent.futures import Executor

from tracedray import logs
from tracedray._proto.v1 import gcs_pb2
from tracedray.core.address import Address
from tracedray.core.gcs.client import GcsClient
from tracedray.core.raylet import driver_watch as dw
from tracedray.core.raylet import owner_death as od
from tracedray.core.raylet.object_frees import ObjectFrees
from tracedray.exceptions import RaySystemError

log = logs.get_logger(__name__)


class Drivers:
    def __init__(self, *, node_id: str, ip: str, gcs: GcsClient, background: Executor,
                 frees: ObjectFrees, stopped: threading.Event) -> None:
        self.node_id = node_id
        self.ip = ip
        self.gcs = gcs
        self._bg = background
        self.frees = frees
        self._stopped = stopped
        self._lock = threading.Lock()
        self._addresses: dict[str, Address] = {}
        # Drivers with a job, watched until they die (driver_watch.py), by worker id;
        # and how many times in a row each one's port refused, for those watched by port.
        self._watched: dict[str, dw.WatchedDriver] = {}
        self._refusals: dict[str, int] = {}

    def addresses(self) -> list[Address]:
        with self._lock:
            return list(self._addresses.values())

    def worker_ids(self) -> set[str]:
        with self._lock:
            return set(self._addresses)

    def register(self, worker_id: str, port: int, pid: int, job_id: bytes) -> None:
        """A driver connects (twice: before its server listens, then with its port and
        job). One with a job is watched: if it dies, the GCS is told."""
        address = Address(self.node_id, self.ip, port, worker_id, pid)
        started = dw.identify_local_process(pid, port) if job_id else None
        with self._lock:
            self._addresses[worker_id] = address
            if job_id:
                self._watched[worker_id] = dw.WatchedDriver(worker_id, job_id, address, started)

    def check(self) -> list[str]:
        """Report the watched drivers that surely died to the GCS; returns their worker
        ids. The probes run without the lock, one per driver (``driver_watch``)."""
        with self._lock:
            if self._stopped.is_set():
                return []
            drivers = list(self._watched.values())
        if not drivers:
            return []
        verdicts = dict(zip([d.worker_id for d in drivers], self._bg.map(dw.probe_driver, drivers),
                            strict=True))
        judgement = dw.judge(drivers, verdicts, self._refusals)
        with self._lock:
            self._refusals = judgement.refusals
            for driver, _ in judgement.dead:
                self._watched.pop(driver.worker_id, None)
                self._addresses.pop(driver.worker_id, None)  # nothing to ask it any more
        for driver, why in judgement.dead:
            self._bg.submit(self._report_driver_death, driver, why)
            self.frees.owner_gone(od.died(driver.address, f"its driver process died: {why}"))
        return [driver.worker_id for driver, _ in judgement.dead]

    def _report_driver_death(self, driver: dw.WatchedDriver, why: str) -> None:
        address = driver.address
        try:
            reply = self.gcs.report_driver_death(gcs_pb2.DriverDeath(
                job_id=driver.job_id, node_id=self.node_id, worker_id=driver.worker_id,
                pid=address.pid, why=why))
        except RaySystemError as exc:
            log.error("driver.death_report_failed", job_id=driver.job_id.hex(),
                      driver_pid=address.pid, error=str(exc))
            with self._lock:  # the next round finds it dead again and tells again
                if not self._stopped.is_set():
                    self._watched.setdefault(driver.worker_id, driver)
            return
        # A warning when its job ended with it; a driver that finished its job first
        # exited as it should.
        (log.warning if reply.job_ended else log.info)(
            "driver.exit", job_id=driver.job_id.hex(), driver_pid=address.pid,
            driver_worker_id=driver.worker_id, why=why, job_ended=reply.job_ended,
            job_state=reply.job_state)
