"""A real network partition: the head on the host side of a veth pair, node b behind it in a
network namespace of its own (addresses 10.201.x.1 and .2, made and removed here). Cutting
the link for longer than the death timeout gets b declared DEAD; once the link is back, b
hears it and stops: never DEAD and still running (no zombie, no duplicate execution)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest
from cli_support import isolated_root, run_json, start_head
from multinode_support import log_events, wait_for

from tracedray.core.gcs.client import GcsClient

pytestmark = pytest.mark.integration


@dataclass(frozen=True)
class Link:
    namespace: str
    host_if: str
    host_ip: str
    node_ip: str


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True, timeout=10)


@contextmanager
def veth_link() -> Iterator[Link]:
    """A network namespace joined to the host by a veth pair, removed at the end."""
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.skip("network namespaces need root and iproute2's `ip`")
    tag = f"{os.getpid() % 100_000}"
    subnet = f"10.201.{os.getpid() % 250}"
    link = Link(f"tdpart{tag}", f"tdh{tag}", f"{subnet}.1", f"{subnet}.2")
    node_if = f"tdn{tag}"
    try:
        _ip("netns", "add", link.namespace)
    except subprocess.CalledProcessError as exc:
        pytest.skip(f"cannot create a network namespace here: {exc.stderr.strip()}")
    try:
        _ip("link", "add", link.host_if, "type", "veth", "peer", "name", node_if)
        _ip("link", "set", node_if, "netns", link.namespace)
        _ip("addr", "add", f"{link.host_ip}/24", "dev", link.host_if)
        _ip("link", "set", link.host_if, "up")
        for command in (["addr", "add", f"{link.node_ip}/24", "dev", node_if],
                        ["link", "set", node_if, "up"], ["link", "set", "lo", "up"]):
            _ip("netns", "exec", link.namespace, "ip", *command)
        yield link
    finally:
        subprocess.run(["ip", "link", "del", link.host_if], capture_output=True, timeout=10)
        subprocess.run(["ip", "netns", "del", link.namespace], capture_output=True, timeout=10)


def test_a_partition_longer_than_the_death_timeout_leaves_no_zombie(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRACEDRAY_NODE_DEATH_TIMEOUT_S", "3")
    monkeypatch.setenv("TRACEDRAY_HEARTBEAT_INTERVAL_S", "0.3")
    with veth_link() as link, isolated_root(tmp_path):
        address = start_head("--node-ip-address", link.host_ip, num_cpus=1)
        subprocess.run(
            ["ip", "netns", "exec", link.namespace, sys.executable, "-m", "tracedray.cli.app",
             "start", "--address", address, "--node-ip-address", link.node_ip,
             "--num-cpus", "1", "--resources", '{"b": 1}',
             "--object-store-memory", str(64 << 20)],
            check=True, capture_output=True, text=True, timeout=120, env=os.environ)
        node_b = wait_for(lambda: next((n for n in run_json("list", "nodes")
                                        if n["ip"] == link.node_ip), None),
                          30, "node b to join")
        raylet = psutil.Process(node_b["pid"])

        gcs = GcsClient(address)

        def state_of_b() -> str:
            return next(n.info.state for n in gcs.get_nodes()
                        if n.info.node_id == node_b["node_id"])

        _ip("link", "set", link.host_if, "down")
        try:
            wait_for(lambda: state_of_b() == "DEAD", 30, "node b to be DEAD")
            assert raylet.is_running()  # cut off, it cannot know yet
            time.sleep(1.0)
        finally:
            _ip("link", "set", link.host_if, "up")

        # Its first heartbeat through the healed link is answered "declared dead".
        raylet.wait(timeout=30)
        session = next(tmp_path.glob("session_2*"))
        fenced = wait_for(lambda: log_events(session, "node.fenced"), 15, "node.fenced")
        assert fenced[0]["node_id"] == node_b["node_id"]
        assert state_of_b() == "DEAD"
