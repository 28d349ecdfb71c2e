"""Reaping idle workers beyond the soft limit: the pure decisions, and the pool's
stop of a real process (a stand-in for a worker: the pool only sees a child)."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tracedray import config
from tracedray.core.raylet import idle_reaping as ir
from tracedray.core.raylet import worker_pool as wp
from tracedray.core.raylet import worker_states as ws
from tracedray.core.worker.exit_blockers import WorkState, exit_blockers
from tracedray.exceptions import ConfigError

W = ir.IdleWorker


def test_nothing_is_reaped_at_or_below_the_soft_limit() -> None:
    idle = [W("a", 0.0), W("b", 1.0)]
    assert ir.workers_to_reap(idle, live_workers=2, soft_limit=2, now=100.0,
                              threshold_s=1.0) == []
    assert ir.workers_to_reap(idle, live_workers=1, soft_limit=4, now=100.0,
                              threshold_s=1.0) == []


def test_only_the_excess_goes_oldest_idle_first() -> None:
    idle = [W("new", 8.0), W("old", 1.0), W("mid", 5.0)]
    # 5 live (2 of them leased or blocked), soft limit 3: two must go, the oldest two.
    assert ir.workers_to_reap(idle, live_workers=5, soft_limit=3, now=10.0,
                              threshold_s=1.0) == ["old", "mid"]
    # An excess larger than the idle workers stops only idle ones.
    assert ir.workers_to_reap(idle, live_workers=9, soft_limit=1, now=10.0,
                              threshold_s=1.0) == ["old", "mid", "new"]


def test_only_workers_idle_for_the_threshold_go() -> None:
    idle = [W("a", 9.5), W("b", 9.0), W("c", 8.99)]
    assert ir.workers_to_reap(idle, live_workers=4, soft_limit=1, now=10.0,
                              threshold_s=1.0) == ["c", "b"]  # idle 1.01 s and exactly 1 s
    assert ir.workers_to_reap(idle, live_workers=4, soft_limit=1, now=9.5,
                              threshold_s=1.0) == []


def test_a_busy_worker_is_kept_and_the_next_oldest_goes_instead() -> None:
    idle = [W("owner", 1.0, busy=True), W("b", 2.0), W("c", 3.0)]
    assert ir.workers_to_reap(idle, live_workers=3, soft_limit=2, now=10.0,
                              threshold_s=1.0) == ["b"]


def test_answers_count_only_for_the_idle_spell_they_were_given_in() -> None:
    asked = {W("free", 1.0): [], W("owner", 1.0): ["owns 1 object(s) still referenced"],
             W("silent", 1.0): None, W("leased-since", 1.0): []}
    now_idle = [W("free", 1.0), W("owner", 1.0), W("silent", 1.0),
                W("leased-since", 4.0),  # leased and idle again after it answered
                W("not-asked", 1.0)]
    marked = {w.worker_id: w.busy for w in ir.with_answers(now_idle, asked)}
    assert marked == {"free": False, "owner": True, "silent": True, "leased-since": True,
                      "not-asked": True}
    assert ir.workers_to_reap(ir.with_answers(now_idle, asked), live_workers=9, soft_limit=1,
                              now=10.0, threshold_s=1.0) == ["free"]


def test_soft_limit_defaults_to_the_cpu_count_and_is_at_least_one() -> None:
    assert ir.soft_limit(4.0, None) == 4
    assert ir.soft_limit(2.5, None) == 2
    assert ir.soft_limit(0.0, None) == 1
    assert ir.soft_limit(4.0, 6) == 6


def test_exit_blockers_name_what_would_be_lost() -> None:
    nothing = WorkState(0, 0, 0, 0, 0, 0, 0)
    assert exit_blockers(nothing) == []
    reasons = exit_blockers(WorkState(owned_objects=2, borrowed_objects=1, unfinished_tasks=3,
                                      held_leases=1, lease_requests=0, actor_calls=4,
                                      executing=1))
    assert reasons == ["owns 2 object(s) still referenced", "borrows 1 object(s)",
                       "submitted 3 task(s) not finished yet",
                       "holds 1 worker lease(s), 0 requested", "has 4 actor call(s) pending",
                       "is running or queueing 1 task(s)"]


def test_settings_are_parsed_strictly() -> None:
    assert config.IDLE_WORKER_TIMEOUT_S.get({}) == 1.0
    assert config.IDLE_WORKER_TIMEOUT_S.get({"TRACEDRAY_IDLE_WORKER_TIMEOUT_S": "0.25"}) == 0.25
    assert config.IDLE_WORKER_SOFT_LIMIT.get({}) is None
    assert config.IDLE_WORKER_SOFT_LIMIT.get({"TRACEDRAY_IDLE_WORKER_SOFT_LIMIT": "3"}) == 3
    with pytest.raises(ConfigError, match="TRACEDRAY_IDLE_WORKER_TIMEOUT_S"):
        config.IDLE_WORKER_TIMEOUT_S.get({"TRACEDRAY_IDLE_WORKER_TIMEOUT_S": "0"})
    with pytest.raises(ConfigError, match="TRACEDRAY_IDLE_WORKER_SOFT_LIMIT"):
        config.IDLE_WORKER_SOFT_LIMIT.get({"TRACEDRAY_IDLE_WORKER_SOFT_LIMIT": "0"})


# --- the pool stopping a real child process

_SLEEPER = "import sys, time; sys.stdout.write('ready\\n'); sys.stdout.flush(); time.sleep(60)"
_STUBBORN = ("import signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
             "sys.stdout.write('ready\\n'); sys.stdout.flush(); time.sleep(60)")


class _Pool:
    """A WorkerPool whose 'workers' are small Python children running ``script``."""

    def __init__(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.exits: list[wp.WorkerProcess] = []
        self.exited = threading.Condition()
        # Cleared: exits wait to be handled, as they wait for the raylet's lock.
        self.gate = threading.Event()
        self.gate.set()
        self.script = _SLEEPER
        real_popen = subprocess.Popen

        def popen(command: list[str], **kwargs: Any) -> subprocess.Popen[bytes]:
            kwargs["stdout"] = subprocess.PIPE
            return real_popen([sys.executable, "-c", self.script], **kwargs)

        monkeypatch.setattr(wp.subprocess, "Popen", popen)
        self.pool = wp.WorkerPool(node_id="n" * 8, ip="127.0.0.1", raylet_port=1,
                                  gcs_address="127.0.0.1:1", session_dir=tmp_path,
                                  object_path_prefix=str(tmp_path / "obj-"),
                                  on_exit=self._on_exit)

    def _on_exit(self, worker: wp.WorkerProcess) -> None:
        self.gate.wait(30)
        with self.exited:
            self.exits.append(worker)
            self.exited.notify_all()

    def start_idle(self) -> wp.WorkerProcess:
        worker = self.pool.start_worker(f"w{len(self.pool.workers)}")
        assert worker.process.stdout is not None
        assert worker.process.stdout.readline() == b"ready\n"  # its SIGTERM handler is set
        return worker

    def wait_exit(self, count: int, timeout_s: float) -> None:
        with self.exited:
            assert self.exited.wait_for(lambda: len(self.exits) >= count, timeout_s)


@pytest.fixture
def pool(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[_Pool]:
    fake = _Pool(tmp_path, monkeypatch)
    try:
        yield fake
    finally:
        fake.pool.kill_all(timeout_s=1.0)
        for worker in fake.pool.workers.values():
            if worker.process.stdout is not None:
                worker.process.stdout.close()


def test_stop_idle_terminates_and_counts_it_as_an_intended_idle_exit(pool: _Pool) -> None:
    kept, reaped = pool.start_idle(), pool.start_idle()
    pool.gate.clear()
    pool.pool.stop_idle(reaped.worker_id, "reaped as idle by the raylet: idle 1.2s")
    assert reaped.kill_intended and reaped.stop_reason == ws.STOP_IDLE
    assert pool.pool.reaped_total == 1 and pool.pool.started_total == 2
    pool.gate.set()
    pool.wait_exit(1, timeout_s=10)
    assert pool.exits == [reaped] and kept.process.poll() is None
    assert reaped.exit_signal == "SIGTERM"
    assert reaped.exit_meaning.startswith("reaped as idle by the raylet: idle 1.2s; ")
    assert pool.pool.exited() == [reaped]


def test_a_worker_ignoring_sigterm_is_killed_after_the_grace(pool: _Pool) -> None:
    pool.script = _STUBBORN
    worker = pool.start_idle()
    started = time.monotonic()
    pool.pool.stop_idle(worker.worker_id, "reaped as idle by the raylet")
    pool.wait_exit(1, timeout_s=wp.STOP_GRACE_S + 10)
    assert time.monotonic() - started >= wp.STOP_GRACE_S - 0.1
    assert worker.exit_signal == "SIGKILL" and worker.kill_intended


def test_a_kill_records_why_before_the_signal(pool: _Pool) -> None:
    worker = pool.start_idle()
    pool.pool.kill(worker.worker_id, True, reason=ws.STOP_NOT_REGISTERED,
                   meaning="killed by the raylet: it did not register")
    pool.wait_exit(1, timeout_s=10)
    assert worker.kill_intended and worker.stop_reason == ws.STOP_NOT_REGISTERED
    assert worker.exit_signal == "SIGKILL"
    assert worker.exit_meaning.startswith("killed by the raylet: it did not register; ")


def test_the_gcs_hears_of_an_actor_workers_exit_unless_it_asked_for_it() -> None:
    assert ws.exit_concerns_the_gcs(b"a", "")  # crashed: the actor fails
    assert ws.exit_concerns_the_gcs(b"a", ws.STOP_KILLED)  # kill()
    for stop in ws.STOPS_FOR_THE_GCS:
        assert not ws.exit_concerns_the_gcs(b"a", f"{stop}: why")
    assert not ws.exit_concerns_the_gcs(b"", "")


# --- workers stuck at start
def test_only_workers_still_starting_after_the_timeout_are_stuck() -> None:
    started = [("stuck", 0.0), ("young", 50.0), ("edge", 40.0)]
    assert ir.not_registered_in_time(started, 100.0, 60.0) == ["stuck", "edge"]
    assert ir.not_registered_in_time(started, 30.0, 60.0) == []
