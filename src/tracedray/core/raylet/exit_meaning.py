"""What a worker's exit code or signal means, in words a user can act on; for a SIGKILL,
whether the OOM killer sent it and for which limit (from memory_evidence.py's counts)."""

from __future__ import annotations

import signal
from dataclasses import dataclass

_SIGNAL_MEANINGS = {
    "SIGKILL": "killed by the OS, often the OOM killer (or `kill -9`)",
    "SIGSEGV": "a crash in native code (segmentation fault in a C extension?)",
    "SIGABRT": "aborted by native code (a failed assertion in a C extension?)",
    "SIGTERM": "asked to terminate (shutdown, or `kill`)",
    "SIGBUS": "a bus error in native code (memory-mapped file truncated?)",
    "SIGFPE": "a floating point exception in native code",
    "SIGILL": "an illegal instruction (binary built for another CPU?)",
    "SIGINT": "interrupted (Ctrl-C)",
}


def describe_exit(returncode: int) -> tuple[int, str, str]:
    """From a Popen returncode: (shell-style exit code, signal name or "", meaning)."""
    if returncode < 0:
        signum = -returncode
        try:
            name = signal.Signals(signum).name
        except ValueError:
            name = f"signal {signum}"
        return 128 + signum, name, _SIGNAL_MEANINGS.get(name, "terminated by a signal")
    if returncode == 0:
        return 0, "", "exited normally"
    if returncode > 128 and returncode - 128 < 65:
        code, name, meaning = describe_exit(-(returncode - 128))
        return returncode, name, meaning
    if returncode == 1:
        return 1, "", "exited with an error (os._exit(1), sys.exit(1) or an uncaught exception)"
    return returncode, "", f"exited with status {returncode} (os._exit / sys.exit in user code?)"


# Why a SIGKILLed worker died (KillVerdict.cause).
CGROUP_OOM = "cgroup_oom"  # the OOM killer, for its cgroup's memory limit
NODE_OOM = "node_oom"  # the OOM killer, for the node's memory
NOT_OOM = "not_oom"  # another process's SIGKILL: no OOM kill was recorded where it would be
UNKNOWN = "unknown"  # nothing to tell by (no cgroup or kernel counters readable)


@dataclass(frozen=True)
class MemoryEvidence:
    """What the raylet read about memory around a worker's death; None where unknown.

    The OOM kill counts are those of the worker's life (after its start, less the ones
    already blamed for another worker's death): the kernel counts a kill in the
    victim's cgroup (``memory.events``/``memory.oom_control`` ``oom_kill``) and on the
    node (``/proc/vmstat`` ``oom_kill``) before it sends the SIGKILL."""

    cgroup: str = ""  # the worker's memory cgroup as /proc/<pid>/cgroup names it
    cgroup_oom_kills: int | None = None
    limit_bytes: int | None = None  # the lowest memory limit of that cgroup and its parents
    node_oom_kills: int | None = None
    peak_rss_bytes: int | None = None  # the worker's own peak resident set
    node_memory_percent: float | None = None  # in use when the exit was seen


@dataclass(frozen=True)
class KillVerdict:
    cause: str
    meaning: str
    node_memory_percent: float | None  # only where the node's memory is (or may be) the cause


def new_oom_kills(before: int | None, after: int | None,
                  blamed: int | None) -> tuple[int | None, int]:
    """(the OOM kills counted since ``before`` that no other death was blamed for, the
    count up to which kills are blamed now). ``blamed``: that count after the last death
    blamed on one (None: none yet). Pure; None where a count is unknown."""
    if before is None or after is None:
        return None, blamed or 0
    since = before if blamed is None else max(before, blamed)
    return max(0, after - since), max(after, blamed or 0)


def explain_sigkill(evidence: MemoryEvidence) -> KillVerdict:
    """Why a worker was SIGKILLed, from the evidence (pure)."""
    peak = (f"; the worker's peak RSS was {_mib(evidence.peak_rss_bytes)}"
            if evidence.peak_rss_bytes else "")
    in_cgroup = f"its cgroup ({evidence.cgroup})" if evidence.cgroup else "its cgroup"
    limit = evidence.limit_bytes
    if evidence.cgroup_oom_kills:
        if limit is not None:
            return KillVerdict(CGROUP_OOM, f"killed by the OOM killer: {in_cgroup} reached "
                               f"its memory limit of {_mib(limit)}{peak}", None)
        return KillVerdict(NODE_OOM, "killed by the OOM killer: the node ran out of memory "
                           f"({in_cgroup} has no memory limit){peak}",
                           evidence.node_memory_percent)
    if evidence.cgroup_oom_kills == 0:
        return KillVerdict(NOT_OOM, "killed by a SIGKILL from another process (`kill -9`, a "
                           "supervisor), not by the OOM killer: the kernel recorded no OOM "
                           f"kill in {in_cgroup}{peak}", None)
    if evidence.node_oom_kills:
        kills = f"{evidence.node_oom_kills} OOM kill{'s' * (evidence.node_oom_kills != 1)}"
        if limit is not None:
            return KillVerdict(CGROUP_OOM, f"probably killed by the OOM killer: the node "
                               f"recorded {kills} while it ran, and {in_cgroup} has a "
                               f"memory limit of {_mib(limit)}{peak}", None)
        return KillVerdict(NODE_OOM, f"probably killed by the OOM killer: the node recorded "
                           f"{kills} while it ran{peak}", evidence.node_memory_percent)
    if evidence.node_oom_kills == 0:
        return KillVerdict(NOT_OOM, "killed by a SIGKILL from another process (`kill -9`, a "
                           "supervisor), not by the OOM killer: the kernel recorded no OOM "
                           f"kill on the node while it ran{peak}", None)
    return KillVerdict(UNKNOWN, _SIGNAL_MEANINGS["SIGKILL"] + peak,
                       evidence.node_memory_percent)


def _mib(size: int | None) -> str:
    return f"{(size or 0) / (1 << 20):.0f} MiB"
