"""A GCS that was itself stalled does not declare live nodes dead: the time it did not
run is left out of their heartbeat silence (real processes; the GCS stopped with
SIGSTOP for twice the death timeout, as a starved machine or a swapped-out GCS would
stop it)."""

from __future__ import annotations

import os
import signal
import time

import pytest
from multinode_support import log_events, started_nodes, wait_for

from tracedray.core.gcs.client import GcsClient

pytestmark = pytest.mark.integration

DEATH_TIMEOUT_S = 2.0


def test_nodes_outlive_a_gcs_stopped_for_twice_the_death_timeout(
        no_leaks: None, monkeypatch: pytest.MonkeyPatch) -> None:
    with started_nodes(monkeypatch, {"num_cpus": 1},
                       {"b": {"num_cpus": 1, "resources": {"b": 1}}},
                       death_timeout_s=DEATH_TIMEOUT_S) as cluster:
        gcs = GcsClient(cluster.address)
        wait_for(lambda: len(gcs.get_nodes()) == 2, 30, "the second node to join")
        gcs_pid = cluster.nodes["head"].processes[0].pid
        stopped_s = 2 * DEATH_TIMEOUT_S
        os.kill(gcs_pid, signal.SIGSTOP)
        try:
            time.sleep(stopped_s)
        finally:
            os.kill(gcs_pid, signal.SIGCONT)
        # Its node watch runs every 0.3 s: a few rounds after it woke, nodes it took for
        # dead would be DEAD by now.
        time.sleep(1.5)

        nodes = gcs.get_nodes()
        assert [n.info.state for n in nodes] == ["ALIVE", "ALIVE"], [
            (n.info.node_id[:8], n.info.state, n.info.death_reason) for n in nodes]
        # The stop, and maybe shorter stalls of a busy machine.
        stall = max((r for r in log_events(cluster.session_dir, "gcs.stalled")
                     if r["level"] == "warning"), key=lambda r: float(r["stalled_s"]))
        assert stopped_s - 0.5 <= stall["stalled_s"] <= stopped_s + 3, stall
        assert "left out of nodes' heartbeat silence" in stall["why"]
        assert not log_events(cluster.session_dir, "node.dead")

        # And the cluster works across both nodes.
        cluster.runs_on("b")
