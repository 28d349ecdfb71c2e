"""An actor's creation task pushed twice to its worker (a restarted GCS adopting the
worker) runs once; the second push gets the first run's result."""

from __future__ import annotations

from tracedray._proto.v1 import common_pb2
from tracedray.core.worker.creation_once import CreationOnce


def result(task_id: bytes) -> common_pb2.TaskResult:
    return common_pb2.TaskResult(task_id=task_id, worker_id="w1")


def test_a_repeat_pushed_while_init_runs_gets_its_result_when_it_ends() -> None:
    once, answered = CreationOnce(), []
    assert once.admit(b"t", answered.append)  # the first push runs __init__
    assert not once.admit(b"t", answered.append)  # the adopting GCS's push waits
    assert answered == []
    once.ended(b"t", result(b"t"))
    assert answered == [result(b"t")] and once.repeats == 1


def test_a_repeat_pushed_after_init_ended_is_answered_at_once() -> None:
    once, answered = CreationOnce(), []
    assert once.admit(b"t", answered.append)
    once.ended(b"t", result(b"t"))
    assert not once.admit(b"t", answered.append)
    assert answered == [result(b"t")]


def test_another_creation_task_runs() -> None:
    once, answered = CreationOnce(), []
    assert once.admit(b"t", answered.append)
    assert once.admit(b"u", answered.append)
    once.ended(b"t", result(b"t"))  # the first's end no longer concerns anyone
    assert answered == []
