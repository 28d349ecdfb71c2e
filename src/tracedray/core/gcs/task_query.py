"""A task listing answered where the tasks are (the GCS, or a stopped cluster's storage):
filters, order, a page and the total count, or a per-function summary.

The client receives the page alone, never every record: `tracedray list tasks --limit 10`
on a million tasks moves ten records. Filters mean what they mean on the client's rows
(core/protocol/state_rows.py: ``key=value``, ``key!=value`` on the row of ``list tasks``), so a
row is built only for a record that a filter has to look at. With no filter and the
order by task id (the table's key), records are not parsed at all, except the page's.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable
from typing import Any

from tracedray._proto.v1 import gcs_pb2
from tracedray.core.protocol import state_rows as rows

ORDERS = ("", "task_id", "time")

Parse = Callable[[Any], gcs_pb2.TaskRecord]


def is_query(request: gcs_pb2.GetTasksRequest) -> bool:
    """Whether ``request`` asks for more than the plain listing (ids, job, a limit)."""
    return bool(request.filters or request.offset or request.order or request.summarize
                or request.id_prefix)


def first_event_time(record: gcs_pb2.TaskRecord) -> float:
    return min((event.time for event in record.events), default=0.0)


def query_tasks(entries: Iterable[tuple[str, Any]], request: gcs_pb2.GetTasksRequest,
                parse: Parse = gcs_pb2.TaskRecord.FromString) -> gcs_pb2.GetTasksReply:
    """Answer ``request`` over ``entries``: (task id hex, stored record) pairs in key order
    (a table's scan); ``parse`` turns a stored record into a TaskRecord. ConfigError for
    a bad filter or order."""
    if request.order not in ORDERS:
        from tracedray.exceptions import ConfigError

        raise ConfigError(f"order {request.order!r}: choose one of {', '.join(ORDERS[1:])}")
    filters = [rows.parse_filter(text) for text in request.filters]
    rows.apply_filters([], filters, rows.TASK_FIELDS)  # checks the keys
    prefix = request.id_prefix.lower()
    job_id = bytes(request.job_id)
    ids = {task_id.hex() for task_id in request.task_ids}
    reply = gcs_pb2.GetTasksReply()
    end = request.offset + request.limit if request.limit else None
    selected = ((key, stored) for key, stored in entries
                if (not prefix or key.startswith(prefix)) and (not ids or key in ids)
                # A stored record of the job holds its id verbatim: others skipped unparsed.
                and not (job_id and isinstance(stored, bytes) and job_id not in stored))
    if not (filters or job_id or request.order == "time" or request.summarize):
        # The table's order is the key's: count everything, parse the page alone.
        for number, (_, stored) in enumerate(selected):
            reply.total += 1
            if number >= request.offset and (end is None or number < end):
                reply.tasks.append(parse(stored))
        return reply
    matched: list[tuple[tuple[float, str], gcs_pb2.TaskRecord]] = []
    summary: dict[str, list[dict[str, Any]]] = {}
    for key, stored in selected:
        record = parse(stored)
        if job_id and record.job_id != job_id:
            continue
        if filters or request.summarize:
            row = rows.task_row(record)
            if not all(f.matches(row) for f in filters):
                continue
            if request.summarize:
                summary.setdefault(row["name"] or "", []).append(row)
                continue
        when = first_event_time(record) if request.order == "time" else 0.0
        matched.append(((when, key), record))
    if request.summarize:
        reply.total = sum(len(found) for found in summary.values())
        for entry in rows.summarize_tasks(row for found in summary.values() for row in found):
            reply.summary.append(gcs_pb2.TaskSummaryRow(
                name=entry["func_or_class_name"], kind=entry["type"],
                state_counts=entry["state_counts"],
                error_type_counts=entry["error_type_counts"]))
        return reply
    reply.total = len(matched)
    if request.order == "time":
        matched = heapq.nsmallest(end, matched, key=lambda item: item[0]) \
            if end is not None else sorted(matched, key=lambda item: item[0])
    reply.tasks.extend(record for _, record in matched[request.offset:end])
    return reply
