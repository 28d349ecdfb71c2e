"""The span query helpers of the pytest plugin (tracedray.testing.spans), on built spans."""

from __future__ import annotations

import pytest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanContext, Status, StatusCode, TraceFlags

from tracedray.testing.shared_cluster import BeforeTest, ClusterNeed, before_test, cluster_need
from tracedray.testing.spans import Spans, begun_before

TRACE_A, TRACE_B = 0xA1, 0xB2


def _span(name: str, span_id: int, *, trace: int = TRACE_A, parent: int | None = None,
          component: str = "driver", end: int = 0, error: bool = False,
          **attributes: object) -> ReadableSpan:
    def context(sid: int) -> SpanContext:
        return SpanContext(trace, sid, is_remote=False, trace_flags=TraceFlags(1))

    return ReadableSpan(
        name=name, context=context(span_id),
        parent=context(parent) if parent is not None else None,
        resource=Resource({"tracedray.component": component}),
        attributes={key.replace("__", "."): value for key, value in attributes.items()},
        status=Status(StatusCode.ERROR, "ValueError: x") if error else Status(StatusCode.UNSET),
        start_time=end, end_time=end)


# A task f submitted by the driver, run by a worker that submits g; an unrelated put.
SUBMIT_F = _span("task.submit", 1, end=1, tracedray__task__id="aa",
                 tracedray__task__function="mod.f")
EXEC_F = _span("task.execute", 2, parent=1, component="worker", end=5,
               tracedray__task__id="aa", tracedray__task__function="mod.f")
SUBMIT_G = _span("task.submit", 3, parent=2, component="worker", end=3,
                 tracedray__task__id="bb", tracedray__task__function="mod.g")
EXEC_G = _span("task.execute", 4, parent=3, component="worker", end=4, error=True,
               tracedray__task__id="bb", tracedray__task__function="mod.g",
               error__type="ValueError")
PUT = _span("object.put", 5, trace=TRACE_B, end=6, tracedray__object__size=100)
ALL = Spans([SUBMIT_F, SUBMIT_G, EXEC_G, EXEC_F, PUT])


def test_spans_is_a_tuple_and_slices_stay_spans() -> None:
    assert Spans() == ()
    assert len(ALL) == 5 and ALL[0] is SUBMIT_F
    assert isinstance(ALL[1:3], Spans) and list(ALL[1:3]) == [SUBMIT_G, EXEC_G]


def test_named_where_component_and_trace() -> None:
    assert ALL.named("task.execute") == (EXEC_G, EXEC_F)
    assert ALL.named("task.submit", "object.put") == (SUBMIT_F, SUBMIT_G, PUT)
    assert ALL.where({"tracedray.task.function": "mod.g"}) == (SUBMIT_G, EXEC_G)
    assert ALL.where(**{"tracedray.task.function": "mod.g"}) == (SUBMIT_G, EXEC_G)
    assert ALL.where({"tracedray.task.function": lambda f: f.endswith(".f")}) == (
        SUBMIT_F, EXEC_F)
    # a resource attribute matches when the span has no such attribute
    assert ALL.where({"tracedray.component": "worker"}) == ALL.component("worker")
    assert ALL.component("worker") == (SUBMIT_G, EXEC_G, EXEC_F)
    assert ALL.where({"no.such.key": 1}) == ()
    assert ALL.in_trace(EXEC_F) == (SUBMIT_F, SUBMIT_G, EXEC_G, EXEC_F)
    assert ALL.in_trace(f"{TRACE_B:032x}") == (PUT,)
    assert ALL.in_trace(TRACE_B) == (PUT,)
    with pytest.raises(ValueError, match="32 hex digits"):
        ALL.in_trace("not-hex")
    assert ALL.named("task.execute").where({"tracedray.task.id": "bb"}) == (EXEC_G,)


def test_family_relations() -> None:
    assert ALL.children_of(SUBMIT_F) == (EXEC_F,)
    assert ALL.children_of(EXEC_F) == (SUBMIT_G,)
    assert ALL.children_of(PUT) == ()
    assert ALL.descendants_of(SUBMIT_F) == (SUBMIT_G, EXEC_G, EXEC_F)
    assert ALL.parent_of(EXEC_G) is SUBMIT_G
    assert ALL.parent_of(SUBMIT_F) is None
    assert ALL.names() == {"task.submit": 2, "task.execute": 2, "object.put": 1}


def test_of_task_and_actor_take_ids_refs_and_handles() -> None:
    class Ref:  # an ObjectRef's face: task_id() returns an id with hex()
        def task_id(self) -> bytes:
            return bytes.fromhex("bb")

    class Handle:
        _actor_id = bytes.fromhex("cc")

    actor_call = _span("task.execute", 9, tracedray__actor__id="cc")
    spans = Spans([*ALL, actor_call])
    assert spans.of_task("bb") == (SUBMIT_G, EXEC_G)
    assert spans.of_task(b"\xbb") == spans.of_task(Ref()) == (SUBMIT_G, EXEC_G)
    assert spans.of_actor(Handle()) == (actor_call,)
    with pytest.raises(TypeError, match="cannot tell the id"):
        spans.of_task(3.5)


def test_one_returns_the_match_or_lists_what_was_there() -> None:
    assert ALL.one("task.execute", {"tracedray.task.function": "mod.f"}) is EXEC_F
    assert ALL.one(**{"tracedray.object.size": 100}) is PUT
    with pytest.raises(AssertionError) as none:
        ALL.one("task.execute", {"tracedray.task.function": "mod.h"})
    message = str(none.value)
    assert "name='task.execute', tracedray.task.function='mod.h'" in message
    assert "found none among 5 span(s)" in message
    # the listing names each span with what tells it apart
    assert "task.execute [worker] ERROR tracedray.task.function=mod.g tracedray.task.id=bb" \
        " error.type=ValueError" in message
    assert "object.put [driver]" in message
    with pytest.raises(AssertionError, match=r"found 2:\n  task\.execute") as many:
        ALL.one("task.execute")
    assert "object.put" not in str(many.value)
    with pytest.raises(AssertionError, match=r"found none among 0 span\(s\):\n  \(no spans\)"):
        Spans().one("task.execute")


def test_listing_is_bounded_and_tree_nests() -> None:
    many = Spans(_span("object.put", i, end=i) for i in range(1, 51))
    listing = many.listing(limit=3)
    assert listing.count("\n") == 3 and listing.endswith("... and 47 more")
    assert ALL.tree().splitlines() == [
        "  task.submit [driver] tracedray.task.function=mod.f tracedray.task.id=aa",
        "    task.execute [worker] tracedray.task.function=mod.f tracedray.task.id=aa",
        "      task.submit [worker] tracedray.task.function=mod.g tracedray.task.id=bb",
        "        task.execute [worker] ERROR tracedray.task.function=mod.g "
        "tracedray.task.id=bb error.type=ValueError",
        "  object.put [driver]",
    ]


def test_begun_before_hides_descendants_of_earlier_spans_only() -> None:
    # The test began after SUBMIT_F ended: f's execution and everything under it are
    # earlier work; the put (another trace) and a root are this test's.
    window = [EXEC_F, SUBMIT_G, EXEC_G, PUT]
    assert begun_before(window, {1}) == {2, 3, 4}
    # EXEC_F still running: g's spans cannot be traced back, and are kept
    assert begun_before([SUBMIT_G, EXEC_G, PUT], {1}) == set()
    assert begun_before(window, set()) == set()
    # a parent inside the window that is not earlier work keeps its children
    assert begun_before([SUBMIT_F, EXEC_F, SUBMIT_G], {99}) == set()
    # a cycle (never from OTel) ends instead of looping
    loop = [_span("x", 7, parent=8), _span("y", 8, parent=7)]
    assert begun_before(loop, {1}) == set()


@pytest.mark.parametrize(("fixtures", "isolated", "need"), [
    ((), False, ClusterNeed.NONE),
    (("tmp_path",), True, ClusterNeed.NONE),
    (("tracedray_spans",), False, ClusterNeed.SHARED),
    (("tracedray_spans",), True, ClusterNeed.ISOLATED),
    (("tracedray_isolated_spans",), False, ClusterNeed.ISOLATED),
    (("tracedray_cluster", "tracedray_spans"), True, ClusterNeed.SHARED),
])
def test_cluster_need(fixtures: tuple[str, ...], isolated: bool, need: ClusterNeed) -> None:
    assert cluster_need(fixtures, isolated=isolated) is need


def test_the_shared_cluster_stops_before_a_test_that_does_not_use_it() -> None:
    assert before_test(ClusterNeed.NONE, True) is BeforeTest.STOP
    assert before_test(ClusterNeed.ISOLATED, True) is BeforeTest.STOP
    assert before_test(ClusterNeed.SHARED, True) is BeforeTest.KEEP
    for need in ClusterNeed:
        assert before_test(need, False) is BeforeTest.KEEP
