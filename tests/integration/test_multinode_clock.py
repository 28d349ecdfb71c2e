"""Clock offsets across nodes: the raylets log their estimates, and `tracedray logs`,
`trace` and `timeline` move every node's records onto the head's clock with them, live
and from the session folder after the cluster stopped.

One machine has one clock, so node d is given a fake 2 s skew with the test-only
TRACEDRAY_TESTING_CLOCK_SKEW_S (added to its raylet's measured offset only)."""

from __future__ import annotations

import json
import re
import time
from datetime import datetime
from typing import Any

import pytest
from cli_support import run, run_json
from multinode_support import log_events, three_nodes, wait_for

SKEW_S = 2.0


def _applied(note_text: str, node_id: str) -> list[float]:
    """The offsets (ms) a CLI note says it applied to ``node_id``."""
    match = re.search(rf"node {node_id[:12]} ([+-]\d+\.\d)(?: to ([+-]\d+\.\d))? ms", note_text)
    assert match, f"no clock offset for node {node_id[:12]} in: {note_text!r}"
    return [float(g) for g in match.groups() if g is not None]


def _seconds(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def test_offsets_are_logged_and_every_merged_view_applies_them(
        monkeypatch: pytest.MonkeyPatch, no_leaks: None) -> None:
    with three_nodes(monkeypatch) as cluster:
        monkeypatch.setenv("TRACEDRAY_TESTING_CLOCK_SKEW_S", str(SKEW_S))
        skewed = cluster.join("d", num_cpus=1, resources={"d": 1})
        monkeypatch.delenv("TRACEDRAY_TESTING_CLOCK_SKEW_S")
        started = time.monotonic()
        ray = cluster.ray

        def shout() -> str:
            print("hello from the skewed node")
            return "done"

        ref = ray.remote(shout).options(resources={"d": 1}).remote()
        assert ray.get(ref, timeout=60) == "done"
        task_id = ref.task_id().hex()
        names = {cluster.node_id(n): n for n in ("head", "b", "c")} | {skewed.node_id: "d"}

        # Every raylet logged its estimate; d's is the fake skew, as a warning.
        def offset_lines() -> dict[str, list[dict[str, Any]]] | None:
            by_node: dict[str, list[dict[str, Any]]] = {}
            for record in log_events(cluster.session_dir, "node.clock_offset"):
                by_node.setdefault(record["node_id"], []).append(record)
            return by_node if set(names) <= set(by_node) else None

        lines = wait_for(offset_lines, 30, "a node.clock_offset line from every raylet")

        def near_skew(offset_s: float) -> bool:
            """Within the error bound of d's estimates so far (half the longest round trip
            they were measured over: a heartbeat of a starved machine takes long), and
            0.05 s: what d's records are moved by is the fake skew, give or take that."""
            records = (offset_lines() or lines)[skewed.node_id]
            return abs(offset_s - SKEW_S) <= max(r["rtt_s"] for r in records) / 2 + 0.05

        (first_d, *_) = lines[skewed.node_id]
        assert near_skew(first_d["offset_s"]) and first_d["level"] == "warning", first_d
        for node_id, name in names.items():
            for record in lines[node_id]:
                assert record["rtt_s"] >= 0
                if name != "d":  # one machine: the same clock, within the estimate's bound
                    assert abs(record["offset_s"]) <= record["rtt_s"] / 2 + 0.05, record
                    assert record["level"] == "info", record
        time.sleep(1.5)  # ~5 more heartbeats: an unchanged estimate is not logged again
        heartbeats = (time.monotonic() - started) / 0.3
        lines = offset_lines() or {}
        assert all(len(records) <= max(3, heartbeats / 3) for records in lines.values()), \
            {names[n]: len(r) for n, r in lines.items()}

        # `tracedray status` (the GCS node table) agrees.
        rows = {r["node_id"]: r for r in run_json("status", "--address", cluster.address)
                ["nodes"]}
        row = rows[skewed.node_id]
        assert abs(float(row["clock_offset_s"]) - SKEW_S) <= float(row["clock_error_s"]) + 0.05
        assert float(row["clock_error_s"]) > 0, row

        # Live: logs merges d's lines 2 s earlier than d stamped them, and says so.
        result = run("logs", "--address", cluster.address, "--task", task_id,
                     "--format", "json")
        (printed,) = [json.loads(t) for t in result.stdout.splitlines()
                      if json.loads(t).get("event") == "task.output"]
        assert printed["node_id"] == skewed.node_id
        assert near_skew(printed["clock_offset_s"]), printed
        shift = _seconds(printed["node_timestamp"]) - _seconds(printed["timestamp"])
        assert shift == pytest.approx(printed["clock_offset_s"], abs=2e-6)
        for offset in _applied(result.stderr, skewed.node_id):
            assert near_skew(offset / 1000), offset
        for node_id, name in names.items():
            if name != "d":  # noise within the estimate's error bound moves nothing
                assert node_id[:12] not in result.stderr

        # The task's story: d's execute span and print moved onto the head's clock.
        def story() -> dict[str, Any] | None:
            data = run_json("trace", task_id, "--address", cluster.address)
            kinds = {e["kind"] for e in data["events"]}
            return data if {"started", "output"} <= kinds else None

        data = wait_for(story, 30, "the task's execute span and output in its story")
        assert set(data["clock_offsets_s"]) == {skewed.node_id}
        assert all(near_skew(o) for o in data["clock_offsets_s"][skewed.node_id]), data
        text = run("trace", task_id, "--address", cluster.address).stdout
        _applied(text, skewed.node_id)
        raw = run_json("trace", task_id, "--address", cluster.address, "--no-clock-correction")
        assert raw["clock_offsets_s"] == {}
        moved = next(e for e in data["events"] if e["kind"] == "started")["time_unix_nano"]
        stamped = next(e for e in raw["events"] if e["kind"] == "started")["time_unix_nano"]
        assert near_skew((stamped - moved) / 1e9)

    # After the cluster stopped: the session folder alone gives the same correction.
    timeline = run("timeline", "--address", cluster.address, "--task", task_id, "--output", "-")
    document = json.loads(timeline.stdout)
    offsets = document["otherData"]["clock_offsets_s"]
    assert set(offsets) == {skewed.node_id}
    assert all(near_skew(o) for o in offsets[skewed.node_id]), offsets
    execute = next(e for e in document["traceEvents"] if e.get("name") == "task.execute")
    assert near_skew(execute["args"]["clock_offset_s"]), execute
    _applied(timeline.stderr, skewed.node_id)
    offline = run("logs", "--address", cluster.address, "--node", skewed.node_id[:12])
    _applied(offline.stderr, skewed.node_id)
    assert "hello from the skewed node" in offline.stdout
