"""Lease requests a driver no longer needs do not stay waiting at the raylet (a real
cluster started with the CLI, drivers in their own processes).

After a burst, up to 16 requests of the driver were left in the raylet's queue once its
tasks had all gone out on the leases it held. Granted one after another as its idle
leases went back, they leased it workers it had no task for, and a second driver's
request waited behind all of them (2,000 empty tasks on 2 CPUs: 16 requests left, 16
useless grants, the next driver's first task 0.65 s instead of 0.01-0.03 s).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from cli_support import isolated_root, run_json, start_head
from multinode_support import log_events, wait_for

from tracedray._proto.v1 import raylet_pb2
from tracedray.core.address import Address
from tracedray.core.gcs.client import GcsClient
from tracedray.core.protocol.raylet_client import LeaseCall, RayletClient
from tracedray.exceptions import RaySystemError

pytestmark = pytest.mark.integration

GRANTED, TIMEOUT = raylet_pb2.LeaseReply.GRANTED, raylet_pb2.LeaseReply.TIMEOUT
# A reply the raylet owes comes within this (a reply it does not owe would hang the test).
REPLY_S = 30.0

# A burst of empty tasks; on a line from stdin, prints its submitter's statistics.
BURST = textwrap.dedent("""
    import json, sys
    import tracedray as ray
    from tracedray.api import calls as api

    ray.init(address="auto")

    @ray.remote
    def empty():
        return None

    ray.get([empty.remote() for _ in range(2000)], timeout=120)
    print("BURST_DONE", flush=True)
    sys.stdin.readline()
    stats = api.global_worker().submitter.statistics()
    print(json.dumps({"withdrawn": stats.lease_requests_withdrawn_total,
                      "unneeded_grants": stats.unneeded_grants_total,
                      "pending": stats.pending_lease_requests}), flush=True)
    ray.shutdown()
""")

# Connected and ready; on a line from stdin, runs one task and prints how long it took.
FIRST_TASK = textwrap.dedent("""
    import sys, time
    import tracedray as ray

    ray.init(address="auto")

    @ray.remote
    def one():
        return 1

    print("READY", flush=True)
    sys.stdin.readline()
    start = time.monotonic()
    assert ray.get(one.remote(), timeout=60) == 1
    print("FIRST_TASK_S", time.monotonic() - start, flush=True)
    ray.shutdown()
""")


def _start(folder: Path, name: str, script: str, ready: str,
           env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    path = folder / f"{name}.py"
    path.write_text(script)
    driver = subprocess.Popen([sys.executable, str(path)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True, env={**os.environ, **(env or {})})
    assert driver.stdout is not None
    for line in driver.stdout:
        if line.strip() == ready:
            return driver
    raise AssertionError(f"{name} exited with {driver.wait()} before printing {ready}")


def _finish(driver: subprocess.Popen[str]) -> str:
    out, _ = driver.communicate("\n", timeout=90)
    assert driver.returncode == 0, out
    return out


def test_a_burst_leaves_no_request_waiting_and_the_next_driver_does_not_wait_behind_it(
        tmp_path: Path) -> None:
    with isolated_root(tmp_path):
        start_head()  # 2 CPUs
        (session,) = tmp_path.glob("session_2*")
        second = _start(tmp_path, "second", FIRST_TASK, "READY")
        # A linger of 1 s: each useless grant of a request left behind kept a worker for
        # a second or more, so that waiting behind 16 of them cannot pass for a slow start.
        burst = _start(tmp_path, "burst", BURST, "BURST_DONE",
                       env={"TRACEDRAY_LEASE_LINGER_S": "1.0"})
        try:
            # Withdrawn within a patience (half a linger) and a tick, well before the
            # burst's idle leases go back.
            wait_for(lambda: run_json("status")["nodes"][0]["pending"] == 0, 4.0,
                     "the burst's lease requests to leave the raylet's queue")
            took = float(_finish(second).split("FIRST_TASK_S")[1].split()[0])
            stats = json.loads(_finish(burst).strip().splitlines()[-1])
        finally:
            for driver in (second, burst):
                if driver.poll() is None:
                    driver.kill()
                    driver.wait()
        # It waited for the burst's leases to linger out (about a second), not for 16
        # useless grants of a second or more each.
        assert took < 5.0, took
        assert stats["unneeded_grants"] == 0 and stats["pending"] == 0, stats
        assert stats["withdrawn"] >= 1, stats
        withdrawn = log_events(session, "lease.requests_withdrawn")
        assert withdrawn and sum(r["requests"] for r in withdrawn) <= stats["withdrawn"]
        assert all(0 < r["waiting"] <= r["requests"] for r in withdrawn), withdrawn
        assert all(r["level"] == "info" and r["scheduling_key"] == "CPU=1@" for r in withdrawn)


def test_the_raylet_answers_exactly_the_requests_withdrawn(tmp_path: Path) -> None:
    with isolated_root(tmp_path):
        (node,) = GcsClient(start_head(num_cpus=1)).get_nodes()
        raylet = RayletClient(Address.from_proto(node.info.raylet).target)
        # This process as the lessee: alive, so the raylet does not reclaim its lease.
        me = Address(node.info.node_id, "127.0.0.1", 1, "test-requester", os.getpid())

        def ask(request_id: bytes) -> LeaseCall:
            return raylet.start_lease_request(raylet_pb2.LeaseRequest(
                scheduling_key="CPU=1@", resources={"CPU": 1.0}, requester=me.to_proto(),
                request_id=request_id))

        def queue(request_id: bytes) -> LeaseCall:
            """Ask, and wait until the request waits: requests sent together reach the
            raylet's queue in any order (each on its own server thread), and which one
            a returned worker goes to depends on that order."""
            waiting = raylet.node_stats().pending_leases
            call = ask(request_id)
            wait_for(lambda: raylet.node_stats().pending_leases == waiting + 1, 30,
                     f"request {request_id!r} to wait for the node's only CPU")
            return call

        def withdraw(*request_ids: bytes, requester: str = me.worker_id) -> int:
            return raylet.withdraw_lease_requests(requester, timeout=10,
                                                  request_ids=list(request_ids))

        holder = ask(b"hold").result(REPLY_S)
        assert holder.status == GRANTED, holder
        first, second, third = queue(b"1"), queue(b"2"), queue(b"3")

        assert withdraw(b"2") == 1
        reply = second.result(REPLY_S)
        assert reply.status == TIMEOUT and "no task of it needs" in reply.reason, reply
        assert withdraw(b"1", requester="another-process") == 0  # ids are per requester
        assert raylet.node_stats().pending_leases == 2
        # Withdrawn before it was sent: answered as it arrives, never queued.
        assert withdraw(b"4") == 0
        started = time.monotonic()
        assert ask(b"4").result(REPLY_S).status == TIMEOUT
        assert time.monotonic() - started < 5
        assert raylet.node_stats().pending_leases == 2

        raylet.return_worker(holder.lease_id)
        granted = first.result(REPLY_S)  # the oldest of those left
        assert granted.status == GRANTED, granted
        with pytest.raises(RaySystemError, match="did not answer the lease request"):
            third.result(0.2)  # no CPU for it: the wait gives up, the request stays
        assert raylet.node_stats().pending_leases == 1
        assert raylet.withdraw_lease_requests(me.worker_id, timeout=10) == 1  # all left
        assert third.result(REPLY_S).status == TIMEOUT
        raylet.return_worker(granted.lease_id)
        (node_status,) = run_json("status")["nodes"]
        assert node_status["pending"] == 0 and node_status["resources_available"]["CPU"] == 1
