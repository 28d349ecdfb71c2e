"""A stalled node is SUSPECT, not dead, within the death timeout; a node the GCS declared
dead stops when it hears so (fencing): nothing runs under a dead node's identity."""

from __future__ import annotations

import os
import signal
import time

import psutil
import pytest
from cli_support import run_json
from multinode_support import log_events, started_nodes, wait_for

from tracedray.core.gcs.client import GcsClient

pytestmark = pytest.mark.integration


def test_a_stalled_node_is_suspect_then_alive_and_works(
        no_leaks: None, monkeypatch: pytest.MonkeyPatch) -> None:
    with started_nodes(monkeypatch, {"num_cpus": 1},
                       {"b": {"num_cpus": 1, "resources": {"b": 1}}},
                       death_timeout_s=30.0) as cluster:
        gcs = GcsClient(cluster.address)
        wait_for(lambda: len(gcs.get_nodes()) == 2, 30, "the second node to join")
        pid = cluster.raylet_pid("b")
        os.kill(pid, signal.SIGSTOP)
        try:
            time.sleep(3.0)  # ten heartbeat intervals
            rows = {r["node_id"]: r for r in run_json("status", "--address",
                                                      cluster.address)["nodes"]}
            stalled = rows[cluster.node_id("b")]
            assert stalled["state"] == "ALIVE" and stalled["suspect"], stalled
            assert "did not answer" in stalled["error"], stalled  # and status did not wait
            time.sleep(5.0)  # 8 s in all, as a starved machine stops a process
        finally:
            os.kill(pid, signal.SIGCONT)
        wait_for(lambda: not {r["node_id"]: r for r in run_json(
            "status", "--address", cluster.address)["nodes"]}[cluster.node_id("b")]["suspect"],
            15, "node b to be on time again")
        assert [n.info.state for n in gcs.get_nodes()] == ["ALIVE", "ALIVE"]
        cluster.runs_on("b")


def test_a_node_declared_dead_stops_when_it_hears_it(
        no_leaks: None, monkeypatch: pytest.MonkeyPatch) -> None:
    with started_nodes(monkeypatch, {"num_cpus": 1},
                       {"b": {"num_cpus": 1, "resources": {"b": 1}}},
                       death_timeout_s=2.0) as cluster:
        gcs = GcsClient(cluster.address)
        wait_for(lambda: len(gcs.get_nodes()) == 2, 30, "the second node to join")
        b = cluster.node_id("b")
        pid = cluster.raylet_pid("b")
        raylet = psutil.Process(pid)
        os.kill(pid, signal.SIGSTOP)
        try:
            wait_for(lambda: [n.info.state for n in gcs.get_nodes()
                              if n.info.node_id == b] == ["DEAD"], 30, "node b to be DEAD")
        finally:
            os.kill(pid, signal.SIGCONT)
        # Its next heartbeat is answered "declared dead": it stops, with its workers.
        raylet.wait(timeout=30)
        fenced = wait_for(lambda: log_events(cluster.session_dir, "node.fenced"), 15,
                          "the node.fenced log line")
        assert fenced[0]["node_id"] == b and "no heartbeat" in fenced[0]["death_reason"]
        assert [n.info.state for n in gcs.get_nodes() if n.info.node_id == b] == ["DEAD"]
