"""A lease request follows spillbacks, falls back to the local raylet when a remote one
cannot be reached, and fails after too many hops (fake raylets, no processes)."""

from __future__ import annotations

import os
import threading
from typing import Any

import pytest

from tracedray._proto.v1 import common_pb2, raylet_pb2
from tracedray.core.address import Address
from tracedray.core.worker import lease_client
from tracedray.core.worker import submitter_events as ev
from tracedray.core.worker.lease_client import MAX_HOPS, LeaseClient
from tracedray.core.worker.pending_task import PendingTask
from tracedray.core.worker.submitter_book import SubmitterBook
from tracedray.exceptions import RaySystemError

Reply = raylet_pb2.LeaseReply


class Call:
    def __init__(self, reply: Reply | Exception) -> None:
        self._reply = reply

    def result(self) -> Reply:
        if isinstance(self._reply, Exception):
            raise self._reply
        return self._reply


class Raylet:
    """Answers every request with ``answer(request)``; remembers the requests."""

    def __init__(self, address: str, answer: Any) -> None:
        self.address = address
        self.answer = answer
        self.requests: list[raylet_pb2.LeaseRequest] = []

    def start_lease_request(self, request: raylet_pb2.LeaseRequest) -> Call:
        copy = raylet_pb2.LeaseRequest()
        copy.CopyFrom(request)
        self.requests.append(copy)
        return Call(self.answer(request))


class Raylets:
    worker_id = "driver-1"

    def __init__(self, local: Raylet) -> None:
        self.raylet = local
        self.address = Address("node-1", "127.0.0.1", 3, self.worker_id, os.getpid())

    def raylet_for_node(self, node_id: str) -> Raylet:
        return self.raylet


def _spill_to(port: int) -> Any:
    return lambda request: Reply(status=Reply.SPILLBACK,
                                 spillback_raylet=Address("n", "10.0.0.1", port).to_proto())


def _granted(request: raylet_pb2.LeaseRequest) -> Reply:
    return Reply(status=Reply.GRANTED, lease_id="L")


def _ask(local: Raylet, others: dict[str, Raylet], monkeypatch: pytest.MonkeyPatch,
         closed: bool = False) -> tuple[ev.AskAnswered, SubmitterBook]:
    monkeypatch.setattr(lease_client, "RayletClient", lambda target: others[target])
    book = SubmitterBook(1.0, lambda address: None)  # type: ignore[arg-type,return-value]
    spec = common_pb2.TaskSpec(task_id=b"t", job_id=b"\x01", resources={"CPU": 1.0})
    task = PendingTask(spec, [b"r"], [], [], retries_left=0)
    task.scheduling_key = "CPU=1@"
    (request,) = book.handle(ev.TasksReady([task], 0.0))
    assert isinstance(request, ev.RequestLease)
    book.closed = closed
    answers: list[ev.AskAnswered] = []
    client = LeaseClient(Raylets(local), threading.RLock(), book)  # type: ignore[arg-type]
    client.request(request.ask, task, answers.append)
    (answer,) = answers
    return answer, book


def test_a_request_follows_spillbacks_and_the_last_hop_must_grant_or_reject(
        monkeypatch: pytest.MonkeyPatch) -> None:
    local = Raylet("local", _spill_to(2))
    remote = Raylet("10.0.0.1:2", _granted)
    answer, _ = _ask(local, {"10.0.0.1:2": remote}, monkeypatch)
    assert answer.outcome is ev.AskOutcome.GRANTED and answer.raylet is remote
    assert not local.requests[0].grant_or_reject and remote.requests[0].grant_or_reject
    assert local.requests[0].request_id == remote.requests[0].request_id != b""


def test_an_unreachable_remote_raylet_is_replaced_by_the_local_one(
        monkeypatch: pytest.MonkeyPatch) -> None:
    hops = iter([_spill_to(2), _granted])
    local = Raylet("local", lambda request: next(hops)(request))
    remote = Raylet("10.0.0.1:2", lambda request: RaySystemError("unreachable"))
    answer, _ = _ask(local, {"10.0.0.1:2": remote}, monkeypatch)
    assert answer.outcome is ev.AskOutcome.GRANTED and answer.raylet is local
    assert len(remote.requests) == 1 and local.requests[1].grant_or_reject


def test_a_request_that_keeps_bouncing_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    local = Raylet("local", _spill_to(2))
    remote = Raylet("10.0.0.1:2", _spill_to(2))
    answer, _ = _ask(local, {"10.0.0.1:2": remote}, monkeypatch)
    assert answer.outcome is ev.AskOutcome.FAILED
    assert len(local.requests) + len(remote.requests) == MAX_HOPS


def test_a_failing_local_raylet_fails_the_request(monkeypatch: pytest.MonkeyPatch) -> None:
    local = Raylet("local", lambda request: RaySystemError("down"))
    answer, _ = _ask(local, {}, monkeypatch)
    assert answer.outcome is ev.AskOutcome.FAILED and len(local.requests) == 1


def test_a_request_of_a_closed_submitter_is_not_sent(monkeypatch: pytest.MonkeyPatch) -> None:
    local = Raylet("local", _granted)
    answer, _ = _ask(local, {}, monkeypatch, closed=True)
    assert answer.outcome is ev.AskOutcome.NOT_SENT and local.requests == []
