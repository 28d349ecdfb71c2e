"""The head raylet's watch over the GCS: restart it, on the same port, when it dies.

Why the head raylet: it lives as long as the head node does (``tracedray start
--head`` exits right after starting the cluster, so the starting process cannot
watch), and everything that holds the GCS address — raylets, drivers, workers —
retries ``UNAVAILABLE`` and re-registers on its own, so a GCS back on the same
port is all recovery needs from us.  What the restarted GCS remembers is up to its
storage (with Redis: everything).

The death and the recovery are one ``gcs.restart`` span (from the moment the
death was noticed until the new GCS answered) plus ``gcs.died`` / ``gcs.restarted``
log lines.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import threading
import time
from dataclasses import dataclass

import psutil

from tracedray import logs
from tracedray.core.gcs.launch import GcsLaunchSpec
from tracedray.core.process import terminate
from tracedray.exceptions import RayError
from tracedray.telemetry.cluster_events import RayletEvents

log = logs.get_logger(__name__)
_events = RayletEvents(log)  # the head raylet runs the watch

_POLL_S = 0.2  # how quickly stop() is noticed while waiting for the GCS to die
_STOP_TIMEOUT_S = 5.0


def restart_delay(consecutive_failures: int, *, initial_s: float = 0.2,
                  maximum_s: float = 10.0) -> float:
    """Pause before the next restart attempt: none for the first, then exponential."""
    if consecutive_failures <= 0:
        return 0.0
    return float(min(initial_s * 2 ** (consecutive_failures - 1), maximum_s))


def describe_exit(returncode: int | None) -> str:
    """``"SIGKILL"``, ``"exit 1"``, or ``"unknown"`` for a process that is not our child."""
    if returncode is None:
        return "unknown (not a child of the supervisor)"
    if returncode < 0:
        try:
            return signal.Signals(-returncode).name
        except ValueError:
            return f"signal {-returncode}"
    return f"exit {returncode}"


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def wait_for_exit(pid: int, stop: threading.Event) -> bool:
    """Block until ``pid`` has exited (a zombie counts); False if ``stop`` was set first.

    A pidfd turns readable the moment the process exits, child or not; without one
    (old kernels) we poll.
    """
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    except (OSError, AttributeError):
        fd = -1
    try:
        while not stop.is_set():
            if fd >= 0:
                readable, _, _ = select.select([fd], [], [], _POLL_S)
                if readable:
                    return True
            elif not _alive(pid):
                return True
            else:
                stop.wait(_POLL_S)
        return False
    finally:
        if fd >= 0:
            os.close(fd)


@dataclass(frozen=True)
class SupervisorStatistics:
    running: bool
    gcs_pid: int
    restarts: int  # GCS processes started after a death
    failed_attempts: int  # restart attempts whose GCS did not come up
    last_downtime_s: float  # death noticed -> new GCS answering, for the last restart
    address: str


class GcsSupervisor:
    """Watches one GCS process and restarts it with ``spec`` when it dies.

    ``owner_pid``: the process the head belongs to (the driver of ``init()``); when it
    is gone the GCS died because the cluster is going away, so it is not restarted.
    """

    def __init__(self, spec: GcsLaunchSpec, gcs_pid: int, *, owner_pid: int = 0) -> None:
        if spec.port <= 0:
            raise ValueError("a supervised GCS needs its bound port (raylets hold that address)")
        self.spec = spec
        self._owner_pid = owner_pid
        self._pid = gcs_pid
        self._child: subprocess.Popen[bytes] | None = None  # a GCS we started, ours to reap
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._restarts = 0
        self._failed_attempts = 0
        self._last_downtime_s = 0.0

    @property
    def address(self) -> str:
        return f"{self.spec.host}:{self.spec.port}"

    def start(self) -> None:
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, daemon=True,
                                        name="tracedray-gcs-supervisor")
        self._thread.start()
        log.info("gcs.supervising", gcs_pid=self._pid, address=self.address,
                 storage=self.spec.storage)

    def stop(self) -> None:
        """Stop watching: a GCS death from now on is not restarted."""
        self._stopping.set()
        thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    def close(self) -> None:
        """``stop`` and terminate the GCS this supervisor started, if any."""
        self.stop()
        with self._lock:
            child, self._child = self._child, None
        if child is not None:
            terminate(child, _STOP_TIMEOUT_S)

    # --- the watch loop ------------------------------------------------------------------

    def _run(self) -> None:
        while wait_for_exit(self._pid, self._stopping):
            died = self._reap()
            if self._stopping.is_set():
                return
            if self._owner_pid > 0 and not _alive(self._owner_pid):
                log.info("gcs.exited_with_owner", gcs_pid=self._pid, owner_pid=self._owner_pid)
                return
            if not self._restart(died):
                return

    def _reap(self) -> str:
        with self._lock:
            child = self._child
        if child is not None and child.pid == self._pid:
            return describe_exit(child.wait())
        return describe_exit(None)

    def _restart(self, how: str) -> bool:
        """Start a new GCS until one comes up (or we are stopped); True once it is up."""
        from tracedray.core.node import launch_gcs

        noticed = time.monotonic()
        old_pid = self._pid
        restart = _events.gcs_restart(self.spec.storage, self.address, old_pid, how)
        failures = 0
        while not self._stopping.wait(restart_delay(failures)):
            try:
                # The new GCS watches us: if the head raylet goes, so does its GCS.
                process, _ = launch_gcs(self.spec, parent_pid=os.getpid(), detach=False)
            except RayError as exc:
                failures += 1
                with self._lock:
                    self._failed_attempts += 1
                restart.attempt_failed(failures, exc, restart_delay(failures))
                continue
            downtime = time.monotonic() - noticed
            with self._lock:
                self._child = process
                self._pid = process.pid
                self._restarts += 1
                self._last_downtime_s = downtime
            restart.restarted(process.pid, failures + 1, downtime)
            return True
        restart.stopped()
        return False

    def statistics(self) -> SupervisorStatistics:
        with self._lock:
            return SupervisorStatistics(
                running=self._thread is not None and self._thread.is_alive(),
                gcs_pid=self._pid, restarts=self._restarts,
                failed_attempts=self._failed_attempts, last_downtime_s=self._last_downtime_s,
                address=self.address)

    def __repr__(self) -> str:
        stats = self.statistics()
        return f"<GcsSupervisor {self.address} pid={stats.gcs_pid} restarts={stats.restarts}>"
