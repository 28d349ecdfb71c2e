"""The telemetry agent's CPU priority: it must never compete with the runtime."""

from __future__ import annotations

import os
import subprocess
import sys

from tracedray.core.raylet.agent_process import NICENESS, lower_priority


def test_the_agent_gets_the_idle_policy_where_there_is_one_and_nice_19_anyway() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        policy = lower_priority(child.pid)
        assert os.getpriority(os.PRIO_PROCESS, child.pid) == NICENESS
        if hasattr(os, "SCHED_IDLE"):
            assert policy == "idle"
            assert os.sched_getscheduler(child.pid) == os.SCHED_IDLE
        else:
            assert policy == "nice"
    finally:
        child.kill()
        child.wait()
