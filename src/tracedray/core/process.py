"""What every tracedray process does at start: telemetry, logs, and dying with its parent."""

from __future__ import annotations

import contextlib
import gc
import os
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any, NoReturn

from tracedray import logs, telemetry
from tracedray.metrics.snapshot import flush_process_metrics
from tracedray.telemetry import _host as telemetry_host


def setup_process(component: str, *, session_dir: Path, node_id: str = "",
                  config: dict[str, Any] | None = None, ip: str = "") -> None:
    """``ip``: the node's advertised address, which this process's log lines and span
    resources carry (``host.ip``); "" or a bind-all address: the default route's.

    Everything the process writes is its user's alone (umask 077: logs, traces,
    spools, spill files). Each main then takes the cluster's token from its
    environment (``auth.configure_from_environment``) where it reports start errors.
    """
    os.umask(0o077)
    session_id = session_dir.name
    telemetry_host.advertise_ip(ip)
    telemetry.configure(component, session_dir=session_dir, node_id=node_id,
                        session_id=session_id)
    logs.configure(component, session_dir=session_dir, node_id=node_id, session_id=session_id,
                   config=config or {})


def freeze_startup_objects() -> None:
    """Leave the objects alive once the runtime is up (modules, classes, the runtime's own
    tables) out of the cyclic garbage collector's later passes.

    Each ``.remote()`` allocates a dozen tracked objects, so the collector runs often, and
    its oldest generation scanned these ~70k objects each time: a quarter of the caller's
    CPU per ``.remote()`` (benchmarks/submission_parts.py). Frozen objects are still freed
    by reference counting; only a reference cycle among them is never collected.
    """
    gc.collect()
    gc.freeze()


def exit_with_parent(parent_pid: int, on_exit: Any = None, interval_s: float = 0.5) -> None:
    """Exit when ``parent_pid`` is gone (no orphaned clusters after a driver is killed)."""
    if parent_pid <= 0:
        return

    def watch() -> None:
        while True:
            time.sleep(interval_s)
            if os.getppid() != parent_pid and not process_alive(parent_pid):
                if on_exit is not None:
                    with contextlib.suppress(Exception):  # we are exiting anyway
                        on_exit()
                exit_now(0)

    threading.Thread(target=watch, daemon=True, name="tracedray-parent-watch").start()


def exit_now(code: int) -> NoReturn:
    """End this process at once (``os._exit``: no atexit, no thread joins), leaving the
    record whole: its ``process.exit`` line, its spans and its metrics' last counts.
    The process ends even when recording fails (its session folder removed under it: a
    GCS stopping with its parent while the folder went lingered for good)."""
    try:
        logs.record_process_exit(code)
        telemetry.force_flush(1.0)
        flush_process_metrics()
    finally:
        os._exit(code)


def process_alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie does not count)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return not _is_zombie(pid)


def _is_zombie(pid: int) -> bool:
    """A killed process its parent has not reaped yet still answers ``kill(pid, 0)``
    (a SIGKILLed raylet whose parent is a test or a driver): it is dead all the same."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat_file:
            stat = stat_file.read()
    except OSError:
        return False  # no /proc (not Linux): trust kill()
    return stat[stat.rfind(b")") + 2:][:1] == b"Z"


def exit_on_sigterm(on_exit: Any) -> None:
    def handler(signum: int, frame: Any) -> None:
        try:
            on_exit()
        finally:
            logs.record_process_exit(0)
            telemetry.shutdown()
            # os._exit skips atexit: a reaped worker's last counts would be lost.
            flush_process_metrics()
            os._exit(0)

    signal.signal(signal.SIGTERM, handler)


def terminate(process: subprocess.Popen[bytes], timeout_s: float) -> bool:
    """SIGTERM, wait up to ``timeout_s``, then SIGKILL: a child never outlives its stop.
    ``True`` when it had to be killed (it could not clean up after itself)."""
    if process.poll() is not None:
        return False
    process.terminate()
    try:
        process.wait(timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        return True
    return False
