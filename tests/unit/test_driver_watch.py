"""Drivers that die without finishing their job: the pure judgement over a round of
probes, and the probes themselves (real processes and sockets)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator

import psutil
import pytest

from tracedray.core.address import Address
from tracedray.core.raylet import driver_watch as dw
from tracedray.core.raylet import lease_reclaim as lr

JOB = bytes.fromhex("01000000")
GONE = lr.Verdict(lr.DEAD, "process 42 is gone")
RUNS = lr.Verdict(lr.ALIVE, "process 42 runs")
REFUSED = lr.Verdict(lr.DEAD, "127.0.0.1:4000 refuses connections")
SILENT = lr.Verdict(lr.UNKNOWN, "127.0.0.1:4000 did not answer: TimeoutError()")
ACCEPTS = lr.Verdict(lr.ALIVE, "127.0.0.1:4000 accepts connections")


def driver(worker_id: str, *, local: bool, pid: int = 42, port: int = 4000) -> dw.WatchedDriver:
    return dw.WatchedDriver(worker_id, JOB, Address("node", "127.0.0.1", port, worker_id, pid),
                            1000.0 if local else None)


LOCAL, BY_PORT = driver("local", local=True), driver("by-port", local=False)


def test_a_driver_whose_process_is_gone_is_dead_at_once() -> None:
    judged = dw.judge([LOCAL], {"local": GONE}, {})
    assert judged.dead == [(LOCAL, GONE.why)] and judged.refusals == {}


@pytest.mark.parametrize("verdict", [RUNS, lr.Verdict(lr.UNKNOWN, "process 42: OSError()")])
def test_a_driver_whose_process_runs_or_cannot_be_told_lives(verdict: lr.Verdict) -> None:
    assert dw.judge([LOCAL], {"local": verdict}, {}) == dw.Judgement([], {})


def test_a_driver_watched_by_its_port_dies_only_after_refusals_in_a_row() -> None:
    refusals: dict[str, int] = {}
    for round_ in range(1, dw.REFUSALS_FOR_DEATH):
        judged = dw.judge([BY_PORT], {"by-port": REFUSED}, refusals)
        assert judged.dead == [], round_
        refusals = judged.refusals
        assert refusals == {"by-port": round_}
    judged = dw.judge([BY_PORT], {"by-port": REFUSED}, refusals)
    assert judged.dead == [(BY_PORT, f"{REFUSED.why} ({dw.REFUSALS_FOR_DEATH} times in a row)")]
    assert judged.refusals == {}


@pytest.mark.parametrize("verdict", [ACCEPTS, SILENT])
def test_an_answer_or_a_timeout_starts_the_count_again(verdict: lr.Verdict) -> None:
    # A driver that is slow or partitioned away does not answer: that is no evidence.
    almost = {"by-port": dw.REFUSALS_FOR_DEATH - 1}
    judged = dw.judge([BY_PORT], {"by-port": verdict}, almost)
    assert judged == dw.Judgement([], {})
    assert dw.judge([BY_PORT], {"by-port": REFUSED}, judged.refusals).dead == []


def test_a_driver_without_a_verdict_keeps_its_count_and_its_life() -> None:
    judged = dw.judge([LOCAL, BY_PORT], {}, {"by-port": 1})
    assert judged == dw.Judgement([], {"by-port": 1})


def test_counts_of_drivers_no_longer_watched_are_dropped() -> None:
    judged = dw.judge([LOCAL], {"local": RUNS}, {"gone-by-port": 2})
    assert judged.refusals == {}


def test_each_driver_is_judged_on_its_own_verdict() -> None:
    other = driver("other", local=True, pid=43)
    judged = dw.judge([LOCAL, other, BY_PORT],
                      {"local": RUNS, "other": GONE, "by-port": REFUSED}, {})
    assert judged.dead == [(other, GONE.why)] and judged.refusals == {"by-port": 1}


# --- the probes
@pytest.fixture
def listener() -> Iterator[tuple[subprocess.Popen[str], int]]:
    """A process that listens on a port, like a driver's gRPC server."""
    code = ("import socket, sys\n"
            "s = socket.create_server(('127.0.0.1', 0))\n"
            "print(s.getsockname()[1], flush=True)\n"
            "sys.stdin.read()\n")
    process = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None
    port = int(process.stdout.readline())
    yield process, port
    process.kill()
    process.wait()


def test_a_process_listening_on_the_drivers_port_is_identified(
        listener: tuple[subprocess.Popen[str], int]) -> None:
    process, port = listener
    assert dw.identify_local_process(process.pid, port) == psutil.Process(process.pid).create_time()


def test_a_pid_here_that_does_not_listen_on_the_drivers_port_is_not_the_driver(
        listener: tuple[subprocess.Popen[str], int]) -> None:
    # A driver in another container sharing the network: its pid names another process.
    process, port = listener
    assert dw.identify_local_process(os.getpid(), port) is None
    assert dw.identify_local_process(process.pid, port + 1 if port < 65535 else 1) is None
    assert dw.identify_local_process(0, port) is None


def test_a_killed_driver_process_is_dead(listener: tuple[subprocess.Popen[str], int]) -> None:
    process, port = listener
    started = dw.identify_local_process(process.pid, port)
    assert started is not None
    watched = dw.WatchedDriver("d", JOB, Address("node", "127.0.0.1", port, "d", process.pid),
                               started)
    assert dw.probe_driver(watched).liveness == lr.ALIVE
    process.kill()
    os.waitid(os.P_PID, process.pid, os.WEXITED | os.WNOWAIT)  # exited, not reaped: a zombie
    assert dw.probe_driver(watched).liveness == lr.DEAD
    process.wait()
    assert dw.probe_driver(watched) == lr.Verdict(lr.DEAD, f"process {process.pid} is gone")


def test_a_pid_reused_by_a_later_process_is_a_dead_driver() -> None:
    started = psutil.Process().create_time()
    verdict = dw.process_liveness_since(os.getpid(), started - 60.0)
    assert verdict.liveness == lr.DEAD and "another process" in verdict.why, verdict
    assert dw.process_liveness_since(os.getpid(), started).liveness == lr.ALIVE


def test_a_driver_not_known_here_is_probed_by_its_port() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        closed = int(sock.getsockname()[1])
    # Its pid is a live process here (this one): a pid means nothing for such a driver.
    watched = dw.WatchedDriver("d", JOB, Address("node", "127.0.0.1", closed, "d", os.getpid()),
                               None)
    assert dw.probe_driver(watched) == lr.Verdict(lr.DEAD,
                                                  f"127.0.0.1:{closed} refuses connections")
