"""SIGKILL of the GCS with the default (embedded SQLite) storage: the head restarts it and
the small tables (nodes, jobs, named and detached actors, functions) come back whole."""

from __future__ import annotations

import os
import signal

import pytest
from test_gcs_restart import gcs_pids, wait_for_new_gcs

from tracedray.core.gcs.client import GcsClient

pytestmark = pytest.mark.integration


@pytest.mark.timeout(180)
def test_sigkill_of_the_gcs_with_sqlite_keeps_actors_and_jobs(no_leaks: None) -> None:
    import tracedray as ray

    info = ray.init(num_cpus=2, object_store_memory=64 << 20)
    try:
        @ray.remote
        class Counter:
            def __init__(self) -> None:
                self.n = 0

            def inc(self) -> int:
                self.n += 1
                return self.n

        counter = Counter.options(name="survivor", lifetime="detached").remote()
        assert ray.get(counter.inc.remote()) == 1
        gcs = GcsClient(info["address"])
        jobs_before = {j.job_id: j.state for j in gcs.get_jobs()}
        actors_before = {a.actor_id: (a.state, a.name) for a in gcs.list_actors()}

        [old_pid] = gcs_pids(info["session_dir"])
        os.kill(old_pid, signal.SIGKILL)  # before any flush could have run
        wait_for_new_gcs(info["session_dir"], old_pid)

        assert {j.job_id: j.state for j in gcs.get_jobs()} == jobs_before
        assert {a.actor_id: (a.state, a.name) for a in gcs.list_actors()} == actors_before
        again = ray.get_actor("survivor")
        assert ray.get(again.inc.remote(), timeout=60) == 2  # the same live actor
        ray.kill(again)
    finally:
        ray.shutdown()
