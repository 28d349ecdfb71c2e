"""Span shapes: a shaped span is recorded as the same span its attribute dict gives."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from opentelemetry.trace import SpanKind, StatusCode

from tracedray import telemetry
from tracedray._proto.v1 import common_pb2
from tracedray.core import trace_context
from tracedray.telemetry import otlp_json, spool_format
from tracedray.telemetry.span_shape import SpanShape, decode_blob
from tracedray.telemetry.spool_convert import spool_files

CONSTANT = {"tracedray.node.id": "ab" * 14, "tracedray.worker.pid": 41, "ratio": 0.25,
            "flag": True, "names": ("a", "b"), "quote": 'say "hi"\n', "ünï": "cödé"}
SHAPE = SpanShape("task.dispatch", ("tracedray.task.id", "tracedray.task.attempt"), CONSTANT)

VALUES = [("ab" * 12, 0), ("é\"\\", -3), ("", 2**40), (True, 1.5), (("x", "y"), False)]


def _spans(session_dir: Path) -> list:
    resource_spans, warnings = otlp_json.read_trace_dir(session_dir / "traces")
    assert warnings == []
    return otlp_json.to_readable_spans(resource_spans)


@pytest.mark.parametrize("values", VALUES)
@pytest.mark.parametrize("parent, trace_state", [(0, ""), (0x1234, ""), (7, "v=1,w=2")])
def test_the_json_of_a_shaped_span_is_the_json_of_its_attribute_dict(
        values: tuple, parent: int, trace_state: str) -> None:
    otlp_json._shapes.clear()  # a converter meeting the shape for the first time
    start = 1_763_000_000_000_000_000
    shaped = otlp_json.shaped_span_json(SHAPE.blob, 2**100 + 5, 2**60 + 9, parent, start,
                                        12_345, values, trace_state)
    assert shaped == otlp_json.record_span_json(
        2**100 + 5, 2**60 + 9, parent, "task.dispatch", 0, start, start + 12_345,
        SHAPE.attributes(values), trace_state=trace_state)
    # The second time from the decoded-shape cache, the same again.
    assert otlp_json.shaped_span_json(SHAPE.blob, 2**100 + 5, 2**60 + 9, parent, start,
                                      12_345, values, trace_state) == shaped
    json.loads(shaped)


def test_a_shape_names_its_kind_and_a_variable_key_wins_over_a_constant_one() -> None:
    shape = SpanShape("rpc", ("a",), {"a": "constant", "b": 1}, kind=SpanKind.SERVER)
    assert shape.attributes(("mine",)) == {"a": "mine", "b": 1}
    assert decode_blob(shape.blob) == ("rpc", SpanKind.SERVER.value, (("b", 1),), ("a",))
    span = json.loads(otlp_json.shaped_span_json(shape.blob, 1, 2, 0, 10, 5, ("mine",)))
    assert span["kind"] == 2 and span["endTimeUnixNano"] == "15"  # OTLP SPAN_KIND_SERVER
    assert [item["key"] for item in span["attributes"]] == ["a", "b"]


def test_values_that_do_not_fit_the_shape_or_a_blob_that_is_no_shape_are_refused() -> None:
    with pytest.raises(ValueError):
        otlp_json.shaped_span_json(SHAPE.blob, 1, 2, 0, 10, 5, ("only one",))
    for junk in (b"", b"\x00junk", spool_format.prefix_payload("x")):
        otlp_json._shapes.clear()
        with pytest.raises((ValueError, EOFError, TypeError)):
            otlp_json.shaped_span_json(junk, 1, 2, 0, 10, 5, ())


def test_a_shape_cache_keeps_one_shape_per_constant_values_and_stays_bounded() -> None:
    cache = telemetry.ShapeCache("task.submit", ("id",), ("function", "site"), max_shapes=3)
    first = cache.get(("f", "a.py:1"))
    assert cache.get(("f", "a.py:1")) is first
    assert first.attributes(("x",)) == {"id": "x", "function": "f", "site": "a.py:1"}
    assert cache.get(("g", "a.py:1")) is not first
    for site in range(10):
        cache.get(("f", f"b.py:{site}"))
    assert len(cache) <= 3


def test_shaped_spans_are_recorded_as_the_spans_their_dicts_would_be(tmp_path: Path) -> None:
    telemetry.configure("driver", session_dir=tmp_path, node_id="n1", session_id="s1")
    with telemetry.span("outer") as outer:
        submitted = telemetry.open_shaped_span(SHAPE, ("ab" * 12, 0))
    parent = outer.get_span_context()
    # Three dispatch-like spans ended together (one SPANS record), one ended alone.
    pending = [telemetry.pending_shaped_span(SHAPE, (f"{i:024x}", i), parent=parent)
               for i in range(3)]
    telemetry.finish_spans(pending)
    alone = telemetry.pending_shaped_span(SHAPE, ("cd" * 12, 1), parent=parent)
    telemetry.finish_span(alone)
    telemetry.finish_span(submitted)
    spans = {span.context.span_id: span for span in _spans(tmp_path)}
    recorded = spans[submitted.get_span_context().span_id]
    assert recorded.name == "task.dispatch"
    assert recorded.parent is not None and recorded.parent.span_id == parent.span_id
    assert dict(recorded.attributes) == SHAPE.attributes(("ab" * 12, 0))
    children = [span for span in spans.values()
                if span.parent is not None and span.parent.span_id == parent.span_id
                and span.context.span_id != submitted.get_span_context().span_id]
    assert sorted(span.attributes["tracedray.task.id"] for span in children) == sorted(
        [f"{i:024x}" for i in range(3)] + ["cd" * 12])
    for span in children:
        assert span.context.trace_id == parent.trace_id
        assert dict(span.attributes) == SHAPE.attributes(
            (span.attributes["tracedray.task.id"], span.attributes["tracedray.task.attempt"]))
        assert span.end_time is not None and span.start_time is not None
        assert span.end_time >= span.start_time


def test_a_shaped_span_whose_attributes_change_is_recorded_with_them(tmp_path: Path) -> None:
    telemetry.configure("worker", session_dir=tmp_path)
    spec = common_pb2.TaskSpec()
    with telemetry.span("task.submit") as submit:
        trace_context.stamp(spec, submit.get_span_context())
    added, _ = trace_context.start_child(spec, SHAPE, ("ab" * 12, 0))
    added.set_attribute("result.size", 10)
    renamed, _ = trace_context.start_child(spec, SHAPE, ("cd" * 12, 0))
    renamed.update_name("task.renamed")
    failed, _ = trace_context.start_child(spec, SHAPE, ("ef" * 12, 0))
    telemetry.record_error(failed, ValueError("boom"))
    pending = telemetry.pending_shaped_span(SHAPE, ("01" * 12, 0),
                                            parent=submit.get_span_context())
    noted = telemetry.pending_shaped_span(SHAPE, ("02" * 12, 0),
                                          parent=submit.get_span_context())
    for span in (added, renamed, failed):
        span.end()
    assert pending is not None and noted is not None
    telemetry.finish_span(pending, error=RuntimeError("lost"))
    telemetry.finish_span(noted, attributes={"tracedray.dispatch.note": "late"})
    by_task = {span.attributes["tracedray.task.id"]: span for span in _spans(tmp_path)
               if "tracedray.task.id" in span.attributes}
    assert by_task["ab" * 12].attributes["result.size"] == 10
    assert by_task["cd" * 12].name == "task.renamed"
    assert by_task["ef" * 12].status.status_code is StatusCode.ERROR
    assert [event.name for event in by_task["ef" * 12].events] == ["exception"]
    assert by_task["01" * 12].status.status_code is StatusCode.ERROR
    assert by_task["02" * 12].attributes["tracedray.dispatch.note"] == "late"
    for task_id, span in by_task.items():
        assert {key: span.attributes[key] for key in SHAPE.attributes((task_id, 0))} == \
            SHAPE.attributes((task_id, 0))


def test_a_converter_resuming_mid_spool_needs_nothing_from_before(tmp_path: Path) -> None:
    # A shaped record carries its shape: a converter that never saw the spool's earlier
    # records (a new agent, a reader started later) still decodes it.
    telemetry.configure("driver", session_dir=tmp_path)
    telemetry.finish_span(telemetry.open_shaped_span(SHAPE, ("ab" * 12, 0)))
    assert len(_spans(tmp_path)) == 1  # converted: the spool's mark moves past it
    otlp_json._shapes.clear()
    telemetry.finish_span(telemetry.open_shaped_span(SHAPE, ("cd" * 12, 1)))
    spans = _spans(tmp_path)
    assert [span.attributes["tracedray.task.id"] for span in spans] == ["ab" * 12, "cd" * 12]
    assert spool_files(tmp_path / "traces")  # the writer's spool is still live


def test_a_shape_marshal_cannot_carry_records_its_spans_with_a_dict(tmp_path: Path) -> None:
    odd = SpanShape("odd", ("id",), {"range": range(3)})  # type: ignore[dict-item]
    assert odd.blob is None
    telemetry.configure("driver", session_dir=tmp_path)
    telemetry.finish_span(telemetry.open_shaped_span(odd, ("x",)))
    (span,) = _spans(tmp_path)
    assert span.name == "odd" and span.attributes["id"] == "x"
    assert tuple(span.attributes["range"]) == (0, 1, 2)


@pytest.mark.parametrize("sampler", [None, "always_on"])
def test_a_shape_s_kind_is_its_spans_kind_whichever_way_they_are_recorded(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sampler: str | None) -> None:
    # With a configured sampler spans are built as span objects, not recorded directly.
    if sampler:
        monkeypatch.setenv("OTEL_TRACES_SAMPLER", sampler)
    telemetry.configure("driver", session_dir=tmp_path)
    server = SpanShape("rpc", ("tracedray.task.id",), {"b": 1}, kind=SpanKind.SERVER)
    telemetry.finish_span(telemetry.open_shaped_span(server, ("opened",)))
    with telemetry.span("outer") as outer:
        parent = outer.get_span_context()
    ended = [telemetry.pending_shaped_span(server, (name,), parent=parent)
             for name in ("batched-1", "batched-2", "alone", "noted", "failed")]
    assert all(span is not None for span in ended)
    telemetry.finish_spans(ended[:2])
    telemetry.finish_span(ended[2])
    telemetry.finish_span(ended[3], attributes={"note": "late"})
    telemetry.finish_span(ended[4], error=RuntimeError("lost"))
    kinds = {span.attributes["tracedray.task.id"]: span.kind for span in _spans(tmp_path)
             if "tracedray.task.id" in span.attributes}
    assert kinds == dict.fromkeys(
        ("opened", "batched-1", "batched-2", "alone", "noted", "failed"), SpanKind.SERVER)


@pytest.mark.parametrize("sampler", [None, "always_on"])
def test_a_recorded_shaped_span_is_the_span_record_span_writes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sampler: str | None) -> None:
    """record_shaped_span (object.put/get) under the current span, ended now; an error
    or a named sampler goes through a span object with the same attributes."""
    from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

    if sampler:
        monkeypatch.setenv("OTEL_TRACES_SAMPLER", sampler)
    telemetry.configure("driver", session_dir=tmp_path)
    shape = SpanShape("object.put", ("tracedray.object.id", "tracedray.object.size"),
                      {"tracedray.object.call_site": "a.py:3"})
    with telemetry.span("outer") as outer:
        telemetry.record_shaped_span(shape, ("01" * 20, 76), start_ns=5)
        telemetry.record_shaped_span(shape, ("02" * 20, 0), start_ns=6,
                                     error=ValueError("unpicklable"))
    telemetry.record_shaped_span(shape, ("03" * 20, 1), start_ns=7)  # a root
    dropped = SpanContext(int("7" * 32, 16), int("8" * 16, 16), False,
                          TraceFlags(TraceFlags.DEFAULT))
    with telemetry.activate(NonRecordingSpan(dropped)):
        telemetry.record_shaped_span(shape, ("04" * 20, 1), start_ns=8)
    spans = {span.attributes.get("tracedray.object.id", ""): span
             for span in _spans(tmp_path) if span.name == "object.put"}
    # ParentBased (the default) drops the child of a sampled-out parent; ALWAYS_ON not.
    assert sorted(spans) == ["01" * 20, "02" * 20, "03" * 20, *(["04" * 20] if sampler else [])]
    for object_id, start in (("01" * 20, 5), ("02" * 20, 6), ("03" * 20, 7)):
        span = spans[object_id]
        assert span.start_time == start and span.end_time > start
        assert span.attributes["tracedray.object.call_site"] == "a.py:3"
    outer_context = outer.get_span_context()
    for object_id in ("01" * 20, "02" * 20):
        parent = spans[object_id].parent
        assert parent is not None and parent.span_id == outer_context.span_id
    assert spans["03" * 20].parent is None
    assert spans["01" * 20].attributes["tracedray.object.size"] == 76
    assert spans["01" * 20].status.status_code is StatusCode.UNSET
    assert spans["02" * 20].status.status_code is StatusCode.ERROR
    assert spans["02" * 20].attributes["error.type"] == "ValueError"
