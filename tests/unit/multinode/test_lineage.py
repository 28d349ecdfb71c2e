"""Lineage bookkeeping, stale-input detection, and the version-drift test hook."""

from __future__ import annotations

import pytest

from tracedray import config
from tracedray._proto.v1 import common_pb2
from tracedray.core import environment
from tracedray.core.worker.lineage import Lineage
from tracedray.core.worker.recovery import stale_args
from tracedray.exceptions import ConfigError


def _value(object_id: bytes, node: str) -> common_pb2.ObjectValue:
    value = common_pb2.ObjectValue(object_id=object_id, size=10, store_node_id=node)
    if not node:
        value.inline_value.inband = b"x"
    return value


def _spec(task_id: bytes = b"t1") -> common_pb2.TaskSpec:
    return common_pb2.TaskSpec(task_id=task_id, kind=common_pb2.NORMAL, max_retries=3)


def test_only_results_in_a_store_are_remembered_and_released_ones_forgotten() -> None:
    lineage = Lineage()
    lineage.record(_spec(b"t0"), [b"i"], [_value(b"i", "")])  # inline: cannot be lost
    lineage.record(_spec(), [b"a", b"b"], [_value(b"a", "n1"), _value(b"b", "n2")])
    assert lineage.statistics().tasks == 1 and lineage.nodes() == {"n1", "n2"}
    assert lineage.objects_on("n1") == [b"a"]
    lineage.forget([b"a"])
    assert lineage.has(b"b") and lineage.statistics().tasks == 1
    lineage.forget([b"b"])
    assert lineage.statistics().tasks == 0 and not lineage.nodes()


def test_actor_tasks_have_no_lineage() -> None:
    lineage = Lineage()
    spec = _spec()
    spec.kind = common_pb2.ACTOR_METHOD
    lineage.record(spec, [b"a"], [_value(b"a", "n1")])
    assert not lineage.has(b"a")


def test_rebuild_hands_out_a_copy_with_the_next_attempt_a_bounded_number_of_times() -> None:
    lineage = Lineage()
    lineage.record(_spec(), [b"a"], [_value(b"a", "n1")])
    taken = lineage.take_for_rebuild(b"a", max_rebuilds=2)
    assert taken is not None
    spec, returns = taken
    assert spec.attempt == 1 and returns == (b"a",)
    assert lineage.nodes() == set()  # until the rerun records where it lives now
    lineage.record(spec, [b"a"], [_value(b"a", "n2")])
    assert lineage.objects_on("n2") == [b"a"]
    assert lineage.take_for_rebuild(b"a", max_rebuilds=2) is not None
    assert lineage.take_for_rebuild(b"a", max_rebuilds=2) is None
    assert lineage.take_for_rebuild(b"unknown", max_rebuilds=2) is None
    assert lineage.statistics().rebuilds_total == 2


def test_stale_args_are_ref_arguments_on_dead_nodes() -> None:
    spec = _spec()
    spec.args.add(is_ref=True).value.CopyFrom(_value(b"a", "dead"))
    spec.args.add(is_ref=True).value.CopyFrom(_value(b"b", "alive"))
    spec.args.add(is_ref=False).value.CopyFrom(_value(b"", "dead"))
    spec.args.add(is_ref=True).value.CopyFrom(_value(b"c", ""))
    assert stale_args(spec, {"dead"}) == [0]
    assert stale_args(spec, set()) == []


def test_fake_package_versions_change_the_fingerprint(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRACEDRAY_FAKE_PACKAGE_VERSIONS", "numpy=0.0.1, grpcio=1.0")
    environment.environment_fingerprint.cache_clear()
    try:
        env = environment.environment_fingerprint()
        assert env["pkg:numpy"] == "0.0.1" and env["pkg:grpcio"] == "1.0"
    finally:
        environment.environment_fingerprint.cache_clear()
    monkeypatch.setenv("TRACEDRAY_FAKE_PACKAGE_VERSIONS", "numpy")
    with pytest.raises(ConfigError, match="TRACEDRAY_FAKE_PACKAGE_VERSIONS"):
        config.FAKE_PACKAGE_VERSIONS.get()
    assert environment.drift({"pkg:numpy": "2.0"}, {"pkg:numpy": "0.0.1"}) == [
        "numpy: head 2.0, node 0.0.1"]
