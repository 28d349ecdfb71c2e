"""Where the results of this process's tasks go: the owner's result sink.

A finished task's values are stored as owned objects (its lineage kept first, so a
result dropped already releases it too), its end is recorded unless the executing
worker recorded it, and its arguments are let go.
"""

from __future__ import annotations

from tracedray._proto.v1 import common_pb2
from tracedray.core.worker.lineage import Lineage
from tracedray.core.worker.ownership import Ownership
from tracedray.core.worker.pending_task import PendingTask
from tracedray.core.worker.reference_table import ReferenceTable
from tracedray.core.worker.task_events import TaskEventBuffer


class TaskResults:
    def __init__(self, lineage: Lineage, ownership: Ownership, references: ReferenceTable,
                 task_events: TaskEventBuffer) -> None:
        self._lineage = lineage
        self._ownership = ownership
        self._references = references
        self._task_events = task_events

    def finish(self, task: PendingTask, values: list[common_pb2.ObjectValue], state: str, *,
               reported_by_executor: bool = False) -> None:
        """Store a task's results. The executing worker already recorded how it ended,
        unless it never ran it (crash, cancel, failed dependency): then the owner does."""
        if state == "FINISHED":
            # Before storing: a result dropped already is released there, lineage too.
            self._lineage.record(task.spec, task.return_ids, values)
        self._ownership.store_values(values, state)
        if not reported_by_executor:
            self._task_events.record(task.spec, state)
        self._ownership.run_release_actions(self._references.remove_submitted(task.dep_ids))

    def finish_reported(self, finished: list[tuple[PendingTask, list[common_pb2.ObjectValue]]],
                        state: str) -> None:
        """``finish`` for a batch of tasks whose results came back on a task stream (the
        executing worker recorded how they ended): one lock acquisition per table for
        the whole batch rather than several per task."""
        values: list[common_pb2.ObjectValue] = []
        dep_ids: list[bytes] = []
        for task, task_values in finished:
            if state == "FINISHED":
                self._lineage.record(task.spec, task.return_ids, task_values)
            values.extend(task_values)
            dep_ids.extend(task.dep_ids)
        self._ownership.store_values(values, state)
        self._ownership.run_release_actions(self._references.remove_submitted(dep_ids))
