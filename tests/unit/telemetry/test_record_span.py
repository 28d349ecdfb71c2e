"""record_span: the SDK-free fast path writes what span() writes, and honours the same switches."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from opentelemetry.trace.status import StatusCode

from tracedray import telemetry
from tracedray.telemetry import attributes as attrs
from tracedray.telemetry import otlp_json

ATTRIBUTES = {attrs.OBJECT_ID: "ab" * 20, attrs.OBJECT_SIZE: 76, "flag": True,
              "ratio": 0.5, "names": ("a", "b")}


def _spans(session_dir: Path) -> list:
    resource_spans, warnings = otlp_json.read_trace_dir(session_dir / "traces")
    assert warnings == []
    return otlp_json.to_readable_spans(resource_spans)


def _without_ids_and_times(line: str) -> dict:
    span = json.loads(line)["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    for key in ("traceId", "spanId", "parentSpanId", "startTimeUnixNano", "endTimeUnixNano"):
        span.pop(key, None)
    return json.loads(line) | {"span": span}


def test_lines_are_the_ones_the_sdk_path_writes(tmp_path: Path, trace_lines) -> None:
    telemetry.configure("driver", session_dir=tmp_path, node_id="n1", session_id="s1")
    sdk_span = telemetry.tracer().start_span("object.get", attributes=ATTRIBUTES)
    sdk_span.add_event("retry", {"attempt": 2})
    sdk_span.set_status(StatusCode.ERROR, "boom")
    sdk_span.end()
    trace_lines(tmp_path)  # converts: one line per conversion, so one span per line here
    with telemetry.span("object.get", ATTRIBUTES) as light:
        light.add_event("retry", {"attempt": 2})
        light.set_status(StatusCode.ERROR, "boom")
        light.set_status(StatusCode.UNSET)  # ignored, as by the SDK
    trace_lines(tmp_path)
    telemetry.record_span("object.get", ATTRIBUTES, start_ns=time.time_ns())
    via_sdk, via_span, direct = trace_lines(tmp_path)

    def comparable(line: str) -> dict:
        span = _without_ids_and_times(line)["span"]
        for event in span.get("events", []):
            event.pop("timeUnixNano")
        return span

    assert comparable(via_span) == comparable(via_sdk)
    assert comparable(direct) == {key: value for key, value in comparable(via_sdk).items()
                                  if key not in ("events", "status")} | {"status": {}}
    # Same resource and scope prefix, byte for byte.
    assert direct.split('"spans":[')[0] == via_span.split('"spans":[')[0] \
        == via_sdk.split('"spans":[')[0]


def test_light_span_api_surface(tmp_path: Path) -> None:
    telemetry.configure("driver", session_dir=tmp_path)
    span = telemetry.start_span("task.execute", {"a": 1})
    assert span.is_recording() and span.get_span_context().trace_flags.sampled
    span.set_attributes({"b": "x"})
    span.update_name("task.execute.renamed")
    span.set_status(StatusCode.OK)
    span.set_status(StatusCode.ERROR, "ignored: OK is final")
    try:
        raise KeyError("k")
    except KeyError as exc:
        span.record_exception(exc)
    span.end()
    span.end()  # a second end is ignored
    span.set_attribute("late", 1)  # after end: ignored
    assert not span.is_recording()
    (ended,) = _spans(tmp_path)
    assert ended.name == "task.execute.renamed"
    assert dict(ended.attributes) == {"a": 1, "b": "x"}
    assert ended.status.status_code is StatusCode.OK
    assert ended.events[0].attributes["exception.type"] == "KeyError"


def test_parent_is_the_current_span_and_times_are_kept(tmp_path: Path) -> None:
    telemetry.configure("driver", session_dir=tmp_path)
    start = time.time_ns()
    with telemetry.span("task.submit"):
        telemetry.record_span("object.put", {attrs.OBJECT_SIZE: 3}, start_ns=start,
                              end_ns=start + 1000)
    put, submit = _spans(tmp_path)
    assert put.name == "object.put" and put.parent is not None
    assert put.parent.span_id == submit.context.span_id
    assert put.context.trace_id == submit.context.trace_id
    assert (put.start_time, put.end_time) == (start, start + 1000)
    assert put.attributes[attrs.OBJECT_SIZE] == 3


def test_root_span_gets_a_new_trace(tmp_path: Path) -> None:
    telemetry.configure("driver", session_dir=tmp_path)
    telemetry.record_span("object.put", start_ns=time.time_ns())
    telemetry.record_span("object.put", start_ns=time.time_ns())
    first, second = _spans(tmp_path)
    assert first.parent is None and second.parent is None
    assert first.context.trace_id != second.context.trace_id


def test_error_is_recorded_as_span_records_it(tmp_path: Path) -> None:
    telemetry.configure("driver", session_dir=tmp_path)
    try:
        raise ValueError("bad value")
    except ValueError as exc:
        telemetry.record_span("object.get", {}, start_ns=time.time_ns(), error=exc)
    (span,) = _spans(tmp_path)
    assert span.status.status_code is StatusCode.ERROR
    assert span.status.description == "ValueError: bad value"
    assert span.attributes[attrs.ERROR_TYPE] == "ValueError"
    (event,) = span.events
    assert event.name == attrs.EXCEPTION_EVENT
    assert "raise ValueError" in event.attributes[attrs.EXCEPTION_STACKTRACE]


def test_sampler_and_disabled_sdk_are_honoured(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_TRACES_SAMPLER", "always_off")
    telemetry.configure("driver", session_dir=tmp_path / "off")
    telemetry.record_span("object.put", start_ns=time.time_ns())
    assert _spans(tmp_path / "off") == []
    monkeypatch.delenv("OTEL_TRACES_SAMPLER")
    monkeypatch.setenv("OTEL_SDK_DISABLED", "true")
    telemetry.configure("driver", session_dir=tmp_path / "disabled")
    telemetry.record_span("object.put", start_ns=time.time_ns())
    assert not (tmp_path / "disabled" / "traces").exists()


def test_before_configure_it_is_a_no_op() -> None:
    telemetry.record_span("object.put", start_ns=time.time_ns())  # must not raise
    assert telemetry.statistics().spans_written == 0


@pytest.mark.parametrize("sampler", [None, "parentbased_always_on"])
def test_children_follow_a_sampled_out_parent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                              sampler: str | None) -> None:
    # None: the inline default decision; a named sampler: the provider's sampler object.
    if sampler:
        monkeypatch.setenv("OTEL_TRACES_SAMPLER", sampler)
    telemetry.configure("worker", session_dir=tmp_path)
    dropped = telemetry.context_from_carrier(
        {"traceparent": "00-" + "1" * 32 + "-" + "2" * 16 + "-00"})
    kept = telemetry.context_from_carrier(
        {"traceparent": "00-" + "3" * 32 + "-" + "4" * 16 + "-01"})
    with telemetry.span("task.execute", context=dropped) as span:
        assert not span.is_recording()
        assert format(span.get_span_context().trace_id, "032x") == "1" * 32
        telemetry.record_span("object.get", start_ns=time.time_ns())
        with telemetry.span("task.submit") as child:
            assert not child.is_recording()
        # Dispatch spans under the dropped span, ending alone and as a batch.
        parent = span.get_span_context()
        telemetry.finish_spans([telemetry.pending_span("task.dispatch", {}, parent=parent)])
        telemetry.finish_spans([telemetry.pending_span("task.dispatch", {}, parent=parent)
                                for _ in range(2)])
    with telemetry.span("task.execute", context=kept) as kept_span:
        telemetry.record_span("object.get", start_ns=time.time_ns())
        telemetry.finish_spans([telemetry.pending_span(
            "task.dispatch", {}, parent=kept_span.get_span_context())])
    names = sorted(span.name for span in _spans(tmp_path))
    assert names == ["object.get", "task.dispatch", "task.execute"]
    assert {format(span.context.trace_id, "032x") for span in _spans(tmp_path)} == {"3" * 32}


def test_span_contexts_built_without_revalidation_equal_the_checked_ones(tmp_path: Path) -> None:
    from opentelemetry.trace import SpanContext

    telemetry.configure("driver", session_dir=tmp_path)
    with telemetry.span("outer") as outer:
        context = outer.get_span_context()
    checked = SpanContext(context.trace_id, context.span_id, False, context.trace_flags,
                          context.trace_state)
    assert context == checked and context.is_valid and not context.is_remote
    assert type(context) is SpanContext and repr(context) == repr(checked)


def test_finish_span_ends_span_objects_and_pending_spans_alike(tmp_path: Path) -> None:
    telemetry.configure("driver", session_dir=tmp_path)
    with telemetry.span("task.submit") as submit:
        parent = submit.get_span_context()
    light = telemetry.start_span("dispatch.light", parent=parent)
    pending = telemetry.pending_span("dispatch.pending", {}, parent=parent)
    assert pending is not None
    telemetry.finish_span(light, error=RuntimeError("worker died"))
    telemetry.finish_span(pending, error=RuntimeError("worker died"))
    ok = telemetry.pending_span("dispatch.ok", {}, parent=parent)
    assert ok is not None
    telemetry.finish_span(ok, attributes={"tracedray.dispatch.note": "stolen back"})
    spans = {span.name: span for span in _spans(tmp_path)}
    for name in ("dispatch.light", "dispatch.pending"):
        failed = spans[name]
        assert failed.status.status_code is StatusCode.ERROR
        assert failed.attributes["error.type"] == "RuntimeError"
        assert [event.name for event in failed.events] == ["exception"]
        assert failed.parent is not None and failed.parent.span_id == parent.span_id
    assert spans["dispatch.ok"].attributes["tracedray.dispatch.note"] == "stolen back"
    assert spans["dispatch.ok"].status.status_code is StatusCode.UNSET
    assert spans["dispatch.ok"].context.trace_id == parent.trace_id


def test_attribute_values_marshal_cannot_carry_are_written_as_text(tmp_path: Path) -> None:
    """Spans built on the hot paths' one-tuple route (a span object's end, a PendingSpan)
    fall back to encoding on the spot; the span is neither lost nor an error."""

    class Odd:
        def __str__(self) -> str:
            return "odd-value"

    telemetry.configure("driver", session_dir=tmp_path, node_id="n1", session_id="s1")
    try:
        span = telemetry.start_span("object.put", {"plain": 1})
        span.set_attribute("odd", Odd())  # type: ignore[arg-type]
        span.end()
        pending = telemetry.pending_span("task.dispatch", {"odd": Odd()},  # type: ignore[dict-item]
                                         parent=span.get_span_context())
        assert pending is not None
        pending.end()
        assert telemetry.statistics().spans_dropped == 0
    finally:
        telemetry.shutdown()
    spans = {s.name: s for s in _spans(tmp_path)}
    assert spans["object.put"].attributes["odd"] == "odd-value"
    assert spans["object.put"].attributes["plain"] == 1
    assert spans["task.dispatch"].attributes["odd"] == "odd-value"
    assert spans["task.dispatch"].parent.span_id == spans["object.put"].context.span_id


@pytest.mark.parametrize("sampler", [None, "always_on"])
def test_open_span_hands_out_the_ids_it_is_recorded_with(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sampler: str | None) -> None:
    # None: the one-record route (a PendingSpan with its own context); a named sampler:
    # a span object. Both must record what was handed out before the span ended.
    if sampler:
        monkeypatch.setenv("OTEL_TRACES_SAMPLER", sampler)
    telemetry.configure("driver", session_dir=tmp_path)
    with telemetry.span("task.execute") as outer:
        nested = telemetry.open_span("task.submit", {"n": 1})
        handed_out = nested.get_span_context()
    root = telemetry.open_span("task.submit", {"n": 2})
    failed = telemetry.open_span("task.submit", {"n": 3})
    telemetry.finish_span(failed, error=ValueError("unpicklable argument"))
    nested.end()
    root.end()
    assert isinstance(nested, telemetry.PendingSpan) is (sampler is None)
    spans = {span.attributes.get("n"): span for span in _spans(tmp_path)
             if span.name == "task.submit"}
    assert spans[1].context.span_id == handed_out.span_id
    assert spans[1].context.trace_id == outer.get_span_context().trace_id
    assert spans[1].parent is not None
    assert spans[1].parent.span_id == outer.get_span_context().span_id
    assert spans[2].parent is None
    assert spans[2].context.span_id == root.get_span_context().span_id
    assert spans[3].context.span_id == failed.get_span_context().span_id
    assert spans[3].status.status_code is StatusCode.ERROR
    assert spans[3].attributes[attrs.ERROR_TYPE] == "ValueError"
    assert [event.name for event in spans[3].events] == [attrs.EXCEPTION_EVENT]


def test_open_span_follows_a_sampled_out_parent_and_the_off_switch(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    telemetry.configure("worker", session_dir=tmp_path)
    dropped = telemetry.context_from_carrier(
        {"traceparent": "00-" + "1" * 32 + "-" + "2" * 16 + "-00"})
    with telemetry.span("task.execute", context=dropped):
        child = telemetry.open_span("task.submit", {})
    assert not child.get_span_context().trace_flags.sampled
    assert child.get_span_context().trace_id == int("1" * 32, 16)  # still joins the trace
    child.end()
    assert [span.name for span in _spans(tmp_path)] == []
    monkeypatch.setenv("OTEL_SDK_DISABLED", "true")
    telemetry.configure("worker", session_dir=tmp_path / "disabled")
    assert not telemetry.open_span("task.submit", {}).get_span_context().is_valid


def test_pending_spans_that_end_together_are_one_record_and_every_span(
        tmp_path: Path) -> None:
    from tracedray.telemetry import _state

    class Odd:
        def __str__(self) -> str:
            return "odd-value"

    telemetry.configure("driver", session_dir=tmp_path, node_id="n1", session_id="s1")
    try:
        writer = _state.current().file_writer  # type: ignore[union-attr]
        with telemetry.span("task.submit") as submit:
            parent = submit.get_span_context()
        dispatches = [telemetry.pending_span("task.dispatch", {"n": n}, parent=parent)
                      for n in range(3)]
        light = telemetry.start_span("task.dispatch", {"n": 3}, parent=parent)
        records_before = writer.statistics().spans_written  # type: ignore[union-attr]
        telemetry.finish_spans([*dispatches, light])  # type: ignore[list-item]
        # The three PendingSpans: one SPANS record; the span object: its own record.
        assert writer.statistics().spans_written == records_before + 2  # type: ignore[union-attr]
        odd = [telemetry.pending_span("task.dispatch", {"n": 10 + n, "odd": Odd()},
                                      parent=parent) for n in range(2)]
        telemetry.finish_spans(odd)  # type: ignore[arg-type]  # marshal refuses: one by one
        assert telemetry.statistics().spans_dropped == 0
    finally:
        telemetry.shutdown()
    spans = [s for s in _spans(tmp_path) if s.name == "task.dispatch"]
    assert sorted(s.attributes["n"] for s in spans) == [0, 1, 2, 3, 10, 11]
    assert all(s.parent is not None and s.parent.span_id == parent.span_id for s in spans)
    assert all(s.context.trace_id == parent.trace_id for s in spans)
    assert len({s.context.span_id for s in spans}) == 6
    assert {s.attributes.get("odd") for s in spans if s.attributes["n"] >= 10} == {"odd-value"}


def test_the_current_span_shortcuts_read_what_the_api_reads(tmp_path: Path) -> None:
    import threading

    from opentelemetry import context as context_api
    from opentelemetry import trace

    from tracedray.telemetry import _otel_adapter

    reader, span_reader = _otel_adapter.current_span_context, _otel_adapter.current_span
    # The shortcuts are in use here.
    assert reader is not _otel_adapter.api_current_span_context
    assert span_reader is not trace.get_current_span

    def api() -> object:
        return trace.get_current_span().get_span_context()

    telemetry.configure("driver", session_dir=tmp_path)
    assert reader() is api() is trace.INVALID_SPAN_CONTEXT
    assert span_reader() is trace.get_current_span() is trace.INVALID_SPAN
    with telemetry.span("outer") as outer:
        assert reader() is api() is outer.get_span_context()
        assert span_reader() is trace.get_current_span() is outer
        with telemetry.span("inner") as inner:
            assert reader() is inner.get_span_context()
            assert span_reader() is inner
        seen_in_thread: list[object] = []
        thread = threading.Thread(target=lambda: seen_in_thread.extend((reader(),
                                                                        span_reader())))
        thread.start()
        thread.join()
        # Contexts are per thread.
        assert seen_in_thread == [trace.INVALID_SPAN_CONTEXT, trace.INVALID_SPAN]
    # Something that is not a span under the span key: invalid, as the API says.
    token = context_api.attach(context_api.set_value(trace.propagation._SPAN_KEY, "junk"))
    try:
        assert reader() is api() is trace.INVALID_SPAN_CONTEXT
        assert span_reader() is trace.get_current_span() is trace.INVALID_SPAN
    finally:
        context_api.detach(token)


def test_a_log_line_that_names_its_trace_ids_keeps_them(tmp_path: Path) -> None:
    from tracedray.logs._processors import add_trace_ids

    telemetry.configure("driver", session_dir=tmp_path)
    with telemetry.span("task.execute") as span:
        own = ("%032x" % span.get_span_context().trace_id,  # noqa: UP031
               "%016x" % span.get_span_context().span_id)  # noqa: UP031
        given = add_trace_ids(None, "info", {"trace_id": "1" * 32, "span_id": "2" * 16})
        assert (given["trace_id"], given["span_id"]) == ("1" * 32, "2" * 16)
        # Half given: the current span's id fills in the other half.
        half = add_trace_ids(None, "info", {"trace_id": "1" * 32})
        assert (half["trace_id"], half["span_id"]) == ("1" * 32, own[1])
        assert add_trace_ids(None, "info", {})["span_id"] == own[1]
    assert "trace_id" not in add_trace_ids(None, "info", {})


def test_ids_are_drawn_as_the_sdk_draws_them_or_from_a_custom_generator(
        tmp_path: Path) -> None:
    import random

    from opentelemetry.sdk.trace.id_generator import IdGenerator

    from tracedray.telemetry import _state

    telemetry.configure("driver", session_dir=tmp_path)
    pipeline = _state.current()
    assert pipeline is not None and pipeline.random_ids
    random.seed(7)
    expected_span_id, expected_trace_id = random.getrandbits(64), random.getrandbits(128)
    random.seed(7)
    root = telemetry.open_span("task.submit", {})
    assert root.get_span_context().span_id == expected_span_id
    assert root.get_span_context().trace_id == expected_trace_id

    class Counting(IdGenerator):
        def __init__(self) -> None:
            self.n = 0

        def generate_span_id(self) -> int:
            self.n += 1
            return self.n

        def generate_trace_id(self) -> int:
            self.n += 1
            return 1000 + self.n

    pipeline.ids, pipeline.random_ids = Counting(), False
    custom = telemetry.open_span("task.submit", {})
    assert (custom.get_span_context().span_id, custom.get_span_context().trace_id) == (1, 1002)
    telemetry.record_span("object.put", {}, start_ns=time.time_ns())
    telemetry.finish_spans([telemetry.pending_span("task.dispatch", {"n": n},  # type: ignore[list-item]
                                                   parent=custom.get_span_context())
                            for n in range(2)])
    custom.end()
    root.end()
    telemetry.shutdown()
    ids = {(s.name, s.context.span_id) for s in _spans(tmp_path)}
    assert ("task.submit", 1) in ids and ("object.put", 4) in ids
    assert {span_id for name, span_id in ids if name == "task.dispatch"} == {5, 6}


def test_the_activation_shortcut_sets_and_restores_what_the_api_sees(tmp_path: Path) -> None:
    from opentelemetry import baggage, trace
    from opentelemetry import context as context_api

    from tracedray.telemetry import _otel_adapter

    assert _otel_adapter.attach_span is not _otel_adapter.api_attach_span  # the shortcut
    telemetry.configure("worker", session_dir=tmp_path)
    outer = telemetry.start_span("task.execute", {})
    inner = telemetry.start_span("task.execute", {})
    # A user's own context value (baggage) must survive our activations.
    user_token = context_api.attach(baggage.set_baggage("tenant", "acme"))
    try:
        before = context_api.get_current()
        with telemetry.activate(outer):
            assert trace.get_current_span() is outer
            assert baggage.get_baggage("tenant") == "acme"
            with telemetry.activate(inner):
                assert trace.get_current_span() is inner
            assert trace.get_current_span() is outer
            with telemetry.span("user.work") as work:  # span() uses the same shortcut
                assert trace.get_current_span() is work
            assert trace.get_current_span() is outer
        assert context_api.get_current() is before
    finally:
        context_api.detach(user_token)
    assert trace.get_current_span() is trace.INVALID_SPAN


@pytest.mark.parametrize("sampler", [None, "always_on"])
def test_a_pending_span_is_a_parent_as_its_span_context_is(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sampler: str | None) -> None:
    """A dispatch started under its task's submission (a PendingSpan, whose ids are
    plain ints) is recorded in the submission's trace, under it, with its tracestate:
    alone, in a batch, with an error, and through a span object (a named sampler)."""
    from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags, TraceState

    if sampler:
        monkeypatch.setenv("OTEL_TRACES_SAMPLER", sampler)
    telemetry.configure("driver", session_dir=tmp_path)
    state = TraceState([("vendor", "opaque")])
    upstream = SpanContext(int("5" * 32, 16), int("6" * 16, 16), True,
                           TraceFlags(TraceFlags.SAMPLED), state)
    with telemetry.activate(NonRecordingSpan(upstream)):
        submit = telemetry.open_span("task.submit", {"n": 0})
    assert isinstance(submit, telemetry.PendingSpan) is (sampler is None)
    context = submit.get_span_context()
    assert context.trace_id == upstream.trace_id and context.trace_state == state
    assert telemetry.trace_fields(submit) == (context.trace_id, context.span_id, 1,
                                              "vendor=opaque")
    parent = submit if isinstance(submit, telemetry.PendingSpan) else context
    alone = telemetry.pending_span("dispatch.alone", {"n": 1}, parent=parent)
    batch = [telemetry.pending_span("dispatch.batch", {"n": n}, parent=parent)
             for n in (2, 3)]
    failed = telemetry.pending_span("dispatch.failed", {"n": 4}, parent=parent)
    assert alone is not None and failed is not None and None not in batch
    telemetry.finish_span(alone)
    telemetry.finish_spans(batch)
    telemetry.finish_span(failed, error=RuntimeError("worker died"))
    submit.end()
    spans = {span.attributes["n"]: span for span in _spans(tmp_path)}
    assert spans[0].parent is not None and spans[0].parent.span_id == upstream.span_id
    assert spans[0].context.span_id == context.span_id
    for n in (1, 2, 3, 4):
        assert spans[n].context.trace_id == upstream.trace_id
        assert spans[n].parent is not None and spans[n].parent.span_id == context.span_id
        assert spans[n].context.trace_state == state
    assert len({span.context.span_id for span in spans.values()}) == 5
    assert spans[4].status.status_code is StatusCode.ERROR
    assert spans[1].status.status_code is StatusCode.UNSET


def test_a_sampled_out_parent_gets_no_pending_child(tmp_path: Path) -> None:
    from opentelemetry.trace import SpanContext, TraceFlags

    telemetry.configure("driver", session_dir=tmp_path)
    dropped = SpanContext(int("7" * 32, 16), int("8" * 16, 16), False,
                          TraceFlags(TraceFlags.DEFAULT))
    assert telemetry.pending_span("task.dispatch", {}, parent=dropped) is None
    root = telemetry.pending_span("task.dispatch", {"root": True}, parent=None)
    assert isinstance(root, telemetry.PendingSpan)
    telemetry.finish_span(root)
    (span,) = _spans(tmp_path)
    assert span.parent is None and span.context.trace_id != dropped.trace_id
