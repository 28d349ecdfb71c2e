"""A GCS call during a GCS outage: it waits out a restart (a named actor is found across
one) and, past its reconnect timeout, fails with GcsUnavailableError — never a hang and
never "no such actor" (real processes: the GCS SIGKILLed, its restart held back by stopping
the head raylet that supervises it)."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from typing import Any

import psutil
import pytest
from test_gcs_restart import gcs_pids, log_events, wait_for_new_gcs

import tracedray.api.calls
from tracedray.core.gcs.client import GcsClient
from tracedray.core.gcs.reconnect import ReconnectWindow
from tracedray.exceptions import GcsUnavailableError

pytestmark = pytest.mark.integration

RECONNECT_TIMEOUT_S = 2.0


def head_raylet_pid(session_dir: str) -> int:
    found = []
    for proc in psutil.Process().children(recursive=True):
        try:
            cmdline = proc.cmdline()
        except psutil.Error:  # a worker exiting meanwhile
            continue
        if "tracedray.core.raylet.main" in cmdline and session_dir in cmdline:
            found.append(proc.pid)
    [pid] = found
    return pid


@pytest.fixture
def cluster(no_leaks: None, monkeypatch: pytest.MonkeyPatch
            ) -> Iterator[tuple[Any, dict[str, Any]]]:
    import tracedray

    monkeypatch.delenv("TRACEDRAY_GCS_STORAGE", raising=False)  # the default, SQLite
    info = tracedray.init(num_cpus=1, object_store_memory=64 << 20)
    try:
        yield tracedray, info
    finally:
        tracedray.shutdown()


@pytest.mark.timeout(120)
def test_get_actor_waits_out_a_gcs_restart_then_an_outage_past_the_timeout_raises(
        cluster: tuple[Any, dict[str, Any]], monkeypatch: pytest.MonkeyPatch) -> None:
    ray, info = cluster
    session_dir = info["session_dir"]

    @ray.remote(num_cpus=0)
    class Named:
        def ping(self) -> int:
            return os.getpid()

    named_class: Any = Named
    actor = named_class.options(name="kept", lifetime="detached").remote()
    pid = ray.get(actor.ping.remote())

    # A restart (well within the timeout): get_actor made right after the kill waits for
    # the new GCS and finds the actor; "no such actor" here was the bug.
    [old_gcs] = gcs_pids(session_dir)
    os.kill(old_gcs, signal.SIGKILL)
    found = ray.get_actor("kept")
    assert ray.get(found.ping.remote()) == pid
    [new_gcs] = gcs_pids(session_dir)
    assert new_gcs != old_gcs

    # An outage longer than the timeout: nothing restarts the GCS while its supervisor
    # (the head raylet) is stopped. The driver's client gets the window that
    # TRACEDRAY_GCS_RECONNECT_TIMEOUT_S=2 would give it (the restart above, on a busy
    # machine, may take longer than that).
    monkeypatch.setattr(tracedray.api.calls.global_worker().gcs, "_window",
                        ReconnectWindow(RECONNECT_TIMEOUT_S))
    raylet = head_raylet_pid(session_dir)
    os.kill(raylet, signal.SIGSTOP)
    try:
        os.kill(new_gcs, signal.SIGKILL)
        started = time.monotonic()
        with pytest.raises(GcsUnavailableError) as caught:
            ray.get_actor("kept")
        waited = time.monotonic() - started
        # Sooner would not have waited for a restart; much later is a hang.
        assert RECONNECT_TIMEOUT_S - 0.3 <= waited <= RECONNECT_TIMEOUT_S + 5, waited
        message = str(caught.value)
        assert info["address"] in message and "TRACEDRAY_GCS_RECONNECT_TIMEOUT_S" in message
        assert "for 2.0s" in message or "for 2.1s" in message, message
        assert caught.value.waited_s >= RECONNECT_TIMEOUT_S
        # Any GCS call, not only get_actor.
        with pytest.raises(GcsUnavailableError):
            GcsClient(info["address"], reconnect_s=0.5).get_nodes()
    finally:
        os.kill(raylet, signal.SIGCONT)

    # Once the supervisor runs again the GCS is back, and so is the actor.
    wait_for_new_gcs(session_dir, new_gcs)
    GcsClient(info["address"], reconnect_s=60).get_nodes()  # answers
    again = ray.get_actor("kept")
    assert ray.get(again.ping.remote()) == pid
    ray.kill(again)

    # The driver's log tells each outage: when it began, how long it lasted, the give-up.
    events = [e for e in log_events(session_dir, "driver")
              if e["event"] in ("gcs.unreachable", "gcs.reconnected", "gcs.unavailable")]
    kinds = [e["event"] for e in events]
    assert kinds[:2] == ["gcs.unreachable", "gcs.reconnected"], kinds
    assert "gcs.unavailable" in kinds and kinds[-1] == "gcs.reconnected", kinds
    assert all(e["address"] == info["address"] for e in events)
    stats = tracedray.api.calls.global_worker().gcs.statistics()  # the window set above
    assert stats.outages == 1 and stats.gave_up >= 1 and stats.current_outage_s == 0.0
    assert stats.longest_outage_s >= RECONNECT_TIMEOUT_S
