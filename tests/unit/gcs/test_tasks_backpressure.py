"""A burst of task events the flusher thread does not keep up with is flushed by the
batches themselves: the hot set stays near its bound (a GCS in this process)."""

from __future__ import annotations

from pathlib import Path

from tracedray._proto.v1 import gcs_pb2
from tracedray.core.gcs.server import Gcs
from tracedray.core.gcs.storage.policy import FlushPolicy
from tracedray.core.gcs.tasks_backpressure import Backpressure


def test_due_past_twice_the_bound_then_every_half_bound() -> None:
    bp = Backpressure(100)
    assert not bp.due(200)
    assert bp.due(201)
    bp.flushed(190)
    assert not bp.due(201) and not bp.due(239)
    assert bp.due(240)
    bp.flushed(100)
    assert not bp.due(150)  # back under the high-water mark
    assert bp.flushes == 2


def test_a_burst_keeps_the_hot_set_bounded_without_the_flusher_thread(tmp_path: Path) -> None:
    gcs = Gcs(session_dir=tmp_path, storage_url="memory",
              flush_policy=FlushPolicy(interval_s=3600, max_hot_entries=100, min_age_s=0))
    try:
        peak = 0
        for batch in range(60):  # 3,000 finished tasks, 50 a batch; no flusher thread runs
            gcs.add_task_events([gcs_pb2.TaskEvent(
                task_id=(batch * 50 + i).to_bytes(4, "big") * 2, job_id=b"\x01\x00\x00\x00",
                state="FINISHED", time=1.0, function_name="mod.f") for i in range(50)])
            peak = max(peak, gcs.tables["tasks"].hot_count())
        assert peak <= 2 * 100 + 50 + 50
        assert gcs.statistics().backpressure_flushes_total > 0
        assert len(gcs.get_tasks(gcs_pb2.GetTasksRequest()).tasks) == 3000  # nothing lost
    finally:
        gcs.stop()
