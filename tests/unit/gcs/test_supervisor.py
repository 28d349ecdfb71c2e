"""The GCS supervisor: its pure decisions, its death watch, and a real restart on the same port."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tracedray.core import auth, node
from tracedray.core.gcs.client import GcsClient
from tracedray.core.gcs.launch import GcsLaunchSpec
from tracedray.core.gcs.supervisor import (
    GcsSupervisor,
    describe_exit,
    restart_delay,
    wait_for_exit,
)
from tracedray.core.session import SessionPaths


def test_restart_delay_is_immediate_then_exponential_and_capped() -> None:
    delays = [restart_delay(n, initial_s=0.2, maximum_s=1.0) for n in range(6)]
    assert delays == [0.0, 0.2, 0.4, 0.8, 1.0, 1.0]


def test_describe_exit() -> None:
    assert describe_exit(-signal.SIGKILL) == "SIGKILL"
    assert describe_exit(3) == "exit 3"
    assert describe_exit(None).startswith("unknown")


def test_wait_for_exit_sees_a_kill_and_honours_stop() -> None:
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        stop = threading.Event()
        stop.set()
        assert wait_for_exit(sleeper.pid, stop) is False  # stopped before it died
        outcome: list[bool] = []
        waiter = threading.Thread(target=lambda: outcome.append(
            wait_for_exit(sleeper.pid, threading.Event())))
        waiter.start()
        sleeper.kill()  # not reaped yet: a zombie must count as exited
        waiter.join(10)
        assert outcome == [True]
    finally:
        sleeper.kill()
        sleeper.wait()
    assert wait_for_exit(sleeper.pid, threading.Event()) is True  # already gone


def test_supervisor_needs_the_bound_port(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        GcsSupervisor(GcsLaunchSpec(tmp_path, "127.0.0.1", 0, "memory"), 1)


@pytest.mark.timeout(60)
def test_a_killed_gcs_comes_back_on_the_same_port(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    # The GCS and its restarts take the token from here; so does this test's client.
    monkeypatch.setenv("TRACEDRAY_AUTH_TOKEN", "supervisor-test-token-0123456789")
    session = SessionPaths(tmp_path / "session").ensure()
    spec = GcsLaunchSpec(session.root, "127.0.0.1", 0, "memory")
    first, port = node.launch_gcs(spec, parent_pid=os.getpid(), detach=False)
    supervisor = GcsSupervisor(spec.with_port(port), first.pid)
    # An earlier test's cluster may have had this port: the token this process remembers
    # for it would win over the environment's (auth.client_token).
    auth.forget(f"127.0.0.1:{port}")
    client = GcsClient(f"127.0.0.1:{port}")
    try:
        client.kv_put("before", b"1")
        supervisor.start()
        first.kill()
        first.wait()
        deadline = time.monotonic() + 30
        while supervisor.statistics().restarts < 1:
            assert time.monotonic() < deadline, "the GCS was not restarted"
            time.sleep(0.05)
        stats = supervisor.statistics()
        assert stats.gcs_pid != first.pid and stats.running and stats.failed_attempts == 0
        assert 0 < stats.last_downtime_s < 30
        assert client.cluster_status().storage.startswith("memory")  # answers on the same port
        client.kv_put("after", b"2")
        assert client.kv_get("after") == b"2"
    finally:
        supervisor.close()
        if first.poll() is None:
            first.kill()
            first.wait()
    assert not supervisor.statistics().running
    with pytest.raises(ProcessLookupError):
        os.kill(stats.gcs_pid, 0)  # close() terminated and reaped the GCS it started
