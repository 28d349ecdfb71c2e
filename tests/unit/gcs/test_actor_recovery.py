"""A restarted GCS: which recovered actors it creates again, which actor workers it uses
at each raylet (all others go there), and a CreateActor retried across the restart."""

from __future__ import annotations

from typing import Any

import pytest

from tracedray._proto.v1 import common_pb2, gcs_pb2, raylet_pb2
from tracedray.core.address import Address
from tracedray.core.gcs import actor_recovery as ar
from tracedray.core.gcs.actor_manager import ActorManager


def actor(actor_id: bytes, state: str, node_id: str = "", worker_id: str = ""
          ) -> gcs_pb2.ActorInfo:
    info = gcs_pb2.ActorInfo(actor_id=actor_id, state=state)
    if node_id:
        info.address.CopyFrom(common_pb2.Address(node_id=node_id, worker_id=worker_id))
        info.node_id = node_id
    return info


def test_the_workers_in_use_are_the_alive_actors_own_per_node() -> None:
    actors = [actor(b"a", "ALIVE", "n1", "w2"), actor(b"b", "ALIVE", "n1", "w1"),
              actor(b"c", "ALIVE", "n2", "w3"),
              # A restarting actor's address names its dead worker; a dead one's, too.
              actor(b"r", "RESTARTING", "n2", "w4"), actor(b"d", "DEAD", "n1", "w5"),
              actor(b"p", "PENDING_CREATION"),
              actor(b"x", "ALIVE", "gone", "w6")]  # a node not asked
    assert ar.workers_in_use(actors, ["n1", "n2", "n3"]) == {
        "n1": ["w1", "w2"], "n2": ["w3"], "n3": []}


def test_one_kept_worker_per_actor_is_adopted_and_the_others_are_spare() -> None:
    def kept(actor_id: bytes, node_id: str, worker_id: str) -> raylet_pb2.AdoptedActorWorker:
        return raylet_pb2.AdoptedActorWorker(actor_id=actor_id, worker=common_pb2.Address(
            node_id=node_id, worker_id=worker_id))

    adopted: dict[bytes, Address] = {}
    spare = ar.adopt(adopted, [kept(b"a", "n1", "w1"), kept(b"b", "n1", "w2"),
                               kept(b"a", "n2", "w3")])
    assert {a: w.worker_id for a, w in adopted.items()} == {b"a": "w1", b"b": "w2"}
    assert [(a, w.node_id, w.worker_id) for a, w in spare] == [(b"a", "n2", "w3")]


def test_no_actor_means_no_worker_in_use() -> None:
    assert ar.workers_in_use([], ["n1"]) == {"n1": []}


def creation_task(actor_id: bytes, name: str = "") -> common_pb2.TaskSpec:
    spec = common_pb2.TaskSpec(actor_id=actor_id, job_id=b"j")
    spec.actor_options.name = name
    spec.actor_options.namespace = "ns"
    spec.actor_options.class_name = "A"
    return spec


class Inline:
    """An executor that runs what it is given at once."""

    def submit(self, fn: Any, *args: Any) -> None:
        fn(*args)


@pytest.mark.parametrize("name", ["", "named"])
def test_a_retried_create_actor_returns_the_actor_and_places_it_once(
        name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The GCS before took the request (the restarted one recovered the actor and places
    it) but died before answering, so the client sent it again."""
    saved: list[gcs_pb2.ActorInfo] = []
    manager = ActorManager(nodes=list, persist=saved.append)
    placed: list[Any] = []
    monkeypatch.setattr(manager, "_place", placed.append)
    monkeypatch.setattr(manager, "_pool", Inline())  # placements run (are recorded) at once
    recovered = actor(b"a1", "PENDING_CREATION")
    recovered.creation_task.CopyFrom(creation_task(b"a1", name))
    recovered.name, recovered.namespace = name, "ns"
    manager.restore([recovered])  # no node recovered: nothing to release first
    assert placed == [b"a1"]

    again = manager.create(creation_task(b"a1", name), get_if_exists=False)
    assert again.actor_id == b"a1" and again.state == "PENDING_CREATION"
    assert placed == [b"a1"] and saved == []  # not placed, nor recorded, a second time
    if name:  # the name is its own, not taken by another actor
        with pytest.raises(ValueError, match="already exists"):
            manager.create(creation_task(b"a2", name), get_if_exists=False)
