"""Leases whose lessee died: the pure decision, and the probes that give the verdicts
(real processes and sockets)."""

from __future__ import annotations

import errno
import os
import socket
import subprocess
import sys
from collections.abc import Iterator

import pytest

from tracedray.core.address import Address
from tracedray.core.raylet import lease_reclaim as lr

NODE = "node-here"
DRIVER = Address(NODE, "127.0.0.1", 4000, "driver-1", 101)
WORKER = Address(NODE, "127.0.0.1", 4001, "worker-1", 102)
REMOTE = Address("node-there", "10.0.0.2", 4002, "driver-2", 103)


def held(lease_id: str, lessee: Address) -> lr.HeldLease:
    return lr.HeldLease(lease_id, f"w-{lease_id}", 1000, lessee)


def test_only_leases_of_a_dead_lessee_are_orphaned() -> None:
    leases = [held("a", DRIVER), held("b", WORKER), held("c", DRIVER), held("d", REMOTE)]
    dead = lr.Verdict(lr.DEAD, "process 101 is gone")
    verdicts = {DRIVER: dead, WORKER: lr.Verdict(lr.ALIVE, "process 102 runs"),
                REMOTE: lr.Verdict(lr.UNKNOWN, "10.0.0.2:4002 did not answer")}
    assert lr.orphaned_leases(leases, verdicts) == [(leases[0], dead), (leases[2], dead)]


def test_a_lessee_without_a_verdict_keeps_its_leases() -> None:
    assert lr.orphaned_leases([held("a", DRIVER)], {}) == []
    assert lr.orphaned_leases([], {DRIVER: lr.Verdict(lr.DEAD, "gone")}) == []


def test_each_lessee_is_probed_once_in_order_first_seen() -> None:
    leases = [held("a", WORKER), held("b", DRIVER), held("c", WORKER), held("d", DRIVER)]
    assert lr.distinct_lessees(leases) == [WORKER, DRIVER]


@pytest.fixture
def exited_pid() -> int:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()  # reaped: the pid names no process now
    return process.pid


@pytest.fixture
def zombie_pid() -> Iterator[int]:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    os.waitid(os.P_PID, process.pid, os.WEXITED | os.WNOWAIT)  # exited, not reaped
    yield process.pid
    process.wait()


def test_a_live_process_on_this_node_is_alive() -> None:
    verdict = lr.probe_lessee(DRIVER._replace(pid=os.getpid()), local_node_id=NODE,
                              dead_nodes=set())
    assert verdict.liveness == lr.ALIVE, verdict


def test_a_process_that_exited_is_dead(exited_pid: int) -> None:
    verdict = lr.probe_lessee(DRIVER._replace(pid=exited_pid), local_node_id=NODE,
                              dead_nodes=set())
    assert verdict == lr.Verdict(lr.DEAD, f"process {exited_pid} is gone")


def test_a_zombie_is_dead(zombie_pid: int) -> None:
    verdict = lr.process_liveness(zombie_pid)
    assert verdict.liveness == lr.DEAD and "zombie" in verdict.why, verdict


def test_a_process_of_another_user_is_alive(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(pid: int, signal: int) -> None:
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(lr.os, "kill", refuse)
    assert lr.process_liveness(1).liveness == lr.ALIVE


def test_a_lessee_on_a_dead_node_is_dead_without_a_probe() -> None:
    verdict = lr.probe_lessee(REMOTE, local_node_id=NODE, dead_nodes={"node-there"})
    assert verdict == lr.Verdict(lr.DEAD, "its node node-there is DEAD")


def _closed_port() -> int:
    """A port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_a_remote_lessee_whose_port_refuses_is_dead() -> None:
    port = _closed_port()
    verdict = lr.probe_lessee(REMOTE._replace(ip="127.0.0.1", port=port), local_node_id=NODE,
                              dead_nodes=set())
    assert verdict == lr.Verdict(lr.DEAD, f"127.0.0.1:{port} refuses connections")


def test_a_remote_lessee_whose_port_accepts_is_alive() -> None:
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        verdict = lr.probe_lessee(REMOTE._replace(ip="127.0.0.1", port=port),
                                  local_node_id=NODE, dead_nodes=set())
    assert verdict.liveness == lr.ALIVE, verdict


def test_a_lessee_on_another_node_is_judged_by_its_port_not_a_pid_here() -> None:
    # A pid means nothing on another node, even one alive here.
    elsewhere = REMOTE._replace(ip="127.0.0.1", port=_closed_port(), pid=os.getpid())
    assert lr.probe_lessee(elsewhere, local_node_id=NODE, dead_nodes=set()).liveness == lr.DEAD


def test_a_lessee_on_an_unreachable_node_is_unknown(monkeypatch: pytest.MonkeyPatch) -> None:
    def unreachable(address: tuple[str, int], timeout: float) -> socket.socket:
        raise OSError(errno.ENETUNREACH, "Network is unreachable")

    monkeypatch.setattr(lr.socket, "create_connection", unreachable)
    never_seen = REMOTE._replace(node_id="never-seen")
    verdict = lr.probe_lessee(never_seen, local_node_id=NODE, dead_nodes={"node-there"})
    assert verdict.liveness == lr.UNKNOWN, verdict


def test_a_timeout_is_unknown(monkeypatch: pytest.MonkeyPatch) -> None:
    def slow(address: tuple[str, int], timeout: float) -> socket.socket:
        raise TimeoutError("timed out")

    monkeypatch.setattr(lr.socket, "create_connection", slow)
    assert lr.port_liveness("10.0.0.2", 4002, 0.1).liveness == lr.UNKNOWN


def test_a_lessee_with_nothing_to_probe_is_unknown() -> None:
    nothing = Address("node-there", "", 0, "driver-3", 0)
    assert lr.probe_lessee(nothing, local_node_id=NODE, dead_nodes=set()).liveness == lr.UNKNOWN
