"""Calls a lost actor connection took, without retries left: the error says why the
actor is gone when the GCS knows (it ended for good), else that it died running them."""

from __future__ import annotations

from typing import Any

import pytest

from tracedray._proto.v1 import common_pb2, gcs_pb2
from tracedray.core.serialization import deserialize
from tracedray.core.worker.actor_submitter import ActorSubmitter
from tracedray.core.worker.executor_reports import ExecutorReports
from tracedray.core.worker.pending_task import PendingTask
from tracedray.core.worker.task_events import TaskEventBuffer
from tracedray.exceptions import ActorDiedError, RayActorError, RaySystemError

ACTOR = b"\x07" * 16


class _Gcs:
    def __init__(self, info: gcs_pb2.ActorInfo | None, down: bool = False) -> None:
        self.info, self.down = info, down

    def find_actor(self, actor_id: bytes, **_: Any) -> gcs_pb2.ActorInfo | None:
        if self.down:
            raise RaySystemError("the GCS is unreachable")
        return self.info


class _Results:
    def __init__(self) -> None:
        self.failed: list[tuple[PendingTask, list[common_pb2.ObjectValue], str]] = []

    def finish(self, task: PendingTask, values: list[common_pb2.ObjectValue], state: str,
               **_: Any) -> None:
        self.failed.append((task, values, state))


def _error_of(gcs: _Gcs) -> BaseException:
    results = _Results()
    submitter = ActorSubmitter(gcs, resolver=None, results=results,  # type: ignore[arg-type]
                               load=lambda value: None, background=lambda *a: True,
                               first_state_reported=lambda task_ids: None,
                               release_first_state=lambda task_ids: None,
                               reports=ExecutorReports(TaskEventBuffer(gcs)))  # type: ignore[arg-type]
    task = PendingTask(spec=common_pb2.TaskSpec(task_id=b"\x01" * 24, actor_id=ACTOR),
                       return_ids=[b"\x02" * 28], dep_ids=[], unresolved=[], retries_left=0)
    submitter._fail_orphans(ACTOR, [task])  # noqa: SLF001 - what _on_broken schedules
    [(failed, [value], state)] = results.failed
    assert failed is task and state == "FAILED"
    assert value.inline_value.is_error
    error = deserialize(value.inline_value.inband, list(value.inline_value.buffers))
    assert isinstance(error, BaseException)
    return error


def test_an_actor_that_ended_for_good_fails_them_with_its_death_cause() -> None:
    info = gcs_pb2.ActorInfo(actor_id=ACTOR, state="DEAD",
                             death_cause="the actor was terminated with __ray_terminate__")
    error = _error_of(_Gcs(info))
    assert isinstance(error, ActorDiedError) and "__ray_terminate__" in str(error)


@pytest.mark.parametrize("gcs", [_Gcs(gcs_pb2.ActorInfo(actor_id=ACTOR, state="ALIVE")),
                                 _Gcs(None, down=True)], ids=["not known dead", "GCS down"])
def test_otherwise_the_actor_died_while_running_them(gcs: _Gcs) -> None:
    error = _error_of(gcs)
    assert type(error) is RayActorError and "died while running this call" in str(error)


def test_a_call_that_cannot_be_sent_at_once_has_its_first_state_released() -> None:
    """Its actor is not connected yet: the caller records the call's first state itself,
    rather than holding it for the actor (task_events.release_held)."""
    released: list[bytes] = []
    held: list[bytes] = []
    submitter = ActorSubmitter(_Gcs(None), resolver=None,  # type: ignore[arg-type]
                               results=_Results(),  # type: ignore[arg-type]
                               load=lambda value: None, background=lambda *a: True,
                               first_state_reported=held.extend,
                               release_first_state=released.extend,
                               reports=ExecutorReports(TaskEventBuffer(_Gcs(None))))  # type: ignore[arg-type]
    task = PendingTask(spec=common_pb2.TaskSpec(task_id=b"\x03" * 24, actor_id=ACTOR),
                       return_ids=[b"\x04" * 28], dep_ids=[], unresolved=[], retries_left=0)
    submitter.submit_many([(task, 0)])
    assert released == [task.task_id] and held == []
