"""What ``build_task`` puts in a task's spec: every field a call sets, and every field its
plan shares (copied from the plan's template), whatever calls came before it."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tracedray import logs, telemetry
from tracedray._proto.v1 import common_pb2
from tracedray.api import submission
from tracedray.core import ids
from tracedray.core.address import Address
from tracedray.core.object_ref import ObjectRef
from tracedray.core.worker.reference_table import ReferenceTable
from tracedray.core.worker.retry_policy import ANY_EXCEPTION, NO_RETRY, RetryExceptions
from tracedray.core.worker.task_events import TaskEventBuffer
from tracedray.telemetry import instruments, otlp_json
from tracedray.telemetry.append_file import read_data


class _Functions:
    def export(self, function: Any, what: str) -> str:
        return "fn-" + function.__name__


class _Worker:
    """What ``build_task`` uses of a core worker (no arguments to pickle here)."""

    def __init__(self) -> None:
        self.address = Address("n" * 28, "10.0.0.1", 4321, "w" * 28, 99)
        self.address_proto = common_pb2.Address(node_id="n" * 28, ip="10.0.0.1", port=4321,
                                                worker_id="w" * 28, pid=99)
        self.namespace = "ns"
        self.job_id = ids.new_job_id()
        self.current_task: common_pb2.TaskSpec | None = None
        self.functions = _Functions()
        self.references = ReferenceTable("w" * 28)
        self.task_events = TaskEventBuffer(gcs=None)  # type: ignore[arg-type]

    def current_job_id(self) -> bytes:
        return self.current_task.job_id if self.current_task is not None else self.job_id

    def new_owned_ref(self, object_id: bytes, call_site: str) -> ObjectRef:
        return ObjectRef(object_id, self.address, call_site, _worker=self,  # type: ignore[arg-type]
                         _owned=True)


@pytest.fixture(autouse=True)
def recorded(tmp_path: Path) -> Iterator[None]:
    telemetry.configure("driver", session_dir=tmp_path)
    logs.configure("driver", session_dir=tmp_path)
    yield
    telemetry.shutdown()
    logs.configure("test-detached", session_dir=None)


def _fn() -> None:
    return None


def _plan(worker: Any, **options: Any) -> submission.TaskPlan:
    return submission.plan_task(worker, _fn, "mod._fn", options)


def test_a_call_s_spec_has_the_plan_s_fields_and_its_own() -> None:
    worker: Any = _Worker()
    plan = _plan(worker, num_cpus=2, resources={"disk": 1}, max_retries=5,
                 retry_exceptions=True, num_returns=2)
    built = submission.build_task(worker, plan, (), {}, call_site="job.py:3 in main")
    spec = built.task.spec
    assert (spec.kind, spec.function_id, spec.function_name) == (
        common_pb2.NORMAL, "fn-_fn", "mod._fn")
    assert dict(spec.resources) == {"CPU": 2.0, "disk": 1.0}
    assert (spec.num_returns, spec.max_retries, spec.retry_exceptions) == (2, 5, True)
    assert (spec.job_id, spec.namespace, spec.caller) == (
        worker.job_id, "ns", worker.address_proto)
    assert len(spec.task_id) == ids.TASK_ID_BYTES and spec.call_site == "job.py:3 in main"
    assert (spec.parent_task_id, spec.depth, spec.attempt) == (b"", 0, 0)
    assert (spec.actor_id, spec.method_name, spec.HasField("actor_options")) == (b"", "", False)
    # The trace context is the task.submit span's, stamped with its first event once the
    # submit inbox's thread writes its record (before it hands the task over).
    assert (spec.trace_id, spec.parent_span_id) == (b"", 0)
    assert worker.task_events._first == {}
    built.record.write()
    trace_id, span_id, _, _ = telemetry.trace_fields(built.record.span)  # type: ignore[misc]
    assert (spec.trace_id, spec.parent_span_id, spec.trace_flags) == (
        trace_id.to_bytes(16, "big"), span_id, 1)
    assert built.task.trace_parent is built.record.span  # the dispatch's parent
    # A normal task's first state waits for the next flush, or its dispatch.
    [event] = worker.task_events._first.values()
    assert (event.spec, event.state) == (spec, "PENDING_ARGS_AVAIL")
    # Its refs: one per return, owned here, named by the call site.
    assert [r.binary() for r in built.refs] == built.task.return_ids == [
        ids.object_id_for(spec.task_id, 1), ids.object_id_for(spec.task_id, 2)]
    entry = worker.references.get(built.refs[0].binary())
    assert entry is not None and entry.owned and entry.local == 1
    assert entry.call_site == "job.py:3 in main"
    assert (built.task.retries_left, built.task.retry_exceptions) == (5, ANY_EXCEPTION)
    assert built.task.resource_shape == plan.resource_shape
    telemetry.finish_span(built.record.span)


def test_calls_of_one_plan_share_nothing_of_their_own() -> None:
    worker: Any = _Worker()
    plan = _plan(worker)
    parent = common_pb2.TaskSpec(task_id=ids.new_task_id(), job_id=ids.new_job_id(), depth=2)
    worker.current_task = parent
    first = submission.build_task(worker, plan, (), {}, call_site="a.py:1 in f")
    worker.current_task = None
    second = submission.build_task(worker, plan, (), {}, call_site="b.py:2 in g")
    first.record.write()
    second.record.write()
    inside, outside = first.task.spec, second.task.spec
    # Inside a task: its parent, depth and job; the next call, from the driver, has none
    # of them, and each call keeps its own id and call site.
    assert (inside.parent_task_id, inside.depth, inside.job_id) == (
        parent.task_id, 3, parent.job_id)
    assert (outside.parent_task_id, outside.depth, outside.job_id) == (
        b"", 0, worker.job_id)
    assert inside.task_id != outside.task_id
    assert (inside.call_site, outside.call_site) == ("a.py:1 in f", "b.py:2 in g")
    assert inside.trace_id != outside.trace_id or inside.parent_span_id != outside.parent_span_id
    # Both still have every shared field.
    for spec in (inside, outside):
        assert (spec.function_name, dict(spec.resources), spec.max_retries, spec.namespace) == (
            "mod._fn", {"CPU": 1.0}, submission.DEFAULT_MAX_RETRIES, "ns")


def test_actor_plans_carry_the_actor_and_the_method() -> None:
    worker: Any = _Worker()
    actor_id = ids.new_actor_id()
    options = common_pb2.ActorOptions(max_restarts=2, name="a", class_name="C")
    creation = submission.build_task(
        worker, submission.actor_creation_plan("fn-C", "C", {"CPU": 1.0}, actor_id, options),
        (), {}, call_site="c.py:1 in m").task.spec
    assert (creation.kind, creation.function_name, creation.actor_id) == (
        common_pb2.ACTOR_CREATION, "C.__init__", actor_id)
    assert creation.actor_options == options and dict(creation.resources) == {"CPU": 1.0}
    retry = RetryExceptions(True, (ValueError,))
    call = submission.build_task(
        worker, submission.actor_call_plan(actor_id, "C", "ping", 1, 4, retry), (), {},
        call_site="c.py:2 in m")
    spec = call.task.spec
    assert (spec.kind, spec.function_name, spec.method_name, spec.actor_id) == (
        common_pb2.ACTOR_METHOD, "C.ping", "ping", actor_id)
    assert (spec.max_retries, spec.retry_exceptions, dict(spec.resources)) == (4, True, {})
    assert call.task.retry_exceptions is retry and call.task.retries_left == 4
    assert submission.actor_call_plan(actor_id, "C", "ping", 1, 0, NO_RETRY).template.new_spec(
        worker.address_proto, "ns", worker.job_id).retry_exceptions is False


def test_a_spec_changed_by_its_task_leaves_the_template_alone() -> None:
    # The submitter and the resolver change a spec after it is built (attempts, args).
    worker: Any = _Worker()
    plan = _plan(worker)
    first = submission.build_task(worker, plan, (), {}, call_site="a.py:1 in f").task.spec
    first.attempt = 3
    first.resources["CPU"] = 7.0
    second = submission.build_task(worker, plan, (), {}, call_site="a.py:1 in f").task.spec
    assert (second.attempt, dict(second.resources)) == (0, {"CPU": 1.0})


def test_the_record_writes_the_line_and_ends_the_span_when_it_was_handed_over(
        tmp_path: Path) -> None:
    worker: Any = _Worker()
    built = submission.build_task(worker, _plan(worker), (), {}, call_site="a.py:1 in f")
    built.record.ended_at = ended_at = time.time_ns()
    time.sleep(0.01)
    built.record.write()  # later, on another thread: the span ends when it was handed over
    telemetry.force_flush()
    entries, _ = otlp_json.read_trace_dir(tmp_path / "traces")
    [span] = [s for s in otlp_json.to_readable_spans(entries) if s.name == "task.submit"]
    spec = built.task.spec
    assert span.end_time == ended_at
    assert span.context is not None and span.context.span_id == spec.parent_span_id
    assert dict(span.attributes or {})["tracedray.task.call_site"] == "a.py:1 in f"
    (log_file,) = (tmp_path / "logs").glob("*.jsonl")
    [line] = [json.loads(text) for text in read_data(log_file).decode().splitlines()
              if '"task.submit"' in text]
    assert (line["task_id"], line["function"], line["call_site"], line["attempt"]) == (
        spec.task_id.hex(), "mod._fn", "a.py:1 in f", 0)
    assert (line["trace_id"], line["span_id"]) == (spec.trace_id.hex(),
                                                   f"{spec.parent_span_id:016x}")
    assert line["logger"] == "tracedray.api.submission"


def test_the_span_opened_later_is_a_child_of_the_span_current_at_the_call(
        tmp_path: Path) -> None:
    worker: Any = _Worker()
    before = time.time_ns()
    with telemetry.span("outer") as outer:
        built = submission.build_task(worker, _plan(worker), (), {}, call_site="a.py:1 in f")
    built.record.ended_at = time.time_ns()
    built.record.write()  # outside "outer", as the inbox's thread writes it
    telemetry.force_flush()
    entries, _ = otlp_json.read_trace_dir(tmp_path / "traces")
    [span] = [s for s in otlp_json.to_readable_spans(entries) if s.name == "task.submit"]
    assert span.parent is not None and span.context is not None
    assert span.parent.span_id == outer.get_span_context().span_id
    assert span.context.trace_id == outer.get_span_context().trace_id
    assert before <= (span.start_time or 0) <= built.record.ended_at  # started at the call


def test_a_record_that_fails_to_record_still_lets_the_task_go(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # The inbox hands the task over after write(): a telemetry failure there must not
    # raise (it would drop the batch), and the task's first event is still recorded.
    worker: Any = _Worker()
    built = submission.build_task(worker, _plan(worker), (), {}, call_site="a.py:1 in f")

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("telemetry broke")

    monkeypatch.setattr(instruments, "task_submitted", broken)
    built.record.ended_at = time.time_ns()
    built.record.write()
    [event] = worker.task_events._first.values()
    assert event.state == "PENDING_ARGS_AVAIL"
    built.record.span.end()  # an owner ending it (an actor's creation) does nothing
