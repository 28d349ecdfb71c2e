"""A worker stuck at start (here: a sitecustomize that blocks, as a hung import would)
is killed once TRACEDRAY_WORKER_REGISTER_TIMEOUT_S has passed, and the lease waiting
for it gets another worker; before, the request waited for ever, and nothing said why.
A real cluster started with the CLI; the lease is asked for over the raylet's gRPC."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest
from cli_support import isolated_root, run_json, start_head
from multinode_support import log_events

from tracedray._proto.v1 import raylet_pb2
from tracedray.core.address import Address
from tracedray.core.gcs.client import GcsClient
from tracedray.core.protocol.raylet_client import RayletClient

pytestmark = pytest.mark.integration

# The first worker process to start sleeps before it can register; the others start.
HANG_ONCE = textwrap.dedent("""
    import os, time
    marker = os.environ.get("TRACEDRAY_TEST_HANG_MARKER")
    if marker:
        with open("/proc/self/cmdline", "rb") as f:
            argv = f.read().split(b"\\0")
        if b"tracedray.api.worker_main" in argv:
            try:
                fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            except FileExistsError:
                pass
            else:
                os.write(fd, str(os.getpid()).encode())
                os.close(fd)
                time.sleep(600)
""")


def test_a_worker_stuck_at_start_is_killed_and_replaced(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    hook, marker = tmp_path / "hook", tmp_path / "hung.pid"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(HANG_ONCE)
    with isolated_root(tmp_path):
        monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
            [str(hook), *filter(None, [os.environ.get("PYTHONPATH")])]))
        monkeypatch.setenv("TRACEDRAY_TEST_HANG_MARKER", str(marker))
        monkeypatch.setenv("TRACEDRAY_WORKER_REGISTER_TIMEOUT_S", "2")
        (node,) = GcsClient(start_head(num_cpus=1)).get_nodes()
        (session,) = tmp_path.glob("session_2*")
        raylet = RayletClient(Address.from_proto(node.info.raylet).target)
        me = Address(node.info.node_id, "127.0.0.1", 1, "test-requester", os.getpid())

        reply = raylet.start_lease_request(raylet_pb2.LeaseRequest(
            scheduling_key="CPU=1@", resources={"CPU": 1.0}, requester=me.to_proto(),
            request_id=b"1")).result(60)

        assert reply.status == raylet_pb2.LeaseReply.GRANTED, reply
        hung = int(marker.read_text())
        assert reply.worker.pid != hung
        (stuck,) = log_events(session, "worker.register_timeout")
        assert stuck["level"] == "warning" and stuck["worker_pid"] == hung, stuck
        workers = {w["pid"]: w for w in run_json("list", "workers")}
        assert workers[hung]["state"] == "DEAD" and workers[hung]["exit_signal"] == "SIGKILL"
        assert workers[hung]["exit_meaning"].startswith(
            "killed by the raylet: it did not register within 2s of its start"), workers[hung]
        raylet.return_worker(reply.lease_id)
