"""What the kernel recorded about a worker's memory: read at its start and at its death.

A SIGKILL alone does not say whether the OOM killer sent it. The kernel counts each OOM
kill in the victim's memory cgroup (cgroup v2 ``memory.events``, v1
``memory.oom_control``: ``oom_kill``) and on the node (``/proc/vmstat``: ``oom_kill``),
before it sends the signal. The raylet reads those counts when it starts a worker and
again when it reaps it; the worker's cgroup is the one it was started in (a dead
process's ``/proc/<pid>/cgroup`` no longer names it). The limit in force is the lowest
``memory.max`` (v1: ``memory.limit_in_bytes``) of that cgroup and its parents, and the
worker's peak resident set comes with its exit status (``wait4``).
exit_meaning.explain_sigkill decides from these.
"""

from __future__ import annotations

import functools
import os
import subprocess
import threading
from dataclasses import dataclass
from pathlib import Path

import psutil

from tracedray.core.raylet.exit_meaning import MemoryEvidence, new_oom_kills

# A v1 limit at least this high is "no limit" (the kernel shows PAGE_COUNTER_MAX pages).
_V1_UNLIMITED = 1 << 62


@dataclass(frozen=True)
class Cgroup:
    name: str  # as /proc/<pid>/cgroup names it, e.g. "/user.slice/job-7"
    directory: Path  # where its files are
    top: Path  # the hierarchy's mount point: no parent above it is visible
    version: int  # 1 or 2


@dataclass(frozen=True)
class MemoryCounts:
    """OOM kill counts at one moment (None: not readable)."""

    cgroup: Cgroup | None
    cgroup_oom_kills: int | None
    node_oom_kills: int | None


@dataclass(frozen=True)
class _Mount:
    root: str  # the path inside the hierarchy that is mounted
    point: Path


def counts_for(pid: int, proc: Path = Path("/proc")) -> MemoryCounts:
    """The counts for process ``pid``'s memory cgroup and the node, now."""
    cgroup = memory_cgroup(pid, proc)
    return MemoryCounts(cgroup, cgroup_oom_kills(cgroup), node_oom_kills(proc))


def counts_again(before: MemoryCounts, proc: Path = Path("/proc")) -> MemoryCounts:
    """The same counts as ``before`` (same cgroup), now."""
    return MemoryCounts(before.cgroup, cgroup_oom_kills(before.cgroup), node_oom_kills(proc))


def memory_cgroup(pid: int, proc: Path = Path("/proc")) -> Cgroup | None:
    try:
        lines = (proc / str(pid) / "cgroup").read_text().splitlines()
        mountinfo = (proc / "self" / "mountinfo").read_text()
    except OSError:
        return None
    v1_path = v2_path = None
    for line in lines:
        hierarchy, controllers, path = (line.split(":", 2) + ["", ""])[:3]
        if hierarchy == "0" and not controllers:
            v2_path = path
        elif "memory" in controllers.split(","):
            v1_path = path
    v1_mount, v2_mount = _mounts(mountinfo)
    # A memory controller bound to a v1 hierarchy is not on the v2 one (hybrid setups).
    if v1_path is not None and v1_mount is not None:
        return _located(v1_path, v1_mount, 1)
    if v2_path is not None and v2_mount is not None:
        found = _located(v2_path, v2_mount, 2)
        if found is not None and (found.directory / "memory.events").exists():
            return found
    return None


def cgroup_oom_kills(cgroup: Cgroup | None) -> int | None:
    if cgroup is None:
        return None
    if cgroup.version == 1:
        if cgroup.name in ("", "/"):
            return None  # the root memcg: the node's own count says more
        return _field(cgroup.directory / "memory.oom_control", "oom_kill")
    return _field(cgroup.directory / "memory.events", "oom_kill")


def node_oom_kills(proc: Path = Path("/proc")) -> int | None:
    return _field(proc / "vmstat", "oom_kill")


def memory_limit(cgroup: Cgroup | None) -> int | None:
    """The lowest memory limit of ``cgroup`` and its visible parents; None: no limit."""
    if cgroup is None:
        return None
    name = "memory.limit_in_bytes" if cgroup.version == 1 else "memory.max"
    lowest: int | None = None
    directory = cgroup.directory
    while True:
        value = _limit(directory / name)
        if value is not None and (lowest is None or value < lowest):
            lowest = value
        if directory == cgroup.top or directory.parent == directory:
            return lowest
        directory = directory.parent


def wait_with_peak_rss(process: subprocess.Popen[bytes]) -> tuple[int, int | None]:
    """``process.wait()``, also returning the child's peak resident set in bytes (None if
    it could not be had: another thread reaped the child first)."""
    lock = getattr(process, "_waitpid_lock", None)  # Popen's own: poll() answers None meanwhile
    if lock is None or not hasattr(os, "wait4"):
        return process.wait(), None
    with lock:
        if process.returncode is None:
            try:
                _, status, usage = os.wait4(process.pid, 0)
            except ChildProcessError:
                pass
            else:
                process.returncode = os.waitstatus_to_exitcode(status)
                return process.returncode, usage.ru_maxrss * 1024  # Linux: KiB
    return process.wait(), None


class OomKillLedger:
    """The memory facts of SIGKILLed workers' exits, each OOM kill blamed once: the kills
    already blamed, per cgroup directory ("" = the node), so that workers sharing a
    cgroup do not each take the same kill."""

    def __init__(self) -> None:
        self._counted: dict[str, int] = {}
        self._lock = threading.Lock()

    def evidence(self, before: MemoryCounts | None, peak_rss: int | None) -> MemoryEvidence:
        """What was read when a worker died of SIGKILL (``before``: at its start)."""
        try:
            node_percent: float | None = psutil.virtual_memory().percent
        except (OSError, RuntimeError):
            node_percent = None
        if before is None:
            return MemoryEvidence(peak_rss_bytes=peak_rss, node_memory_percent=node_percent)
        try:
            after = counts_again(before)
            limit = memory_limit(before.cgroup)
        except (OSError, ValueError):
            return MemoryEvidence(peak_rss_bytes=peak_rss, node_memory_percent=node_percent)
        cgroup = before.cgroup
        with self._lock:
            counted = self._counted
            in_cgroup = node = None
            if cgroup is not None:
                key = str(cgroup.directory)
                in_cgroup, counted[key] = new_oom_kills(
                    before.cgroup_oom_kills, after.cgroup_oom_kills, counted.get(key))
            node, counted[""] = new_oom_kills(before.node_oom_kills, after.node_oom_kills,
                                              counted.get(""))
        return MemoryEvidence(cgroup.name if cgroup is not None else "", in_cgroup, limit, node,
                              peak_rss, node_percent)


def _located(path: str, mount: _Mount, version: int) -> Cgroup | None:
    root = mount.root.rstrip("/")
    if root and path != root and not path.startswith(root + "/"):
        return None  # the hierarchy mounted here does not hold this cgroup
    relative = path[len(root):].lstrip("/")
    return Cgroup(path, mount.point / relative if relative else mount.point, mount.point,
                  version)


@functools.lru_cache(maxsize=4)
def _mounts(mountinfo: str) -> tuple[_Mount | None, _Mount | None]:
    """(the v1 hierarchy holding the memory controller, the v2 hierarchy)."""
    v1 = v2 = None
    for line in mountinfo.splitlines():
        head, sep, tail = line.partition(" - ")
        fields, described = head.split(), tail.split()
        if not sep or len(fields) < 5 or len(described) < 3:
            continue
        mount = _Mount(_unescape(fields[3]), Path(_unescape(fields[4])))
        if described[0] == "cgroup" and "memory" in described[2].split(",") and v1 is None:
            v1 = mount
        elif described[0] == "cgroup2" and v2 is None:
            v2 = mount
    return v1, v2


def _unescape(text: str) -> str:
    # mountinfo writes space, tab, newline and backslash as octal escapes
    for escaped, plain in (("\\040", " "), ("\\011", "\t"), ("\\012", "\n"), ("\\134", "\\")):
        text = text.replace(escaped, plain)
    return text


def _field(path: Path, key: str) -> int | None:
    try:
        text = path.read_text()
    except OSError:
        return None
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name == key:
            try:
                return int(value)
            except ValueError:
                return None
    return None


def _limit(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    if text == "max":
        return None
    try:
        value = int(text)
    except ValueError:
        return None
    return None if value >= _V1_UNLIMITED else value
