"""The GCS's statistics: its nodes by state, and the stalls of its node watch (a GCS in
this process; the watch's stalls noted as its loop notes them)."""

from __future__ import annotations

from pathlib import Path

from tracedray._proto.v1 import common_pb2, gcs_pb2
from tracedray.core.gcs.server import Gcs


def test_statistics_count_nodes_and_the_watchs_stalls(tmp_path: Path) -> None:
    gcs = Gcs(session_dir=tmp_path, storage_url="memory", flushing=False)
    try:
        for node_id in ("a", "b"):
            gcs.register_node(gcs_pb2.NodeInfo(node_id=node_id, state="ALIVE",
                                               raylet=common_pb2.Address(ip="127.0.0.1")))
        gcs.nodes._mark_dead({"b": (gcs.node_list()[1].last_heartbeat, "a test said so")})
        for now, stalled in ((100.0, 0.0), (101.0, 2.0), (102.0, 0.5)):
            gcs.nodes._note_stall(now, stalled, horizon_s=50.0, interval_s=1.0)
        stats = gcs.statistics()
        assert (stats.nodes_alive, stats.nodes_dead) == (1, 1)
        assert stats.watch_stalls_total == 2
        assert stats.watch_stalled_s_total == 2.5 and stats.longest_watch_stall_s == 2.0
        # Stalls older than the horizon are forgotten for verdicts, not for the totals.
        gcs.nodes._note_stall(200.0, 0.0, horizon_s=50.0, interval_s=1.0)
        assert not gcs.nodes._stalls and gcs.statistics().watch_stalls_total == 2
    finally:
        gcs.stop()
