"""A GCS that was itself stalled does not declare live nodes dead: the time it did not
run is left out of their heartbeat silence (real processes; the GCS stopped with
SIGSTOP for twice the death timeout, as a starved machine or a swapped-out GCS would
stop it)."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from multinode_support import STORE, log_events, wait_for

from tracedray.core.gcs.client import GcsClient
from tracedray.core.node import NodeProcesses

pytestmark = pytest.mark.integration

DEATH_TIMEOUT_S = 2.0


@pytest.fixture
def two_nodes(no_leaks: None, monkeypatch: pytest.MonkeyPatch
              ) -> Iterator[tuple[NodeProcesses, NodeProcesses]]:
    """A head and a joined node ``{"b": 1}``."""
    from tracedray.core.node import join_node, start_head
    from tracedray.core.object_store.files import remove_orphans
    from tracedray.core.session import create_session

    monkeypatch.setenv("TRACEDRAY_HEARTBEAT_INTERVAL_S", "0.3")
    monkeypatch.setenv("TRACEDRAY_NODE_DEATH_TIMEOUT_S", str(DEATH_TIMEOUT_S))
    session = create_session()
    nodes = [start_head(session, num_cpus=1, object_store_memory=STORE)]
    try:
        nodes.append(join_node(session, nodes[0].gcs_address, num_cpus=1, resources={"b": 1},
                               object_store_memory=STORE, detach=False))
        yield nodes[0], nodes[1]
    finally:
        for node in reversed(nodes):
            node.stop()
        remove_orphans(Path("/dev/shm"), f"tracedray-{session.root.name[-24:]}")


def test_nodes_outlive_a_gcs_stopped_for_twice_the_death_timeout(
        two_nodes: tuple[NodeProcesses, NodeProcesses]) -> None:
    import tracedray

    head, b = two_nodes
    gcs = GcsClient(head.gcs_address)
    wait_for(lambda: len(gcs.get_nodes()) == 2, 30, "the second node to join")
    gcs_pid = head.processes[0].pid
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
    stall = max((r for r in log_events(head.session.root, "gcs.stalled")
                 if r["level"] == "warning"), key=lambda r: float(r["stalled_s"]))
    assert stopped_s - 0.5 <= stall["stalled_s"] <= stopped_s + 3, stall
    assert "left out of nodes' heartbeat silence" in stall["why"]
    assert not log_events(head.session.root, "node.dead")

    # And the cluster works across both nodes.
    tracedray.init(address=head.gcs_address)
    try:
        @tracedray.remote(resources={"b": 1})
        def on_b() -> str:
            return str(tracedray.get_runtime_context().get_node_id())

        assert tracedray.get(on_b.remote(), timeout=60) == b.node_id
    finally:
        tracedray.shutdown()
