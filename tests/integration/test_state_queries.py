"""`list tasks`, `get task` and `summary tasks` answered in the GCS (issue 24): the client
receives a page and the total, never every record."""

from __future__ import annotations

import contextlib
import json
import time
from typing import Any

from typer.testing import CliRunner

from tracedray.cli.app import app
from tracedray.core.gcs.client import connect
from tracedray.util.state import get_task, list_tasks, summarize_tasks

TASKS = 30


def test_list_get_summary_are_paged_in_the_gcs(ray: Any) -> None:
    @ray.remote
    def paged(i: int) -> int:
        if i % 10 == 0:
            raise ValueError(i)
        return i

    refs = [paged.remote(i) for i in range(TASKS)]
    for ref in refs:
        with contextlib.suppress(ray.exceptions.RayTaskError):
            ray.get(ref)
    address = ray.api.calls._require_cluster().gcs_address
    deadline = time.monotonic() + 30  # workers report their tasks' ends on their own
    while list_tasks(filters=["state=RUNNING"], limit=1).total or \
            list_tasks(filters=["state=FINISHED"], limit=1).total < TASKS - 3:
        assert time.monotonic() < deadline, list_tasks(limit=0)
        time.sleep(0.1)

    reply = connect(address).get_tasks(limit=5, order="task_id",
                                       filters=["state=FINISHED", "name=" + _name(refs)])
    assert len(reply.tasks) == 5 and reply.total == TASKS - 3  # only the page travelled
    failed = list_tasks(filters=["state=FAILED"], limit=2)
    assert len(failed) == 2 and failed.total == 3 and failed.left_out == 1
    mine = next(row for row in summarize_tasks() if row["func_or_class_name"] == _name(refs))
    assert mine["total"] == TASKS and mine["state_counts"] == {"FAILED": 3, "FINISHED": 27}
    assert mine["error_type_counts"] == {"ValueError": 3}

    task_id = refs[7].task_id().hex()
    assert get_task(task_id)["task_id"] == task_id  # type: ignore[index]
    result = CliRunner().invoke(app, ["get", "task", task_id[:10], "--format", "json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["task_id"] == task_id
    ten = CliRunner().invoke(app, ["list", "tasks", "--limit", "10", "--format", "json"])
    assert len(json.loads(ten.stdout)) == 10 and "left out" in ten.stderr


def _name(refs: list[Any]) -> str:
    return str(get_task(refs[1].task_id().hex())["name"])  # type: ignore[index]
