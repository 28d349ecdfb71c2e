"""Starting and stopping a node's telemetry agent process (``telemetry_agent.py`` is the
agent itself).

The raylet imports this module, not the agent's: what the agent runs (conversion,
indexing, rotation, export) is loaded in the agent's process only.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import sys
from pathlib import Path

from tracedray import config, logs
from tracedray.core.process import terminate

NICENESS = 19
STOP_TIMEOUT_S = 15.0  # a final conversion of a long burst's backlog takes seconds
AGENT_MODULE = "tracedray.core.raylet.telemetry_agent"

# Its lines keep the logger name they had when this code lived in the agent's module.
log = logs.get_logger(AGENT_MODULE)


def start_agent(session_dir: Path, node_id: str, *,
                only_pid: int = 0, ip: str = "") -> subprocess.Popen[bytes]:
    """Start this node's agent as a child of the calling (raylet) process.

    Its stdout is a pipe on which it says when its last conversion is done
    (:func:`stop_agent` waits for that). ``only_pid``: export that process's files only
    (a driver's own agent, in a session of its own: ``telemetry_agent.start_for_driver``).
    The session's trace index is created before the raylet starts
    (``node.start_raylet``).
    """
    # SIGTERM blocked from its first instruction until its handler is in place (main):
    # a node stopped while its agent still imports would lose that agent's conversion
    # and export; the blocked signal waits for the handler instead.
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGTERM])
    try:
        process = _spawn(session_dir, node_id, only_pid, ip)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
    lower_priority(process.pid)  # from its first instruction, not once it has started
    return process


def _spawn(session_dir: Path, node_id: str, only_pid: int, ip: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", AGENT_MODULE,
         "--session-dir", str(session_dir), "--node-id", node_id, "--ip", ip,
         "--parent-pid", str(os.getpid()),
         "--interval", str(config.TELEMETRY_AGENT_INTERVAL_S.get()),
         "--max-defer", str(config.TELEMETRY_AGENT_MAX_DEFER_S.get()),
         "--linger", str(config.OTLP_EXPORT_LINGER_S.get()),
         *(("--only-pid", str(only_pid)) if only_pid else ())],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL if only_pid else subprocess.PIPE,
        # A driver's own agent outlives the driver (it exports what the driver left) and
        # must not get the terminal's Ctrl-C.
        start_new_session=bool(only_pid))



def lower_priority(pid: int) -> str:
    """Give process ``pid`` (0: this one) the lowest CPU priority; returns the policy.

    Nice 19 alone still lets it preempt a task's process when it wakes and take ~1.5%
    of a busy core; ``SCHED_IDLE`` (Linux) does neither. The nice value is set too,
    for systems without it and for tools that only show niceness.
    """
    with contextlib.suppress(OSError):
        os.setpriority(os.PRIO_PROCESS, pid, NICENESS)
    idle = getattr(os, "SCHED_IDLE", None)
    if idle is None:
        return "nice"
    try:
        os.sched_setscheduler(pid, idle, os.sched_param(0))
    except OSError:
        return "nice"
    return "idle"


def stop_agent(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM: the agent converts what is left; SIGKILL if that takes too long.

    Waits for the agent to say its conversion is done (or to exit), not for its
    export: it may keep exporting, for up to TRACEDRAY_OTLP_EXPORT_LINGER_S, after the
    raylet (and the driver that started it) are gone.
    """
    if process.poll() is not None or process.stdout is None:
        terminate(process, STOP_TIMEOUT_S)
        return
    process.terminate()
    ready, _, _ = select.select([process.stdout], [], [], STOP_TIMEOUT_S)
    if not ready:  # neither the notice nor an exit (EOF) came: too long
        process.kill()
        process.wait()
    process.stdout.close()


