"""Killing node c's raylet (SIGKILL) while tasks run there: its workers go with it, the
GCS marks it DEAD (when and why), running tasks run again elsewhere, its actor restarts
elsewhere, and objects that lived only there are rebuilt from lineage."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from cli_support import run_json
from multinode_support import log_events, three_nodes, wait_for


def _gate_task(ray: Any) -> Any:
    """wait_gate(folder, name): note the node it runs on, then wait for folder/open."""
    def wait_gate(folder: str, name: str) -> str:
        import tracedray

        node = str(tracedray.get_runtime_context().get_node_id())
        Path(folder, f"{name}.{node}.started").touch()
        while not Path(folder, "open").exists():
            time.sleep(0.02)
        return node

    return ray.remote(wait_gate)


def _started(folder: Path, name: str) -> list[str]:
    return [p.name.split(".")[1] for p in folder.glob(f"{name}.*.started")]


def test_sigkill_node_c_loses_no_result(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                        no_leaks: None) -> None:
    from tracedray.api.calls import global_worker

    with three_nodes(monkeypatch, c_cpus=2) as cluster:
        ray = cluster.ray
        gate = _gate_task(ray)
        c_id = cluster.node_id("c")
        # Fill the head's and b's only CPUs, so the next work can only go to c.
        blockers = [gate.options(resources={"head": 1}).remote(str(tmp_path), "block-head"),
                    gate.options(resources={"b": 1}).remote(str(tmp_path), "block-b")]
        wait_for(lambda: _started(tmp_path, "block-head") and _started(tmp_path, "block-b"),
                 30, "the blockers to run")

        @ray.remote(max_restarts=1)
        class Where:
            def node(self) -> str:
                return str(ray.get_runtime_context().get_node_id())

        actor = Where.options(num_cpus=1).remote()
        assert ray.get(actor.node.remote()) == c_id

        @ray.remote
        def make(seed: int) -> np.ndarray:
            return np.random.default_rng(seed).integers(0, 255, 2_000_000, dtype=np.uint8)

        made = [make.remote(seed) for seed in (1, 2)]
        ray.wait(made, num_returns=2, timeout=60)
        worker = global_worker()
        assert {worker.references.get(r.binary()).store_node_id for r in made} == {c_id}

        running = [gate.remote(str(tmp_path), f"run{i}") for i in range(2)]
        wait_for(lambda: any(n == c_id for i in range(2) for n in _started(tmp_path, f"run{i}")),
                 30, "a task to run on c")
        raylet_pid = cluster.raylet_pid("c")
        os.kill(raylet_pid, signal.SIGKILL)
        # c's workers exit with their raylet (so c's task cannot finish there) ...
        wait_for(lambda: not _children_of(raylet_pid), 15, "c's workers to exit")
        (tmp_path / "open").touch()

        # Every task result arrives; the one that was on c ran again elsewhere.
        finished_on = ray.get(running, timeout=120)
        assert c_id not in finished_on
        assert len(ray.get(blockers, timeout=60)) == 2
        # The objects made on c are rebuilt by running make again, on a live node.
        for seed, ref in zip((1, 2), made, strict=True):
            expected = np.random.default_rng(seed).integers(0, 255, 2_000_000, dtype=np.uint8)
            assert np.array_equal(ray.get(ref, timeout=120), expected)
        assert worker.references.get(made[0].binary()).store_node_id != c_id
        # The actor restarted on another node.
        assert ray.get(actor.node.remote(), timeout=120) != c_id

        rows = {row["node_id"]: row for row in run_json("list", "nodes", "--address",
                                                        cluster.address)}
        dead = rows[c_id]
        assert {"node_id", "ip", "state", "resources", "pid"} <= set(dead)
        assert dead["state"] == "DEAD" and dead["pid"] == raylet_pid
        assert dead["resources"]["c"] == 1 and dead["ip"] == "127.0.0.1"
        assert dead["end_time"] and "raylet exited" in dead["death_reason"] or \
            "heartbeat" in dead["death_reason"]
        assert [r["state"] for r in rows.values()].count("ALIVE") == 2
        rebuilt = log_events(cluster.session_dir, "object.reconstruct")
        assert {e["object_id"] for e in rebuilt} >= {r.hex() for r in made}


def _children_of(pid: int) -> list[int]:
    """Live tracedray workers started by raylet ``pid`` (their command line names it)."""
    import psutil

    out = []
    for process in psutil.process_iter(["cmdline", "status"]):
        cmdline = process.info["cmdline"] or []
        if (process.info["status"] != psutil.STATUS_ZOMBIE and "--parent-pid" in cmdline
                and str(pid) in cmdline and "tracedray.api.worker_main" in cmdline):
            out.append(process.pid)
    return out


def test_a_driver_that_only_borrows_a_lost_object_gets_it_rebuilt(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, no_leaks: None) -> None:
    """The owner (an actor on b) rebuilds an object whose only copy died with c; the
    driver, which only borrows it, waits for that instead of raising ObjectLostError."""
    from tracedray.api.calls import global_worker

    with three_nodes(monkeypatch, c_cpus=2) as cluster:
        ray = cluster.ray
        gate = _gate_task(ray)
        c_id = cluster.node_id("c")

        @ray.remote
        def make(seed: int) -> np.ndarray:
            return np.random.default_rng(seed).integers(0, 255, 2_000_000, dtype=np.uint8)

        @ray.remote
        class Owner:
            def make(self, seed: int) -> list[Any]:
                return [make.remote(seed)]  # owned by this actor; the caller borrows it

            def location(self, refs: list[Any]) -> str:
                from tracedray.api.calls import global_worker

                ray.wait(refs, timeout=60)  # no pull: the only copy stays where it was made
                entry = global_worker().references.get(refs[0].binary())
                return entry.store_node_id if entry is not None else ""

        # The owner lives on b without a CPU; the blockers hold the head's and b's CPUs,
        # so make can only run on c.
        owner = Owner.options(num_cpus=0, resources={"b": 0.5}).remote()
        blockers = [gate.options(resources={"head": 1}).remote(str(tmp_path), "block-head"),
                    gate.options(resources={"b": 0.5}).remote(str(tmp_path), "block-b")]
        wait_for(lambda: _started(tmp_path, "block-head") and _started(tmp_path, "block-b"),
                 30, "the blockers to run")
        [borrowed] = ray.get(owner.make.remote(7), timeout=60)
        entry = global_worker().references.get(borrowed.binary())
        assert entry is not None and not entry.owned
        # Its only copy is on c (the driver must not get it yet: a copy on the head
        # would survive the node).
        assert ray.get(owner.location.remote([borrowed]), timeout=60) == c_id

        raylet_pid = cluster.raylet_pid("c")
        os.kill(raylet_pid, signal.SIGKILL)
        wait_for(lambda: not _children_of(raylet_pid), 15, "c's workers to exit")
        (tmp_path / "open").touch()  # CPUs on the head and b free up for the rebuild

        expected = np.random.default_rng(7).integers(0, 255, 2_000_000, dtype=np.uint8)
        assert np.array_equal(ray.get(borrowed, timeout=120), expected)
        assert len(ray.get(blockers, timeout=60)) == 2
        rebuilt = log_events(cluster.session_dir, "object.reconstruct")
        assert borrowed.hex() in {e["object_id"] for e in rebuilt}
