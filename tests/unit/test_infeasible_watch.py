"""Work that fits no alive node is warned about once per shape, from the background pool."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tracedray.core.worker import infeasible_watch as iw
from tracedray.exceptions import RaySystemError

CPU_NODE = {"CPU": 2.0, "memory": 1e9}


def waiting(shape: dict[str, float], since: float, what: str = "task f") -> iw.Waiting:
    return iw.Waiting(iw.shape_of(shape), since, what)


def test_shape_drops_zero_amounts_and_sorts() -> None:
    assert iw.shape_of({"b": 1, "a": 2, "GPU": 0}) == (("a", 2.0), ("b", 1.0))


def test_nothing_is_due_before_the_wait() -> None:
    w = [waiting({"unicorn": 1}, since=10.0)]
    assert not iw.due(w, {}, now=10.0 + iw.WARN_AFTER_S - 0.1)
    assert iw.due(w, {}, now=10.0 + iw.WARN_AFTER_S)
    assert not iw.due(w, {w[0].shape: 12.0}, now=12.5)  # checked just now


def test_only_shapes_no_node_has_are_warned() -> None:
    now = 100.0
    w = [waiting({"CPU": 1}, 0.0), waiting({"GPU": 1}, 0.0), waiting({"CPU": 4}, 0.0),
         waiting({"GPU": 1}, 0.0, "task g")]
    warned = iw.to_warn(w, [CPU_NODE, {"CPU": 1.0}], {}, now)
    assert [x.shape for x in warned] == [(("GPU", 1.0),), (("CPU", 4.0),)]  # one per shape
    assert iw.to_warn(w, [CPU_NODE, {"GPU": 1.0}, {"CPU": 8.0}], {}, now) == []


def test_a_shape_is_warned_again_only_after_the_repeat_interval() -> None:
    w = [waiting({"unicorn": 1}, 0.0)]
    shape = w[0].shape
    assert iw.to_warn(w, [CPU_NODE], {shape: 50.0}, 50.0 + iw.REPEAT_S - 1) == []
    assert len(iw.to_warn(w, [CPU_NODE], {shape: 50.0}, 50.0 + iw.REPEAT_S)) == 1


def test_warning_names_the_request_the_cluster_and_what_to_do() -> None:
    text = iw.warning_text(waiting({"unicorn": 1}, 0.0), [CPU_NODE, {"CPU": 1.0}], 3.2)
    assert "task f requires {'unicorn': 1.0}" in text
    assert "no node has enough unicorn" in text
    assert "'CPU': 3.0" in text and "2 node(s)" in text
    assert iw.short_of(iw.shape_of({"CPU": 2, "GPU": 1}), [{"CPU": 1.0}, {"GPU": 1.0}]) == ["CPU"]
    assert "resources" in text and "joins" in text


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_watch_checks_in_background_and_warns_once(capfd: pytest.CaptureFixture[str]) -> None:
    clock = Clock()
    asked: list[int] = []
    queued: list[Callable[[], None]] = []

    def totals() -> list[dict[str, float]]:
        asked.append(1)
        return [CPU_NODE]

    watch = iw.InfeasibleWatch(totals, queued.append, clock=clock)
    w = [waiting({"unicorn": 1}, 0.0)]
    watch.poll(w)
    assert not queued  # not waited long enough
    clock.now = iw.WARN_AFTER_S
    watch.poll(w)
    watch.poll(w)  # one check at a time
    assert len(queued) == 1 and not asked  # nothing done on the polling thread
    queued.pop()()
    assert "requires {'unicorn': 1.0}" in capfd.readouterr().err
    clock.now += iw.RECHECK_S
    watch.poll(w)
    queued.pop()()
    assert capfd.readouterr().err == ""  # warned within REPEAT_S already
    assert watch.statistics() == iw.InfeasibleWatchStatistics(checks=2, warnings=1,
                                                                failed_checks=0)


def test_a_failed_check_is_counted_and_tried_again() -> None:
    clock = Clock()
    clock.now = 10.0
    queued: list[Callable[[], None]] = []

    def unreachable() -> list[dict[str, float]]:
        raise RaySystemError("GCS unavailable")

    watch = iw.InfeasibleWatch(unreachable, queued.append, clock=clock)
    watch.poll([waiting({"unicorn": 1}, 0.0)])
    queued.pop()()
    watch.poll([waiting({"unicorn": 1}, 0.0)])
    assert len(queued) == 1
    assert watch.statistics().failed_checks == 1
