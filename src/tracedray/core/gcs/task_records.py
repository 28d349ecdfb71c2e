"""The GCS's task table: task events merged into one record per task, the state
queries over it, and the failing of the tasks an ended job left unfinished
(``job_tasks`` decides which and how).
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tracedray import logs
from tracedray._proto.v1 import gcs_pb2
from tracedray.core.gcs import job_tasks, task_query, tasks_backpressure
from tracedray.core.gcs.storage import Flusher, TieredTable
from tracedray.telemetry.cluster_events import GcsEvents

log = logs.get_logger(__name__)
_events = GcsEvents(log)
TERMINAL = job_tasks.TERMINAL
# Task records a job's end fails per hold of the lock: task events wait meanwhile.
_FAIL_BATCH = 500


@dataclass(frozen=True)
class TaskRecordStatistics:
    ended_jobs: int  # whose late task events are failed on arrival
    failed_at_job_end_total: int  # tasks an ended job left unfinished, failed by this GCS
    # Task-event batches that found the hot set over its high-water mark and flushed it
    # before answering: the producers waited instead of the GCS's memory growing.
    backpressure_flushes_total: int


class TaskRecords:
    """``outliving`` names the actors that outlive their job (detached, not dead): their
    tasks are not failed with it."""

    def __init__(self, table: TieredTable, flusher: Flusher,
                 backpressure: tasks_backpressure.Backpressure | None, *,
                 outliving: Callable[[], set[bytes]]) -> None:
        self._table = table
        self._flusher = flusher
        self._backpressure = backpressure
        self._outliving = outliving
        self._lock = threading.RLock()
        # Ended jobs: the tasks of each that are still unfinished, or whose events come
        # after its end, are failed (job_tasks). Guarded by _lock, as the table is.
        self._verdicts: dict[bytes, job_tasks.Verdict] = {}
        # Whether the table's storage held records when this GCS started (a GCS
        # restarted on Redis): unfinished ones may be there and not in memory.
        self._stored_before = len(table) > 0
        self._failed_total = 0

    def statistics(self) -> TaskRecordStatistics:
        with self._lock:
            return TaskRecordStatistics(
                ended_jobs=len(self._verdicts), failed_at_job_end_total=self._failed_total,
                backpressure_flushes_total=(self._backpressure.flushes
                                            if self._backpressure is not None else 0))

    def job_ended(self, verdict: job_tasks.Verdict) -> None:
        """From now on a task of the job whose events arrive is failed on arrival."""
        with self._lock:
            self._verdicts[verdict.job_id] = verdict

    def add_events(self, events: Any) -> None:
        table = self._table
        keys = [event.task_id.hex() for event in events]
        with self._lock:
            # One read for the batch's tasks (one query on sqlite or Redis), not one each.
            stored = table.get_many(keys)
            records: dict[str, gcs_pb2.TaskRecord] = {}
            for key, event in zip(keys, events, strict=True):
                record = records.get(key)
                if record is None:
                    raw = stored.get(key)
                    record = gcs_pb2.TaskRecord.FromString(raw) if raw else gcs_pb2.TaskRecord(
                        task_id=event.task_id, job_id=event.job_id, kind=event.kind)
                    records[key] = record
                job_tasks.merge(record, event)
            # One write per batch and kind (one pipelined round trip on Redis), and each
            # task once, however many of its events the batch carried.
            for finished in (True, False):
                table.put_many({key: record.SerializeToString() for key, record in records.items()
                                if (record.state in TERMINAL) == finished}, finished=finished)
            late = ([key for key, record in records.items()
                     if record.state not in TERMINAL and record.job_id in self._verdicts]
                    if self._verdicts else [])
        # Tasks of a job that has ended: their reports came after the job's end.
        self._fail(late)
        if self._backpressure is not None and self._backpressure.due(table.hot_count()):
            self._flusher.flush_now()
            self._backpressure.flushed(table.hot_count())

    def get(self, request: gcs_pb2.GetTasksRequest) -> gcs_pb2.GetTasksReply:
        table = self._table
        if task_query.is_query(request):
            return task_query.query_tasks(table.scan(prefix=request.id_prefix.lower()), request)
        reply = gcs_pb2.GetTasksReply()
        if request.task_ids:
            for task_id in request.task_ids:
                raw = table.get(task_id.hex())
                if raw:
                    reply.tasks.append(gcs_pb2.TaskRecord.FromString(raw))
            reply.total = len(reply.tasks)
            return reply
        if not request.job_id:
            # The count is O(1) on Redis and one batched lookup of the hot keys otherwise,
            # so a `--limit`ed listing parses only the records it returns.
            reply.total = len(table)
            for _, raw in table.scan():
                if request.limit and len(reply.tasks) >= request.limit:
                    break
                reply.tasks.append(gcs_pb2.TaskRecord.FromString(raw))
            return reply
        total = 0
        for _, raw in table.scan():
            # A record of the job holds its id verbatim, so a record without those bytes
            # cannot match: most records of other jobs are skipped without being parsed.
            if request.job_id not in raw:
                continue
            record = gcs_pb2.TaskRecord.FromString(raw)
            if record.job_id != request.job_id:
                continue
            total += 1
            if not request.limit or len(reply.tasks) < request.limit:
                reply.tasks.append(record)
        reply.total = total
        return reply

    def fail_unfinished(self, job_id: bytes) -> int:
        """Fail the tasks of the ended job ``job_id`` that have not ended (job_tasks);
        returns how many. Unfinished records stay in memory up to the flush policy's
        ``max_live_entries``, so memory is searched, and the storage too where a burst
        moved some there or it held records before this GCS started."""
        try:
            table = self._table
            # A record of the job holds its id verbatim: others are skipped unparsed.
            keys = [key for key, raw in table.live_items() if job_id in raw]
            if self._stored_before or table.live_flushed():
                keys.extend(key for key, raw in table.scan() if job_id in raw)
            failed = self._fail(list(dict.fromkeys(keys)))
            if failed:
                counts = Counter(record.function_name for record, _ in failed)
                log.warning("job.tasks_failed", job_id=job_id.hex(), tasks=len(failed),
                            by_function=dict(counts), error_type=failed[0][1].error_type)
            return len(failed)
        except Exception as exc:  # noqa: BLE001 - the job has ended: its end goes on
            log.error("job.tasks_fail_failed", job_id=job_id.hex(), error=repr(exc))
            return 0

    def _fail(self, keys: list[str]) -> list[tuple[gcs_pb2.TaskRecord, gcs_pb2.TaskEvent]]:
        """Fail those of these tasks that their job's end left unfinished; each is read
        and written under the lock, so that no event of it comes in between."""
        if not keys:
            return []
        outliving = self._outliving()
        table = self._table
        failed = []
        for start in range(0, len(keys), _FAIL_BATCH):
            with self._lock:
                updates = {}
                for key in keys[start:start + _FAIL_BATCH]:
                    raw = table.get(key)
                    if raw is None:
                        continue
                    record = gcs_pb2.TaskRecord.FromString(raw)
                    verdict = self._verdicts.get(record.job_id)
                    event = (None if verdict is None else job_tasks.failure_event(
                        record, verdict, outliving, self._ancestors(record)))
                    if event is None:
                        continue
                    job_tasks.merge(record, event)
                    updates[key] = record.SerializeToString()
                    failed.append((record, event))
                table.put_many(updates, finished=True)
                self._failed_total += len(updates)
        for record, event in failed:
            _record_task_failure(record, event)
        return failed

    def _ancestors(self, record: gcs_pb2.TaskRecord) -> list[gcs_pb2.TaskRecord]:
        """The task's parent, its parent's parent, … as the task table has them (a
        driver's tasks have none: nothing is read)."""
        found: list[gcs_pb2.TaskRecord] = []
        parent = record.parent_task_id
        while parent and len(found) < job_tasks.MAX_ANCESTORS:
            raw = self._table.get(parent.hex())
            if raw is None:
                break
            found.append(gcs_pb2.TaskRecord.FromString(raw))
            parent = found[-1].parent_task_id
        return found


def _record_task_failure(record: gcs_pb2.TaskRecord, event: gcs_pb2.TaskEvent) -> None:
    """A span in the task's trace (under its task.submit) and a log line, for ``trace``
    and ``logs``: the GCS failed the task as its job ended."""
    _events.task_failed_at_job_end(
        task_id=record.task_id, attempt=event.attempt, function=record.function_name,
        state=event.state, job_id=record.job_id, actor_id=record.actor_id,
        error_type=event.error_type, reason=event.error_message, trace_id=record.trace_id,
        submit_span_id=record.submit_span_id, at=event.time)
