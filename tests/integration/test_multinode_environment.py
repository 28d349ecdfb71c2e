"""Environment drift and clock offsets across nodes, as `tracedray status` shows them."""

from __future__ import annotations

import re

import pytest
from cli_support import run, run_json
from multinode_support import log_events, spans_named, three_nodes, wait_for


def test_node_with_other_package_version_is_flagged(monkeypatch: pytest.MonkeyPatch,
                                                    no_leaks: None) -> None:
    with three_nodes(monkeypatch) as cluster:
        monkeypatch.setenv("TRACEDRAY_FAKE_PACKAGE_VERSIONS", "numpy=0.0.1")
        old = cluster.join("old", num_cpus=1)
        monkeypatch.delenv("TRACEDRAY_FAKE_PACKAGE_VERSIONS")
        status = run_json("status", "--address", cluster.address)
        drift = {row["node_id"]: row["version_drift"] for row in status["nodes"]}
        assert drift[cluster.node_id("b")] == [] and drift[cluster.node_id("c")] == []
        (difference,) = drift[old.node_id]
        assert difference.startswith("numpy: head ") and difference.endswith("node 0.0.1")
        text = run("status", "--address", cluster.address).stdout
        assert "version drift" in text and "numpy" in text and old.node_id[:12] in text
        warnings = [e for e in log_events(cluster.session_dir, "node.version_drift")
                    if e["node_id"] == old.node_id]
        assert warnings and warnings[0]["level"] == "warning"
        started = wait_for(lambda: [s for s in spans_named(cluster.session_dir, "node.start")
                                    if s.get("tracedray.node.id") == old.node_id
                                    and s.get("tracedray.node.version_drift")], 30,
                           "the node.start span of the drifted node")
        assert "numpy" in started[0]["tracedray.node.version_drift"][0]


def test_clock_offsets_are_estimated_from_heartbeat_round_trips(
        monkeypatch: pytest.MonkeyPatch, no_leaks: None) -> None:
    with three_nodes(monkeypatch) as cluster:
        def estimated() -> list[dict[str, object]] | None:
            rows = run_json("status", "--address", cluster.address)["nodes"]
            return rows if all(row["clock_offset_s"] != 0.0 for row in rows) else None

        rows = wait_for(estimated, 20, "every node to report a clock estimate")
        # One machine, one clock: the round-trip estimate is 0 within its error bound (half
        # the heartbeat's round trip: milliseconds, unless the machine is starved), where
        # the one-way difference it replaced was off by the whole network delay.
        for row in rows:
            error = float(str(row["clock_error_s"]))
            assert error > 0 and abs(float(str(row["clock_offset_s"]))) <= error + 0.05, row
        assert re.search(r"[+-]\d+\.\d±\d+\.\d ms", run("status", "--address",
                                                          cluster.address).stdout)
