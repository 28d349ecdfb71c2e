"""Three nodes on one machine: resource-aware and locality-aware placement, spillback,
infeasible work, and objects moving between nodes (one transfer per object)."""

from __future__ import annotations

import hashlib
import pathlib
from typing import Any

import numpy as np
import pytest
from cli_support import run_json
from multinode_support import log_events, spans_named, three_nodes, wait_for


def _where(ray: Any) -> Any:
    """A remote function returning the node it ran on (defined here: pickled by value)."""
    def where() -> str:
        import tracedray

        return str(tracedray.get_runtime_context().get_node_id())

    return ray.remote(where)


def test_custom_resource_runs_only_where_it_exists(monkeypatch: pytest.MonkeyPatch,
                                                   no_leaks: None) -> None:
    with three_nodes(monkeypatch) as cluster:
        ray = cluster.ray
        where = _where(ray)
        on_b = ray.get([where.options(resources={"b": 1}).remote() for _ in range(6)])
        on_c = ray.get([where.options(resources={"c": 1}).remote() for _ in range(3)])
        assert set(on_b) == {cluster.node_id("b")}
        assert set(on_c) == {cluster.node_id("c")}


def test_infeasible_task_waits_visibly_until_a_node_can_run_it(
        monkeypatch: pytest.MonkeyPatch, no_leaks: None) -> None:
    with three_nodes(monkeypatch) as cluster:
        ray = cluster.ray
        where = _where(ray)
        ref = where.options(resources={"fpga": 1}).remote()
        ready, _ = ray.wait([ref], timeout=1.0)
        assert not ready
        status = wait_for(lambda: (s := run_json("status", "--address", cluster.address))
                          ["infeasible"] >= 1 and s, 15, "status to count the infeasible task")
        assert status["infeasible"] >= 1
        tasks = wait_for(lambda: [t for t in run_json("list", "tasks", "--address",
                                                      cluster.address)
                                  if t["state"] == "INFEASIBLE"], 15, "an INFEASIBLE task")
        assert tasks[0]["task_id"] == ref.task_id().hex()
        assert "fpga" in tasks[0]["error_message"]
        # A node that has the resource joins: the waiting task runs there.
        joined = cluster.join("d", num_cpus=1, resources={"fpga": 1})
        assert ray.get(ref, timeout=60) == joined.node_id


def test_tasks_follow_their_data_and_spill_back_when_busy(
        monkeypatch: pytest.MonkeyPatch, no_leaks: None, tmp_path: object) -> None:
    from tracedray import telemetry

    with three_nodes(monkeypatch) as cluster:
        ray = cluster.ray

        @ray.remote(resources={"b": 1})
        def make(n: int) -> np.ndarray:
            return np.arange(n, dtype=np.uint8)

        @ray.remote
        def consume(array: np.ndarray) -> tuple[str, int]:
            import tracedray

            return tracedray.get_runtime_context().get_node_id(), int(array.sum())

        data = make.remote(4_000_000)
        expected = int(np.arange(4_000_000, dtype=np.uint8).sum())
        # Idle cluster: every consumer runs on b, where its 4 MB input lives.
        refs = [consume.remote(data) for _ in range(3)]
        results = ray.get(refs)
        assert {node for node, _ in results} == {cluster.node_id("b")}
        assert {total for _, total in results} == {expected}
        telemetry.force_flush(5.0)
        task_ids = {ref.task_id().hex() for ref in refs}
        schedules = [s for s in spans_named(cluster.session_dir, "task.schedule")
                     if s["tracedray.task.id"] in task_ids]
        assert schedules
        # Every decision names b; the one that leased b's worker also says why.
        decided = [s for s in schedules if s.get("tracedray.scheduling.candidates")]
        assert {s["tracedray.scheduling.chosen_node"] for s in decided} == {cluster.node_id("b")}
        first = decided[0]
        by_node = dict(zip(first["tracedray.scheduling.candidates"],
                           first["tracedray.scheduling.local_bytes"], strict=True))
        assert by_node[cluster.node_id("b")] >= 4_000_000
        assert "input bytes" in first["tracedray.scheduling.reason"]

        # b busy (its only CPU held by a long task): a backlog spills to other nodes,
        # which pull the input; results stay correct.
        @ray.remote(resources={"b": 1})
        def hold(started: str, seconds: float) -> None:
            import pathlib
            import time

            pathlib.Path(started).touch()
            time.sleep(seconds)

        # Submit the backlog only once the blocker really runs: otherwise a consumer's
        # lease can reach b first and the blocker waits behind the whole backlog.
        started = pathlib.Path(str(tmp_path)) / "hold-started"
        blocker = hold.remote(str(started), 5.0)
        wait_for(started.exists, 30, "the blocker to start on b")
        spilled = ray.get([consume.remote(data) for _ in range(8)])
        ray.get(blocker)
        assert {total for _, total in spilled} == {expected}
        assert {node for node, _ in spilled} - {cluster.node_id("b")}, spilled
        assert log_events(cluster.session_dir, "object.transfer")


def test_objects_arrive_intact_and_concurrent_pulls_share_one_transfer(
        monkeypatch: pytest.MonkeyPatch, no_leaks: None) -> None:
    with three_nodes(monkeypatch, c_cpus=4) as cluster:
        ray = cluster.ray

        @ray.remote(resources={"b": 1})
        def make(n: int, seed: int) -> np.ndarray:
            return np.random.default_rng(seed).integers(0, 255, n, dtype=np.uint8)

        @ray.remote(resources={"c": 0.25})
        def digest(array: np.ndarray) -> str:
            return hashlib.sha256(array.tobytes()).hexdigest()

        ref = make.remote(60_000_000, 7)
        local = ray.get(ref)  # pulled to the head for the driver
        expected = hashlib.sha256(local.tobytes()).hexdigest()
        del local
        # Four tasks on c read the same 60 MB object at once.
        assert ray.get([digest.remote(ref) for _ in range(4)]) == [expected] * 4
        to_c = [e for e in log_events(cluster.session_dir, "object.transfer")
                if e["object_id"] == ref.hex() and e["node_id"] == cluster.node_id("c")]
        assert len(to_c) == 1, to_c
        # The bytes came over the data path (object_data.py), in ranges on several
        # connections, not in the gRPC stream.
        assert to_c[0]["streams"] >= 2, to_c
