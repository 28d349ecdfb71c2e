"""PACKED spool records: a shaped span as one struct, pointing at its shape's SHAPE record.

Each test checks what a reader finally sees (the OTLP JSON lines) against the JSON of
the same span recorded the plain way, so a packed record that lost or changed
anything fails here.
"""

from __future__ import annotations

import json
import os
import struct
from dataclasses import dataclass
from pathlib import Path

import pytest
from fork_support import run_in_forked_child

from tracedray.core import ids
from tracedray.telemetry import instruments, otlp_json
from tracedray.telemetry import spool_format as fmt
from tracedray.telemetry.span_shape import SpanShape
from tracedray.telemetry.spool_convert import convert_spool, jsonl_path
from tracedray.telemetry.spool_writer import SpoolWriter

PREFIX = '{"resourceSpans":[{"resource":{"attributes":[]},"scopeSpans":[{"scope":{},"spans":['
TRACE = 0x0123456789ABCDEF_FEDCBA9876543210  # both halves matter
OBJECT = bytes(range(1, ids.OBJECT_ID_BYTES + 1))
BOTH_MODES = pytest.mark.parametrize("mapped", [True, False], ids=["mapped", "pwrite"])


def _get_shape() -> SpanShape:
    return SpanShape("object.get", ("tracedray.object.count", "tracedray.object.id",
                                    "tracedray.object.size"),
                     {"tracedray.node.id": "n1"}, packing="q" + instruments.OBJECT_ID_PACKING + "q")


def _record(writer: SpoolWriter, shape: SpanShape, number: int, values: tuple[object, ...],
            trace_state: str = "") -> None:
    writer.append_shaped(shape, TRACE, number, 7, 1_000 + number, 50, values, trace_state)


def _expected(shape: SpanShape, number: int, values: tuple[object, ...],
              trace_state: str = "") -> str:
    """The span as record_span_json writes it from an attribute dict."""
    return otlp_json.record_span_json(TRACE, number, 7, shape.name, shape.kind.value,
                                      1_000 + number, 1_050 + number, shape.attributes(values),
                                      0, None, (), trace_state)


def _spans(spool: Path) -> list[str]:
    """The span objects of a converted spool's JSON lines, as JSON text."""
    return [json.dumps(span, separators=(",", ":"))
            for line in jsonl_path(spool).read_text().splitlines()
            for span in json.loads(line)["resourceSpans"][0]["scopeSpans"][0]["spans"]]


def _normal(span_json: str) -> str:
    return json.dumps(json.loads(span_json), separators=(",", ":"))


def _payloads(spool: Path) -> list[memoryview]:
    """The payload of every record of a spool, in order (the PREFIX first)."""
    data = spool.read_bytes()
    return [payload for _, payload in fmt.scan_records(data[fmt.HEADER_BYTES:],
                                                        fmt.HEADER_BYTES).payloads]


def _payload_sizes(spool: Path) -> list[int]:
    """The payload length of every record of a spool, in order (the PREFIX first)."""
    data = spool.read_bytes()
    return [len(payload) for _, payload in fmt.scan_records(data[fmt.HEADER_BYTES:],
                                                             fmt.HEADER_BYTES).payloads]


@BOTH_MODES
def test_packed_spans_read_back_as_the_plain_record_of_the_same_span(tmp_path: Path,
                                                                     mapped: bool) -> None:
    spool = tmp_path / "driver-1.spool"
    writer = SpoolWriter(spool, PREFIX, mapped=mapped)
    shape = _get_shape()
    spans = [(1, (1, OBJECT, 100)), (2, (3, OBJECT[:4], 0)), (3, (0, b"", (1 << 63) - 1))]
    for number, values in spans:
        _record(writer, shape, number, values)
    assert shape.packer is not None
    # One SHAPE record, then one fixed-size PACKED record per span.
    assert writer.statistics().shapes == 1
    assert _payload_sizes(spool)[2:] == [shape.packer.size] * 3
    writer.close()
    result = convert_spool(spool)
    assert result.spans == 3 and not result.warnings
    assert _spans(spool) == [_normal(_expected(shape, n, v)) for n, v in spans]
    # An id goes in as bytes and comes out as the hex an ObjectRef shows.
    assert json.loads(_spans(spool)[0])["attributes"][1] == {
        "key": "tracedray.object.id", "value": {"stringValue": OBJECT.hex()}}


def test_a_conversion_that_starts_after_the_shape_record_reads_it_there(tmp_path: Path) -> None:
    spool = tmp_path / "worker-2.spool"
    writer = SpoolWriter(spool, PREFIX)
    shape = _get_shape()
    _record(writer, shape, 1, (1, OBJECT, 10))
    assert convert_spool(spool).spans == 1  # moves `converted` past the SHAPE record
    _record(writer, shape, 2, (2, OBJECT, 20))
    result = convert_spool(spool)
    assert result.spans == 1 and not result.warnings
    assert _spans(spool)[1] == _normal(_expected(shape, 2, (2, OBJECT, 20)))
    writer.close()


@BOTH_MODES
def test_values_the_packing_does_not_take_fall_back_to_a_shaped_record(tmp_path: Path,
                                                                       mapped: bool) -> None:
    spool = tmp_path / "driver-3.spool"
    writer = SpoolWriter(spool, PREFIX, mapped=mapped)
    shape = _get_shape()
    odd = [(1, (1, OBJECT, 1 << 64)),  # the last value fails after the others went in
           (2, (1, OBJECT.hex(), 5)),  # a str where an id goes
           (3, (None, OBJECT, 5))]
    for number, values in odd:
        _record(writer, shape, number, values)
    _record(writer, shape, 4, (1, OBJECT, 6))  # and the next one packs again
    _record(writer, shape, 5, (1, OBJECT, 7), trace_state="k=v")  # no tracestate in PACKED
    sizes = _payload_sizes(spool)
    assert shape.packer is not None and sizes.count(shape.packer.size) == 1
    writer.close()
    result = convert_spool(spool)
    assert result.spans == 5 and not result.warnings
    assert _spans(spool) == [
        _normal(_expected(shape, n, v)) for n, v in [*odd, (4, (1, OBJECT, 6))]] + [
        _normal(_expected(shape, 5, (1, OBJECT, 7), "k=v"))]


def test_a_failed_pack_leaves_no_bytes_past_the_records(tmp_path: Path) -> None:
    """pack_into writes the fields before the one that fails: they must not outlive it,
    or a shorter record there later leaves a stray length word past its end."""
    spool = tmp_path / "driver-4.spool"
    writer = SpoolWriter(spool, PREFIX)
    shape = _get_shape()
    _record(writer, shape, 1, (1, OBJECT, 1))
    end = fmt.HEADER_BYTES + writer.statistics().bytes
    before = spool.read_bytes()
    writer.append_shaped(shape, TRACE, 2, 7, 0, 0, (1, OBJECT, 1 << 64), "")
    after_fallback = fmt.HEADER_BYTES + writer.statistics().bytes
    data = spool.read_bytes()
    assert data[:end] == before[:end]
    assert data[after_fallback:after_fallback + 256] == bytes(256)
    writer.close()


def test_a_forked_child_writes_its_own_shape_record(tmp_path: Path) -> None:
    spool = tmp_path / "driver-5.spool"
    writer = SpoolWriter(spool, PREFIX)
    shape = _get_shape()
    _record(writer, shape, 1, (1, OBJECT, 1))
    pid = run_in_forked_child(lambda: (_record(writer, shape, 2, (2, OBJECT, 2)),
                                       writer.close()))
    writer.close()
    child = tmp_path / f"driver-5.fork-{pid}.spool"
    assert not convert_spool(child).warnings
    assert _spans(child) == [_normal(_expected(shape, 2, (2, OBJECT, 2)))]
    convert_spool(spool)
    assert _spans(spool) == [_normal(_expected(shape, 1, (1, OBJECT, 1)))]


def test_a_packed_record_naming_no_shape_record_is_skipped_with_a_warning(
        tmp_path: Path) -> None:
    spool = tmp_path / "driver-6.spool"
    writer = SpoolWriter(spool, PREFIX)
    shape = _get_shape()
    assert shape.packer is not None
    stray = bytearray(shape.packer.pack(fmt.PACKED_MARK, fmt.HEADER_BYTES + 8, 0, 1, 2, 0, 0, 0,
                                        1, OBJECT, 1))
    writer.append(bytes(stray))  # points into the PREFIX record: no SHAPE there
    _record(writer, shape, 3, (1, OBJECT, 3))
    writer.close()
    result = convert_spool(spool)
    assert result.spans == 1 and len(result.warnings) == 1
    assert "corrupt record" in result.warnings[0]
    assert _spans(spool) == [_normal(_expected(shape, 3, (1, OBJECT, 3)))]


def test_a_closed_spool_records_nothing_and_counts_no_error(tmp_path: Path) -> None:
    writer = SpoolWriter(tmp_path / "driver-7.spool", PREFIX)
    writer.close()
    _record(writer, _get_shape(), 1, (1, OBJECT, 1))
    _record(writer, SpanShape("plain", ("n",)), 2, (1,))
    assert writer.statistics().write_errors == 0


def test_packings_must_describe_the_values() -> None:
    with pytest.raises(ValueError, match="does not describe"):
        SpanShape("a", ("x", "y"), packing="q")
    with pytest.raises(ValueError, match="does not describe"):
        SpanShape("a", ("x",), packing="d")  # only ints and ids
    with pytest.raises(ValueError, match="does not describe"):
        SpanShape("a", ("x",), packing="300p")  # a length byte holds 255 at most
    assert SpanShape("a", ("x",)).packer is None
    # A constant marshal cannot carry: no blob, so nothing to point a PACKED record at.
    assert SpanShape("a", ("x",), {"c": object()}, packing="q").packer is None  # type: ignore[dict-item]


def test_the_id_packings_hold_whole_ids() -> None:
    for packing, length in [(instruments.TASK_ID_PACKING, ids.TASK_ID_BYTES),
                            (instruments.OBJECT_ID_PACKING, ids.OBJECT_ID_BYTES)]:
        whole = os.urandom(length)
        assert struct.unpack("<" + packing, struct.pack("<" + packing, whole)) == (whole,)


def test_shape_attributes_show_ids_as_hex() -> None:
    shape = _get_shape()
    assert shape.attributes((2, OBJECT, 9)) == {
        "tracedray.object.count": 2, "tracedray.object.id": OBJECT.hex(),
        "tracedray.object.size": 9, "tracedray.node.id": "n1"}


@pytest.mark.parametrize("arity", [1, 2, 3, 4])
def test_every_number_of_values_packs(tmp_path: Path, arity: int) -> None:
    """The writer passes one, two and three values by hand and more as ``*values``."""
    keys = [f"k{n}" for n in range(arity)]
    shape = SpanShape("s", keys, packing=instruments.TASK_ID_PACKING + "q" * (arity - 1))
    values = (OBJECT[:ids.TASK_ID_BYTES], *range(10, 10 + arity - 1))
    spool = tmp_path / "driver-8.spool"
    writer = SpoolWriter(spool, PREFIX)
    _record(writer, shape, 1, values)
    assert shape.packer is not None and _payload_sizes(spool)[2:] == [shape.packer.size]
    writer.close()
    assert not convert_spool(spool).warnings
    assert _spans(spool) == [_normal(_expected(shape, 1, values))]


def _odd_shape() -> SpanShape:
    """Text a %-template or a JSON string could trip on: a "%" (a template's own
    mark), quotes, a backslash and non-ASCII, in the name, a key and a constant."""
    return SpanShape('odd %s "name" ü', ("tracedray.task.id", "n%d", "count"),
                     {"tracedray.note": '100% "sure" \\ é', "k%": 3, "flag": True},
                     packing=instruments.TASK_ID_PACKING + "qq")


@pytest.mark.parametrize("parent", [7, 0], ids=["child", "root"])
def test_a_packed_span_is_the_shaped_span_s_json_byte_for_byte(tmp_path: Path,
                                                               parent: int) -> None:
    """The converter renders a PACKED record from one template per shape: its text must
    be exactly what shaped_span_json writes for the SHAPED record it stands for."""
    spool = tmp_path / "driver-9.spool"
    writer = SpoolWriter(spool, PREFIX)
    cases = [(_odd_shape(), (OBJECT[:ids.TASK_ID_BYTES], -5, (1 << 63) - 1)),
             (_odd_shape(), (b"", 0, 1)),
             (SpanShape("bare", (), packing=""), ()),  # no attributes at all
             (_get_shape(), (2, OBJECT, 0)),
             # The hot shapes' arities: an id (task.submit), an id and an int (dispatch,
             # execute), read by position; an int first goes the general way.
             (SpanShape("one %d", ("id",), {"c%": "50%"}, packing=instruments.TASK_ID_PACKING),
              (OBJECT[:ids.TASK_ID_BYTES],)),
             (SpanShape("two", ("id", "n"), packing=instruments.TASK_ID_PACKING + "q"),
              (b"\x00\x01", -(1 << 63))),
             (SpanShape("int id", ("n", "id"), packing="q" + instruments.TASK_ID_PACKING),
              (7, b"\xff"))]
    for number, (shape, values) in enumerate(cases, 1):
        writer.append_shaped(shape, TRACE, number, parent, 10**18 + number, 99, values, "")
        assert shape.packer is not None and shape.blob is not None
    assert [bytes(p[:1]) for p in _payloads(spool)].count(b"P") == len(cases)
    writer.close()
    result = convert_spool(spool)
    assert result.spans == len(cases) and not result.warnings
    line = jsonl_path(spool).read_text(encoding="utf-8")
    expected = [otlp_json.shaped_span_json(shape.blob, TRACE, number, parent,  # type: ignore[arg-type]
                                           10**18 + number, 99, values)
                for number, (shape, values) in enumerate(cases, 1)]
    assert line == otlp_json.span_line(PREFIX, ",".join(expected)) + "\n"


def test_a_shape_record_whose_packing_does_not_fit_its_shape_is_skipped(
        tmp_path: Path) -> None:
    spool = tmp_path / "driver-10.spool"
    shape, writer = _get_shape(), SpoolWriter(spool, PREFIX)
    assert shape.blob is not None
    for blob in (shape.blob, b"not a shape"):  # three keys for one value; no shape at all
        writer.append(fmt.shape_payload(blob, "q"))
    _record(writer, shape, 1, (1, OBJECT, 1))
    writer.close()
    result = convert_spool(spool)
    assert result.spans == 1 and len(result.warnings) == 2
    assert all("SHAPE record" in warning for warning in result.warnings)
    assert _spans(spool) == [_normal(_expected(shape, 1, (1, OBJECT, 1)))]


def test_many_lines_of_one_conversion_are_one_write_of_whole_lines(tmp_path: Path) -> None:
    from tracedray.telemetry.spool_convert import SPANS_PER_LINE

    spool = tmp_path / "driver-11.spool"
    writer = SpoolWriter(spool, PREFIX)
    shape = _get_shape()
    count = 2 * SPANS_PER_LINE + 3
    for number in range(1, count + 1):
        _record(writer, shape, number, (number, OBJECT, number))
    writer.close()
    assert convert_spool(spool).spans == count
    text = jsonl_path(spool).read_text()
    assert text.endswith("\n") and text.count("\n") == 3
    assert [len(json.loads(line)["resourceSpans"][0]["scopeSpans"][0]["spans"])
            for line in text.splitlines()] == [SPANS_PER_LINE, SPANS_PER_LINE, 3]
    assert _spans(spool) == [_normal(_expected(shape, n, (n, OBJECT, n)))
                             for n in range(1, count + 1)]


def test_dispatch_spans_ending_together_are_packed_records_in_their_order(
        tmp_path: Path) -> None:
    """A batch of results ends its dispatch spans at once: each is a PACKED record, in
    the order given, and reads back as the plain record of the same span."""
    from tracedray import telemetry

    telemetry.configure("driver", session_dir=tmp_path)
    try:
        shape = instruments.dispatch_shape({"tracedray.node.id": "n1",
                                            "tracedray.worker.pid": 42})
        submit = instruments.task_submitted(os.urandom(ids.TASK_ID_BYTES), "f", "normal",
                                            "here", b"\x01\0\0\0", 0)
        assert isinstance(submit, telemetry.PendingSpan)
        tasks = [os.urandom(ids.TASK_ID_BYTES) for _ in range(5)]
        spans = [instruments.task_dispatched(shape, task, attempt, parent=submit)
                 for attempt, task in enumerate(tasks)]
        assert all(isinstance(span, telemetry.PendingSpan) for span in spans)
        spool = tmp_path / "traces" / f"driver-{os.getpid()}.spool"
        before = len(_payloads(spool))
        telemetry.finish_spans(spans)  # type: ignore[arg-type]
        added = _payloads(spool)[before:]
        assert shape.packer is not None
        # The shape's SHAPE record (its first span anywhere), then a PACKED record each.
        assert fmt.decode_payload(added[0])[0] == fmt.SHAPE
        assert [bytes(p[:1]) for p in added[1:]] == [b"P"] * 5
        assert [len(p) for p in added[1:]] == [shape.packer.size] * 5
    finally:
        telemetry.shutdown()
    jsonl = [path for path in (tmp_path / "traces").iterdir() if path.suffix == ".jsonl"]
    found = [span for line in jsonl[0].read_text().splitlines()
             for span in json.loads(line)["resourceSpans"][0]["scopeSpans"][0]["spans"]
             if span["name"] == "task.dispatch"]
    submit_ids = submit.ids
    assert [(span["attributes"][0]["value"]["stringValue"],
             span["attributes"][1]["value"]["intValue"]) for span in found] == [
        (task.hex(), str(attempt)) for attempt, task in enumerate(tasks)]
    for span in found:
        start, end = int(span["startTimeUnixNano"]), int(span["endTimeUnixNano"])
        text = json.dumps(span, separators=(",", ":"))
        assert text == _normal(otlp_json.record_span_json(
            submit_ids[0], int(span["spanId"], 16), submit_ids[1], "task.dispatch", 0, start,
            end, shape.attributes((bytes.fromhex(span["attributes"][0]["value"]["stringValue"]),
                                   int(span["attributes"][1]["value"]["intValue"])))))


@dataclass
class _Ended:
    """What append_packed_batch reads of a PendingSpan."""

    shape: SpanShape
    ids: tuple[int, int, int, str]
    start_ns: int
    values: tuple[object, ...]


@BOTH_MODES
def test_a_packed_batch_is_the_records_of_its_spans_in_order(tmp_path: Path,
                                                             mapped: bool) -> None:
    """Under one lock when the window has room; a value the packing does not take
    (here the third span's) and every span after it go one by one, as SHAPED or PACKED
    records; a batch longer than the window's room goes one by one too."""
    spool = tmp_path / "driver-12.spool"
    writer = SpoolWriter(spool, PREFIX, mapped=mapped)
    shape, other = _get_shape(), _odd_shape()
    task = OBJECT[:ids.TASK_ID_BYTES]
    spans = [(shape, (1, OBJECT, 1)), (other, (task, 2, 3)), (shape, (1, OBJECT, 1 << 64)),
             (shape, (4, OBJECT, 4))]
    many = [(shape, (n, OBJECT, n)) for n in range(10, 4000)]  # ~400 KiB: past the window
    for batch, first in ((spans, 1), (many, 100)):
        writer.append_packed_batch([_Ended(s, (TRACE, first + n, 7, ""), 1_000 + first + n, v)
                                    for n, (s, v) in enumerate(batch)], 10_000)
    assert writer.statistics().write_errors == 0
    sizes = _payload_sizes(spool)
    assert shape.packer is not None and other.packer is not None
    assert sizes.count(shape.packer.size) == 2 + len(many) and other.packer.size in sizes
    writer.close()
    result = convert_spool(spool)
    assert result.spans == len(spans) + len(many) and not result.warnings

    def ended_at_10_000(shape: SpanShape, number: int, values: tuple[object, ...]) -> str:
        return _normal(otlp_json.record_span_json(
            TRACE, number, 7, shape.name, shape.kind.value, 1_000 + number, 10_000,
            shape.attributes(values), 0, None, (), ""))

    expected = [ended_at_10_000(s, 1 + n, v) for n, (s, v) in enumerate(spans)]
    expected += [ended_at_10_000(s, 100 + n, v) for n, (s, v) in enumerate(many)]
    assert _spans(spool) == expected


def test_a_closed_spool_records_no_batch(tmp_path: Path) -> None:
    writer = SpoolWriter(tmp_path / "driver-13.spool", PREFIX)
    writer.close()
    writer.append_packed_batch([_Ended(_get_shape(), (TRACE, 1, 7, ""), 0, (1, OBJECT, 1))], 0)
    assert writer.statistics().write_errors == 0
