from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

from google.protobuf import json_format
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.trace.v1.trace_pb2 import TracesData
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Link, SpanKind
from opentelemetry.trace.status import Status, StatusCode

from tracedray.telemetry import otlp_json


def _sample_spans() -> list[ReadableSpan]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource({"service.name": "t", "process.pid": 7}),
                              shutdown_on_exit=False)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("tracedray", "0.1.0")
    submit_attributes = {"s": "x", "i": 3, "f": 0.5, "b": False, "l": ["a", "b"], "n": [1, 2],
                         "nan": float("nan")}
    with tracer.start_as_current_span("task.submit", kind=SpanKind.PRODUCER,
                                      attributes=submit_attributes) as parent:
        link = Link(parent.get_span_context(), {"why": "follows"})
        with tracer.start_as_current_span("task.execute", links=[link]) as child:
            child.add_event("exception", {"exception.type": "ValueError"})
            child.set_status(Status(StatusCode.ERROR, "ValueError: boom"))
    return list(exporter.get_finished_spans())


def _hex_ids_to_base64(value: Any) -> Any:
    """OTLP JSON's hex ids, as protobuf's canonical JSON (base64) expects them."""
    if isinstance(value, dict):
        return {key: (base64.b64encode(bytes.fromhex(item)).decode()
                      if key in ("traceId", "spanId", "parentSpanId") else
                      _hex_ids_to_base64(item))
                for key, item in value.items()}
    if isinstance(value, list):
        return [_hex_ids_to_base64(item) for item in value]
    return value


def _as_proto(line: str) -> TracesData:
    return json_format.ParseDict(_hex_ids_to_base64(json.loads(line)), TracesData())


def test_line_matches_the_sdk_protobuf_encoding() -> None:
    spans = _sample_spans()
    ours = _as_proto(otlp_json.encode_spans_line(spans))
    reference = TracesData(resource_spans=encode_spans(spans).resource_spans)
    for resource_spans in reference.resource_spans:
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                span.ClearField("flags")  # W3C flags: optional, not written by our encoder
                for link in span.links:
                    link.ClearField("flags")
    # NaN != NaN in protobuf comparison too; compare everything else exactly.
    for data in (ours, reference):
        for attribute in data.resource_spans[0].scope_spans[0].spans[1].attributes:
            if attribute.key == "nan":
                attribute.value.double_value = 0.0
    assert ours == reference


def test_ids_are_lowercase_hex_and_integers_are_strings() -> None:
    spans = _sample_spans()
    raw = json.loads(otlp_json.encode_spans_line(spans))
    encoded = raw["resourceSpans"][0]["scopeSpans"][0]["spans"]
    execute = next(span for span in encoded if span["name"] == "task.execute")
    assert len(execute["traceId"]) == 32 and int(execute["traceId"], 16)
    assert len(execute["spanId"]) == 16 and execute["spanId"] == execute["spanId"].lower()
    assert execute["parentSpanId"] == format(spans[1].context.span_id, "016x")
    assert isinstance(execute["startTimeUnixNano"], str)
    assert execute["status"] == {"code": 2, "message": "ValueError: boom"}
    assert execute["kind"] == 1


def test_round_trip_through_readable_spans() -> None:
    spans = _sample_spans()
    line = otlp_json.encode_spans_line(spans)
    back = otlp_json.to_readable_spans(json.loads(line)["resourceSpans"])
    assert [span.name for span in back] == [span.name for span in spans]
    for original, decoded in zip(spans, back, strict=True):
        assert decoded.context.trace_id == original.context.trace_id
        assert decoded.context.span_id == original.context.span_id
        assert (decoded.parent.span_id if decoded.parent else None) == (
            original.parent.span_id if original.parent else None)
        assert decoded.kind == original.kind
        assert decoded.start_time == original.start_time
        assert decoded.end_time == original.end_time
        assert decoded.status.status_code == original.status.status_code
        assert decoded.resource.attributes == original.resource.attributes
        assert [e.name for e in decoded.events] == [e.name for e in original.events]
    submit = back[1]
    assert submit.attributes["l"] == ("a", "b") and submit.attributes["n"] == (1, 2)
    assert submit.attributes["i"] == 3 and submit.attributes["b"] is False
    assert back[0].links[0].context.span_id == spans[1].context.span_id


def _write_lines(path: Path, spans: list[ReadableSpan]) -> None:
    encoder = otlp_json.SpanLineEncoder()
    path.write_text("".join(encoder.encode(span) + "\n" for span in spans))


def test_truncated_last_line_is_skipped_with_a_warning(tmp_path: Path) -> None:
    spans = _sample_spans()
    path = tmp_path / "worker-1.jsonl"
    _write_lines(path, spans)
    whole = otlp_json.SpanLineEncoder().encode(spans[0])
    with open(path, "a") as handle:
        handle.write(whole[: len(whole) // 2])  # a writer killed mid-line
    warnings: list[str] = []
    objects = list(otlp_json.iter_trace_file(path, warnings))
    assert len(objects) == 2
    assert len(warnings) == 1 and "truncated" in warnings[0]


def test_corrupt_middle_line_is_skipped_and_later_lines_kept(tmp_path: Path) -> None:
    spans = _sample_spans()
    encoder = otlp_json.SpanLineEncoder()
    path = tmp_path / "raylet-2.jsonl"
    path.write_text(encoder.encode(spans[0]) + "\n{not json\n[1]\n" + encoder.encode(spans[1])
                    + "\n")
    resource_spans, warnings = otlp_json.read_trace_dir(tmp_path)
    assert [s.name for s in otlp_json.to_readable_spans(resource_spans)] == [
        "task.execute", "task.submit"]
    assert len(warnings) == 2


def test_offsets_read_only_what_was_appended(tmp_path: Path) -> None:
    spans = _sample_spans()
    encoder = otlp_json.SpanLineEncoder()
    path = tmp_path / "driver-3.jsonl"
    path.write_text(encoder.encode(spans[0]) + "\n")
    offsets = otlp_json.end_offsets(tmp_path)
    assert offsets == {"driver-3.jsonl": path.stat().st_size}
    with open(path, "a") as handle:
        handle.write(encoder.encode(spans[1]) + "\n")
    resource_spans, warnings = otlp_json.read_trace_dir(tmp_path, offsets)
    assert [s.name for s in otlp_json.to_readable_spans(resource_spans)] == ["task.submit"]
    assert warnings == []


def test_array_fast_path_matches_the_generic_encoding() -> None:
    values = [(), ("a", "é\""), (1, -2), (0.5, float("nan"), float("inf")), (True, False),
              [b"\x00x"], ("a", 1, 2.5)]
    for value in values:
        fast = otlp_json._value_json(value)
        assert json.loads(fast) == json.loads(otlp_json._dumps(otlp_json.encode_value(value)))
        assert fast.startswith('{"arrayValue":{"values":[')


def test_record_span_json_writes_what_the_span_object_encoder_writes() -> None:
    """The converter's encoder (fields) and the SDK span encoder must agree byte for byte."""
    spans = _sample_spans()
    for span in spans:
        context = span.context
        assert context is not None
        fields = otlp_json.record_span_json(
            context.trace_id, context.span_id, span.parent.span_id if span.parent else 0,
            span.name, span.kind.value, span.start_time or 0, span.end_time or 0,
            span.attributes, span.status.status_code.value, span.status.description,
            [(event.name, event.timestamp, event.attributes) for event in span.events],
            context.trace_state.to_header() if context.trace_state else "", span.links)
        assert fields == otlp_json.span_object_json(span)


def test_remembered_attribute_values_never_stand_in_for_equal_values_of_another_type(
) -> None:
    # True == 1 == 1.0 and they hash alike: a cache keyed by value alone would mix them.
    for _ in range(2):  # the second time, the first time's texts are remembered
        for value in (1, True, 1.0, "1", 0, False, 0.0, "0"):
            attributes = {"same.key": value}
            assert otlp_json._attributes_json(attributes) == otlp_json._dumps(
                otlp_json.encode_attributes(attributes))


def test_attribute_caches_stay_bounded_and_exact() -> None:
    for number in range(otlp_json.ITEM_CACHE_VALUES * 2 + 3):  # one key, ids that never repeat
        attributes = {"an.id": f"id-{number}", "a.count": number}
        assert otlp_json._attributes_json(attributes) == otlp_json._dumps(
            otlp_json.encode_attributes(attributes))
    for number in range(otlp_json.ITEM_CACHE_KEYS + 5):  # more keys than are remembered
        attributes = {f"key.{number}": "v"}
        assert otlp_json._attributes_json(attributes) == otlp_json._dumps(
            otlp_json.encode_attributes(attributes))
    assert len(otlp_json._items) <= otlp_json.ITEM_CACHE_KEYS
    assert all(len(known) <= otlp_json.ITEM_CACHE_VALUES
               for known in otlp_json._items.values())


def test_lines_repeated_by_a_killed_converter_are_read_back_once(tmp_path: Path) -> None:
    """A converter killed between appending lines and recording its progress leaves
    those lines twice; every reader returns each span once."""
    from tracedray.cli.tracestore.model import parse_resource_spans

    spans = _sample_spans()
    encoder = otlp_json.SpanLineEncoder()
    lines = [encoder.encode(span) for span in spans]
    (tmp_path / "worker-4.jsonl").write_text("\n".join([*lines, *lines]) + "\n")
    resource_spans, warnings = otlp_json.read_trace_dir(tmp_path)
    assert warnings == []
    readable = otlp_json.to_readable_spans(resource_spans)
    assert sorted(s.name for s in readable) == sorted(s.name for s in spans)
    records, problems = parse_resource_spans(resource_spans)
    assert problems == [] and len(records) == len(spans)
