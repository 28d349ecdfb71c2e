"""Which of a dead worker's pipelined tasks may have started (leases.started_orphans)."""

from __future__ import annotations

from tracedray._proto.v1 import common_pb2
from tracedray.core.worker.leases import started_orphans
from tracedray.core.worker.pending_task import PendingTask


def _tasks(n: int) -> list[PendingTask]:
    return [PendingTask(spec=common_pb2.TaskSpec(task_id=bytes([i]) * 24, attempt=1),
                        return_ids=[], dep_ids=[], unresolved=[], retries_left=0)
            for i in range(n)]


def test_the_tasks_after_the_one_it_died_in_never_started() -> None:
    tasks = _tasks(5)
    assert started_orphans(tasks, tasks[0].task_id.hex(), 1) == 1
    # The ones sent before it ran too: their results died with the worker.
    assert started_orphans(tasks, tasks[2].task_id.hex(), 1) == 3


def test_without_a_named_task_every_one_may_have_started() -> None:
    tasks = _tasks(4)
    assert started_orphans(tasks, "", 0) == 4  # its raylet could not tell, or between tasks
    # Another attempt, or a task not among them (another caller's): no telling.
    assert started_orphans(tasks, tasks[1].task_id.hex(), 0) == 4
    assert started_orphans(tasks, "ff" * 24, 1) == 4
