"""`tracedray start`, `stop` and `status` with real processes: head, joined node, node death,
foreground mode, and clean-up after a crash."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from cli_support import isolated_root, run, run_json, start_head
from multinode_support import wait_for


def test_start_writes_address_and_status_sees_it(tmp_path: Path) -> None:
    with isolated_root(tmp_path):
        address = start_head("--resources", '{"a": 2}')
        (session,) = tmp_path.glob("session_2*")
        assert (session / "address").read_text() == address
        (node,) = run_json("status")["nodes"]
        assert node["resources"]["a"] == 2 and node["is_head"]


def test_joined_node_then_killed_shows_dead(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    # The killed raylet's port refuses connections: it is found dead within a couple of
    # heartbeats (0.6 s) whatever the timeout. A short timeout only risked the live head
    # being taken for dead on a loaded machine (seen in CI with 1.5 s).
    monkeypatch.setenv("TRACEDRAY_NODE_DEATH_TIMEOUT_S", "10")
    monkeypatch.setenv("TRACEDRAY_HEARTBEAT_INTERVAL_S", "0.3")
    with isolated_root(tmp_path):
        address = start_head()
        out = run("start", "--address", address, "--num-cpus", "1", "--resources",
                  '{"b": 1}').stdout
        joined_id = next(line.split()[2] for line in out.splitlines() if "node id:" in line)
        nodes = {n["node_id"]: n for n in run_json("list", "nodes")}
        assert nodes[joined_id]["resources"]["b"] == 1 and nodes[joined_id]["state"] == "ALIVE"
        raylet_pid = nodes[joined_id]["pid"]
        os.kill(raylet_pid, signal.SIGKILL)

        def dead() -> dict[str, object] | None:
            rows = {n["node_id"]: n for n in run_json("list", "nodes")}
            return rows[joined_id] if rows[joined_id]["state"] == "DEAD" else None

        row = wait_for(dead, 30, "the killed node to be marked DEAD")
        assert set(row) >= {"node_id", "ip", "state", "resources", "pid"}
        assert row["pid"] == raylet_pid and "heartbeat" in row["death_reason"]
        status = run_json("status")
        assert [n["state"] for n in status["nodes"]].count("DEAD") == 1
        assert "DEAD" in run("status").stdout


def test_start_needs_exactly_one_of_head_or_address(tmp_path: Path) -> None:
    with isolated_root(tmp_path):
        assert "exactly one of --head" in run("start", code=1).stderr
        assert "exactly one of --head" in run("start", "--head", "--address", "127.0.0.1:1",
                                             code=1).stderr
        bad = run("start", "--head", "--resources", "{b: 1}", code=1)
        assert "--resources must be JSON" in bad.stderr
        nobody = run("start", "--address", "127.0.0.1:1", code=1)
        assert "127.0.0.1:1" in nobody.stderr


def test_stop_with_nothing_running(tmp_path: Path) -> None:
    with isolated_root(tmp_path):
        assert "no running tracedray nodes" in run("stop").stdout


def test_block_runs_in_foreground_until_sigterm(tmp_path: Path) -> None:
    with isolated_root(tmp_path):
        process = subprocess.Popen(
            [sys.executable, "-m", "tracedray.cli.app", "start", "--head", "--block",
             "--num-cpus", "1", "--object-store-memory", str(64 << 20)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert process.stdout is not None
        lines = iter(process.stdout.readline, "")
        address = next(line.split()[1] for line in lines if "address:" in line)
        # The process stays in the foreground while the node answers.
        assert run_json("status", "--address", address)["nodes"][0]["state"] == "ALIVE"
        assert process.poll() is None
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=60) == 0
        assert "is not running" in run("status", "--address", address, code=1).stderr


def test_stop_cleans_shared_memory_of_a_crashed_raylet(tmp_path: Path) -> None:
    with isolated_root(tmp_path):
        start_head()
        (node,) = run_json("list", "nodes")
        script = tmp_path / "holder.py"
        script.write_text(textwrap.dedent("""
            import sys, numpy as np, tracedray as ray
            ray.init(address="auto")
            ref = ray.put(np.zeros(1_000_000, dtype=np.uint8))
            print("READY", flush=True)
            sys.stdin.readline()
        """))
        holder = subprocess.Popen([sys.executable, str(script)], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True)
        try:
            assert holder.stdout is not None and holder.stdout.readline().strip() == "READY"
            (session,) = tmp_path.glob("session_2*")
            prefix = f"tracedray-{session.name[-24:]}-"
            assert any(f.startswith(prefix) for f in os.listdir("/dev/shm"))
            os.kill(node["pid"], signal.SIGKILL)  # a crashed raylet cannot clean its store
        finally:
            holder.kill()
            holder.wait()
        out = run("stop").stdout
        assert "shared-memory file" in out
        assert not any(f.startswith(prefix) for f in os.listdir("/dev/shm"))
