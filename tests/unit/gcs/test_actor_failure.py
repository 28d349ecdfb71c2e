"""One death of an actor's worker, heard twice (the creation task's end and the raylet's
report, in either order), is one transition of the manager's actor: restart or death."""

from __future__ import annotations

from typing import Any

import pytest

from tracedray._proto.v1 import common_pb2, gcs_pb2, raylet_pb2
from tracedray.core.address import Address
from tracedray.core.gcs import actor_lifecycle as lc
from tracedray.core.gcs import actor_manager
from tracedray.core.gcs.actor_lifecycle import Outcome
from tracedray.core.gcs.actor_manager import ActorManager

# --- the manager: the creation task's end and the raylet's report, in either order
NODE = "n1"
GRANTED = [Address(NODE, "127.0.0.1", 7000, "w1", 101, 7001),
           Address(NODE, "127.0.0.1", 7000, "w2", 102, 7002)]


class FakeRaylet:
    """Grants the workers of GRANTED in turn and records what it is asked to undo."""

    granted = 0
    killed: list[str] = []
    withdrawn: list[bytes] = []

    def __init__(self, target: str) -> None:
        self.target = target

    def start_actor_worker(self, request: raylet_pb2.StartActorWorkerRequest
                           ) -> raylet_pb2.LeaseReply:
        worker = GRANTED[FakeRaylet.granted]
        FakeRaylet.granted += 1
        return raylet_pb2.LeaseReply(status=raylet_pb2.LeaseReply.GRANTED,
                                     worker=worker.to_proto())

    def kill_worker(self, worker_id: str, force: bool = True) -> None:
        FakeRaylet.killed.append(worker_id)

    def withdraw_actor_creation(self, actor_id: bytes, cause: str, timeout: float
                                ) -> raylet_pb2.WithdrawActorCreationReply:
        FakeRaylet.withdrawn.append(actor_id)
        return raylet_pb2.WithdrawActorCreationReply()


def node() -> gcs_pb2.NodeWithLoad:
    found = gcs_pb2.NodeWithLoad()
    found.info.node_id, found.info.state = NODE, "ALIVE"
    found.info.raylet.CopyFrom(common_pb2.Address(node_id=NODE, ip="127.0.0.1", port=7000))
    return found


class Cluster:
    """An ActorManager on one fake node whose placements run only when a test says."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, max_restarts: int) -> None:
        monkeypatch.setattr(actor_manager, "RayletClient", FakeRaylet)
        monkeypatch.setattr(FakeRaylet, "granted", 0)
        monkeypatch.setattr(FakeRaylet, "killed", [])
        monkeypatch.setattr(FakeRaylet, "withdrawn", [])
        self.saved: list[str] = []
        self.manager = ActorManager(nodes=lambda: [node()],
                                    persist=lambda info: self.saved.append(info.state))
        self.placements: list[bytes] = []
        monkeypatch.setattr(self.manager, "_place", self.placements.append)
        monkeypatch.setattr(self.manager, "_pool", self)  # placements recorded at once
        spec = common_pb2.TaskSpec(actor_id=b"a", job_id=b"j")
        spec.actor_options.class_name = "A"
        spec.actor_options.max_restarts = max_restarts
        self.spec = spec
        self.manager.create(spec, get_if_exists=False)

    def submit(self, fn: Any, *args: Any) -> None:
        fn(*args)

    def grant(self) -> Address:
        lease = self.manager._request_worker(b"a", node(), self.spec)
        assert lease is not None
        return Address.from_proto(lease.worker)

    def stream_ended(self, worker: Address, outcome: Outcome = Outcome.WORKER_DIED,
                     error: str = "the actor's worker died during __init__ (stream ended)"
                     ) -> None:
        self.manager._finish_creation(b"a", NODE, worker, outcome, error)

    def report(self, worker: Address) -> None:
        self.manager.on_worker_death(gcs_pb2.WorkerDeath(
            node_id=NODE, worker_id=worker.worker_id, actor_id=b"a", exit_code=1,
            meaning="exited with code 1"))

    def actor(self) -> gcs_pb2.ActorInfo:
        (info,) = self.manager.list()
        return info


def both_accounts(cluster: Cluster, worker: Address, report_first: bool) -> None:
    if report_first:
        cluster.report(worker)
        cluster.stream_ended(worker)
    else:
        cluster.stream_ended(worker)
        cluster.report(worker)


@pytest.mark.parametrize("report_first", [False, True])
def test_a_worker_dying_in_init_restarts_its_actor_once(monkeypatch: pytest.MonkeyPatch,
                                                        report_first: bool) -> None:
    cluster = Cluster(monkeypatch, max_restarts=1)
    first = cluster.grant()
    both_accounts(cluster, first, report_first)
    info = cluster.actor()
    assert (info.state, info.num_restarts) == ("RESTARTING", 1)
    assert "died during __init__" in info.death_cause
    assert cluster.placements == [b"a", b"a"]  # created, restarted once
    assert FakeRaylet.withdrawn == []  # the restart's creation is not taken back
    second = cluster.grant()
    cluster.stream_ended(second, Outcome.RETURNED, "")
    info = cluster.actor()
    assert (info.state, info.num_restarts, info.pid) == ("ALIVE", 1, second.pid)
    cluster.report(first)  # late, of the first incarnation: nothing
    assert cluster.actor().state == "ALIVE"


@pytest.mark.parametrize("report_first", [False, True])
def test_without_restarts_a_worker_dying_in_init_kills_its_actor_once(
        monkeypatch: pytest.MonkeyPatch, report_first: bool) -> None:
    cluster = Cluster(monkeypatch, max_restarts=0)
    both_accounts(cluster, cluster.grant(), report_first)
    info = cluster.actor()
    assert (info.state, info.num_restarts) == ("DEAD", 0)
    assert "died during __init__" in info.death_cause
    assert cluster.saved.count("DEAD") == 1 and cluster.placements == [b"a"]


def test_an_init_that_raised_kills_its_actor_with_restarts_left(
        monkeypatch: pytest.MonkeyPatch) -> None:
    cluster = Cluster(monkeypatch, max_restarts=2)
    worker = cluster.grant()
    cluster.stream_ended(worker, Outcome.RAISED, "the actor's __init__ raised:\nValueError: no")
    info = cluster.actor()
    assert (info.state, info.num_restarts) == ("DEAD", 0)
    assert info.death_cause == "the actor's __init__ raised:\nValueError: no"
    assert FakeRaylet.withdrawn == [b"a"]  # its worker goes
    cluster.report(worker)
    assert cluster.saved.count("DEAD") == 1 and cluster.placements == [b"a"]


def test_an_alive_actors_worker_dying_restarts_it_once(monkeypatch: pytest.MonkeyPatch) -> None:
    cluster = Cluster(monkeypatch, max_restarts=1)
    worker = cluster.grant()
    cluster.stream_ended(worker, Outcome.RETURNED, "")
    cluster.report(worker)
    cluster.report(worker)
    info = cluster.actor()
    assert (info.state, info.num_restarts) == ("RESTARTING", 1)
    assert "died: exit 1" in info.death_cause and "__init__" not in info.death_cause


def test_statistics_count_actors_by_state_restarts_and_actions(
        monkeypatch: pytest.MonkeyPatch) -> None:
    cluster = Cluster(monkeypatch, max_restarts=1)
    cluster.manager._handle(b"a", lc.NodeChosen(NODE))
    worker = cluster.grant()
    stats = cluster.manager.statistics()
    assert stats.actors_by_state == {lc.PENDING_CREATION: 1}
    assert stats.creations_under_way == 1  # running __init__ on NODE
    cluster.stream_ended(worker, Outcome.RETURNED, "")
    assert cluster.manager.statistics().creations_under_way == 0
    cluster.report(worker)
    stats = cluster.manager.statistics()
    assert stats.actors_by_state == {lc.RESTARTING: 1} and stats.restarts_total == 1
    assert stats.actions_total["Place"] == 2 and stats.actions_total["Save"] == 3
    assert stats.actions_total["RequestWorker"] == stats.actions_total["RunCreation"] == 1
