"""Find and stop this machine's tracedray node processes (``tracedray stop``).

Processes are recognised by their command line (``-m tracedray.core.raylet.main``,
``tracedray.core.gcs.main`` or ``tracedray.api.worker_main``, ``--session-dir DIR``),
and only those whose session lives under the given temp root are touched: another
user's or another test run's cluster is never stopped.
By default only detached nodes (``--parent-pid 0``, i.e. started by ``tracedray
start``) are stopped; a driver's private cluster dies with its driver.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

_MODULES = {"tracedray.core.raylet.main": "raylet", "tracedray.core.gcs.main": "gcs",
            "tracedray.api.worker_main": "worker"}
# Stop order: raylets first (they stop their workers and free their shared memory),
# then stray workers, then the GCS, which raylets report to while they shut down.
_ORDER = {"raylet": 0, "worker": 1, "gcs": 2}


@dataclass(frozen=True)
class NodeProcess:
    pid: int
    component: str  # raylet | gcs | worker
    session_dir: Path
    node_id: str
    parent_pid: int

    @property
    def detached(self) -> bool:
        return self.parent_pid == 0


@dataclass(frozen=True)
class StopReport:
    stopped: tuple[NodeProcess, ...]
    killed: tuple[NodeProcess, ...]  # did not exit after SIGTERM within the grace period
    shm_files_removed: int


def _option(cmdline: Sequence[str], name: str) -> str:
    try:
        return cmdline[cmdline.index(name) + 1]
    except (ValueError, IndexError):
        return ""


def parse_cmdline(pid: int, cmdline: Sequence[str]) -> NodeProcess | None:
    """A tracedray node process from its argv, or None."""
    if "-m" not in cmdline:
        return None
    component = _MODULES.get(_option(cmdline, "-m"))
    session = _option(cmdline, "--session-dir")
    if component is None or not session:
        return None
    parent = _option(cmdline, "--parent-pid")
    return NodeProcess(pid, component, Path(session), _option(cmdline, "--node-id"),
                       int(parent) if parent.isdigit() else 0)


def _under(path: Path, root: Path) -> bool:
    try:
        return path.resolve().is_relative_to(root.resolve())
    except OSError:
        return False


def select_to_stop(processes: Iterable[NodeProcess], temp_root: Path,
                   include_drivers_clusters: bool = False) -> list[NodeProcess]:
    """Which processes ``tracedray stop`` stops, in stop order."""
    sessions = {p.session_dir for p in processes
                if p.component != "worker" and (p.detached or include_drivers_clusters)
                and _under(p.session_dir, temp_root)}
    # Every node process of a chosen session: a GCS restarted by its supervising raylet
    # has that raylet as parent, yet belongs to the detached cluster all the same.
    chosen = [p for p in processes if p.session_dir in sessions]
    return sorted(chosen, key=lambda p: (_ORDER[p.component], p.pid))


def shm_prefixes(stopped: Iterable[NodeProcess]) -> set[str]:
    """Shared-memory file prefixes of stopped raylets (the raylet's own naming rule)."""
    from tracedray.core.object_store.files import store_name_prefix

    return {store_name_prefix(p.session_dir, p.node_id) for p in stopped
            if p.component == "raylet" and p.node_id}


def crashed_session_prefixes(temp_root: Path, live: Iterable[NodeProcess]) -> set[str]:
    """Prefixes of sessions under ``temp_root`` that no live process uses any more."""
    from tracedray.core.object_store.files import session_name_prefix

    live_sessions = {p.session_dir.resolve() for p in live}
    if not temp_root.is_dir():
        return set()
    return {session_name_prefix(d) for d in temp_root.glob("session_2*")
            if d.is_dir() and d.resolve() not in live_sessions}


def scan() -> list[NodeProcess]:
    import psutil

    found = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        try:
            parsed = parse_cmdline(proc.info["pid"], proc.info["cmdline"] or [])
        except (psutil.Error, TypeError):
            continue
        if parsed is not None and parsed.pid != os.getpid():
            found.append(parsed)
    return found


def stop(processes: Sequence[NodeProcess], temp_root: Path, *, grace_s: float = 10.0,
         force: bool = False, shm_dir: Path = Path("/dev/shm")) -> StopReport:
    """SIGTERM (or SIGKILL with ``force``) in stop order, then clean shared memory."""
    import psutil

    from tracedray.core.object_store import remove_orphans

    stopped: list[NodeProcess] = []
    killed: list[NodeProcess] = []
    for component in ("raylet", "worker", "gcs"):
        group = [p for p in processes if p.component == component]
        handles = {}
        for p in group:
            try:
                handle = psutil.Process(p.pid)
                handle.send_signal(signal.SIGKILL if force else signal.SIGTERM)
                handles[handle] = p
            except psutil.Error:
                continue  # already gone
        _, alive = psutil.wait_procs(list(handles), timeout=grace_s)
        for handle in alive:
            try:
                handle.kill()
            except psutil.Error:
                continue
            killed.append(handles[handle])
        psutil.wait_procs(alive, timeout=grace_s)
        stopped.extend(handles.values())
    removed = 0
    still_running = [p for p in scan() if p.pid not in {s.pid for s in stopped}]
    for prefix in shm_prefixes(stopped) | crashed_session_prefixes(temp_root, still_running):
        removed += remove_orphans(shm_dir, prefix)
    return StopReport(tuple(stopped), tuple(killed), removed)
