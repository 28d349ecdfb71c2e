"""The ``task.execute`` line a worker writes for each task and actor call (written off
structlog's chain, logs.write_info_at): its task fields and trace ids are those of the
execution, as a line the user's code logs inside it has them."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import cloudpickle
import pytest
from multinode_support import log_events

import tracedray
from tracedray import logs

cloudpickle.register_pickle_by_value(sys.modules[__name__])

pytestmark = pytest.mark.integration


@tracedray.remote
def work(tag: str) -> str:
    logs.get_logger("user.code").info("user.inside", tag=tag)
    return tag


@tracedray.remote
class Worker:
    def call(self, tag: str) -> str:
        logs.get_logger("user.code").info("user.inside", tag=tag)
        return tag


def _lines_of(session_dir: Path, event: str, tag_or_task: str) -> list[dict[str, Any]]:
    return [r for r in log_events(session_dir, event)
            if tag_or_task in (r.get("tag"), r.get("task_id"))]


def test_an_execution_line_names_its_task_and_the_span_the_task_ran_in(ray: Any) -> None:
    actor = Worker.remote()
    refs = {"task": work.remote("task"), "call": actor.call.remote("call")}
    assert ray.get(list(refs.values())) == ["task", "call"]
    tracedray.api.calls.global_worker().flush_background_work()
    session_dir = Path(str(tracedray.api.calls.current_session_dir()))
    for tag, ref in refs.items():
        task_id = ref.task_id().hex()
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            inside = _lines_of(session_dir, "user.inside", tag)
            executed = _lines_of(session_dir, "task.execute", task_id)
            submitted = _lines_of(session_dir, "task.submit", task_id)
            if inside and executed and submitted:
                break
            time.sleep(0.1)
        assert len(inside) == 1 and len(executed) == 1 and len(submitted) == 1, tag
        line, user = executed[0], inside[0]
        assert line["level"] == "info" and line["logger"] == "tracedray.core.worker.task_executor"
        assert line["function"].endswith("call" if tag == "call" else "work")
        assert line["attempt"] == 0 and line["pid"] == user["pid"] != submitted[0]["pid"]
        for key in ("task_id", "job_id", "worker_id", "actor_id", "task_name", "trace_id",
                    "span_id"):
            assert line.get(key) == user.get(key), (tag, key)
        # The execution's span is a child of the submission's, in the caller's trace.
        assert line["trace_id"] == submitted[0]["trace_id"]
        assert line["span_id"] != submitted[0]["span_id"]
        assert line["timestamp"] <= user["timestamp"]
