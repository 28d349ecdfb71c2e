"""Task listings answered where the tasks are (core/gcs/task_query.py): filters, order,
page, total and summary, with only the page's records parsed."""

from __future__ import annotations

import pytest

from tracedray._proto.v1 import gcs_pb2
from tracedray.core.gcs.task_query import is_query, query_tasks
from tracedray.exceptions import ConfigError

JOB_A = bytes.fromhex("01000000")
JOB_B = bytes.fromhex("02000000")


def record(number: int, state: str = "FINISHED", name: str = "f", job: bytes = JOB_A,
           time: float = 0.0, error: str = "") -> gcs_pb2.TaskRecord:
    task = gcs_pb2.TaskRecord(task_id=number.to_bytes(4, "big"), state=state,
                              function_name=name, job_id=job, error_type=error)
    task.events.append(gcs_pb2.TaskEvent(state=state, time=time or float(number)))
    return task


def table(*records: gcs_pb2.TaskRecord) -> list[tuple[str, bytes]]:
    return sorted((r.task_id.hex(), r.SerializeToString()) for r in records)


class CountingParse:
    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, raw: bytes) -> gcs_pb2.TaskRecord:
        self.calls += 1
        return gcs_pb2.TaskRecord.FromString(raw)


def ids(reply: gcs_pb2.GetTasksReply) -> list[int]:
    return [int.from_bytes(t.task_id, "big") for t in reply.tasks]


def test_a_page_by_task_id_parses_only_the_page() -> None:
    parse = CountingParse()
    entries = table(*(record(n) for n in range(100)))
    reply = query_tasks(entries, gcs_pb2.GetTasksRequest(limit=3, offset=5, order="task_id"),
                        parse)
    assert reply.total == 100 and ids(reply) == [5, 6, 7]
    assert parse.calls == 3


def test_filters_count_every_match_and_return_the_page() -> None:
    entries = table(*(record(n, state="FAILED" if n % 3 == 0 else "FINISHED")
                      for n in range(30)))
    reply = query_tasks(entries, gcs_pb2.GetTasksRequest(filters=["state=failed"], limit=4,
                                                         order="task_id"))
    assert reply.total == 10 and ids(reply) == [0, 3, 6, 9]
    others = query_tasks(entries, gcs_pb2.GetTasksRequest(filters=["state!=FAILED"]))
    assert others.total == 20 and len(others.tasks) == 20


def test_order_by_time_and_job_and_prefix() -> None:
    entries = table(record(1, time=30.0), record(2, time=10.0, job=JOB_B),
                    record(3, time=20.0))
    by_time = query_tasks(entries, gcs_pb2.GetTasksRequest(order="time", limit=2))
    assert ids(by_time) == [2, 3] and by_time.total == 3
    of_job = query_tasks(entries, gcs_pb2.GetTasksRequest(job_id=JOB_A, order="time"))
    assert ids(of_job) == [3, 1]
    prefixed = query_tasks(entries, gcs_pb2.GetTasksRequest(id_prefix="0000000"))
    assert prefixed.total == 3
    one = query_tasks(entries, gcs_pb2.GetTasksRequest(id_prefix="00000002"))
    assert ids(one) == [2]


def test_summary_counts_per_function() -> None:
    entries = table(record(1, name="f"), record(2, name="f", state="FAILED", error="OOM"),
                    record(3, name="g"))
    reply = query_tasks(entries, gcs_pb2.GetTasksRequest(summarize=True))
    assert not reply.tasks and reply.total == 3
    first = reply.summary[0]
    assert (first.name, dict(first.state_counts), dict(first.error_type_counts)) == (
        "f", {"FAILED": 1, "FINISHED": 1}, {"OOM": 1})
    assert reply.summary[1].name == "g"


def test_bad_filter_or_order_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="colour"):
        query_tasks([], gcs_pb2.GetTasksRequest(filters=["colour=red"]))
    with pytest.raises(ConfigError, match="order"):
        query_tasks([], gcs_pb2.GetTasksRequest(order="size"))


def test_a_plain_request_is_not_a_query() -> None:
    assert not is_query(gcs_pb2.GetTasksRequest(limit=5, job_id=JOB_A))
    assert is_query(gcs_pb2.GetTasksRequest(order="task_id"))
