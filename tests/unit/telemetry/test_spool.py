"""The span spool: records written on the hot path, converted to OTLP JSON lines later."""

from __future__ import annotations

import fcntl
import json
import os
import threading
from pathlib import Path

import pytest
from fork_support import run_in_forked_child

from tracedray.telemetry import append_file, otlp_json, spool_convert
from tracedray.telemetry import spool_format as fmt
from tracedray.telemetry.spool_convert import convert_spool, jsonl_path, sync_traces_dir
from tracedray.telemetry.spool_writer import SpoolWriter

PREFIX = '{"resourceSpans":[{"resource":{"attributes":[]},"scopeSpans":[{"scope":{},"spans":['


def _span(number: int, **attributes: object) -> bytes:
    return fmt.span_payload(0xABC, number, 0, f"span-{number}", 0, 1_000 + number,
                            2_000 + number, {"n": number, **attributes})


def _names(path: Path) -> list[str]:
    """Span names in a JSON lines file, in file order."""
    if not path.exists():
        return []
    return [span["name"] for line in path.read_text().splitlines()
            for entry in json.loads(line)["resourceSpans"]
            for scope in entry["scopeSpans"] for span in scope["spans"]]


def test_records_become_the_lines_the_json_encoder_writes(tmp_path: Path) -> None:
    spool = tmp_path / "worker-7.spool"
    writer = SpoolWriter(spool, PREFIX)
    writer.append(_span(1, flag=True, ratio=0.5, tags=("a", "b")))
    writer.append(fmt.line_payload('{"traceId":"00","spanId":"01","name":"encoded"}'))
    result = convert_spool(spool)
    assert result.spans == 2 and not result.deleted and not result.warnings
    first = otlp_json.record_span_json(0xABC, 1, 0, "span-1", 0, 1_001, 2_001, {
        "n": 1, "flag": True, "ratio": 0.5, "tags": ("a", "b")})
    second = '{"traceId":"00","spanId":"01","name":"encoded"}'
    # One line per conversion: the spans it found, under one resource.
    assert jsonl_path(spool).read_text() == otlp_json.span_line(PREFIX, f"{first},{second}") + "\n"
    writer.close()


def test_a_line_holds_at_most_spans_per_line(tmp_path: Path) -> None:
    spool = tmp_path / "worker-12.spool"
    writer = SpoolWriter(spool, PREFIX)
    count = spool_convert.SPANS_PER_LINE + 5
    for number in range(count):
        writer.append(_span(number))
    writer.close()
    convert_spool(spool)
    lines = jsonl_path(spool).read_text().splitlines()
    assert [len(json.loads(line)["resourceSpans"][0]["scopeSpans"][0]["spans"])
            for line in lines] == [spool_convert.SPANS_PER_LINE, 5]
    assert _names(jsonl_path(spool)) == [f"span-{n}" for n in range(count)]


def test_each_record_is_converted_once_and_a_closed_spool_goes_away(tmp_path: Path) -> None:
    spool = tmp_path / "driver-1.spool"
    writer = SpoolWriter(spool, PREFIX)
    writer.append(_span(1))
    assert convert_spool(spool).spans == 1
    assert convert_spool(spool).spans == 0  # nothing new: no line written twice
    writer.append(_span(2))
    writer.append(_span(3))
    assert convert_spool(spool).spans == 2
    assert spool.exists()  # the writer is alive: more may come
    writer.append(_span(4))
    writer.close()
    stats = writer.statistics()
    assert stats.records == 5 and stats.bytes == spool.stat().st_size - fmt.HEADER_BYTES
    result = convert_spool(spool)
    assert result.spans == 1 and result.deleted and not spool.exists()
    assert _names(jsonl_path(spool)) == ["span-1", "span-2", "span-3", "span-4"]


def test_a_record_whose_length_is_not_written_yet_is_not_converted(tmp_path: Path) -> None:
    """The writer copies the payload first and its length last: a killed writer (or
    one caught in between) leaves bytes a reader must not take for a record."""
    spool = tmp_path / "worker-2.spool"
    writer = SpoolWriter(spool, PREFIX, mapped=False)
    writer.append(_span(1))
    end = writer.statistics().bytes + fmt.HEADER_BYTES
    writer.close()
    payload = _span(2)
    with open(spool, "r+b") as handle:  # the payload of a second record, uncommitted
        handle.seek(end + fmt.LENGTH.size)
        handle.write(payload)
        handle.seek(fmt.CLOSED_AT)
        handle.write(fmt.U64.pack(0))  # as if its writer were still running
    assert convert_spool(spool).spans == 1
    with open(spool, "r+b") as handle:  # now commit it
        handle.seek(end)
        handle.write(fmt.LENGTH.pack(len(payload)))
    assert convert_spool(spool).spans == 1
    assert _names(jsonl_path(spool)) == ["span-1", "span-2"]


def test_a_busy_lock_is_skipped_without_waiting_and_nothing_is_lost(tmp_path: Path) -> None:
    spool = tmp_path / "raylet-3.spool"
    writer = SpoolWriter(spool, PREFIX)
    writer.append(_span(1))
    holder = os.open(spool, os.O_RDWR)
    try:
        fcntl.flock(holder, fcntl.LOCK_EX)  # another converter at work
        result = convert_spool(spool, blocking=False)
        assert result.skipped and result.spans == 0
        assert not jsonl_path(spool).exists()
    finally:
        os.close(holder)
    assert convert_spool(spool, blocking=False).spans == 1
    writer.close()


def test_a_round_budget_leaves_the_rest_for_the_next_round(tmp_path: Path) -> None:
    spool = tmp_path / "worker-4.spool"
    writer = SpoolWriter(spool, PREFIX)
    for number in range(50):
        writer.append(_span(number))
    first = convert_spool(spool, max_bytes=500)
    assert first.pending and 0 < first.spans < 50
    assert sync_traces_dir(tmp_path).spans == 50 - first.spans  # sync drains it
    assert _names(jsonl_path(spool)) == [f"span-{n}" for n in range(50)]
    writer.close()


def test_records_larger_than_a_read_block_and_many_windows(tmp_path: Path) -> None:
    spool = tmp_path / "worker-5.spool"
    writer = SpoolWriter(spool, PREFIX)
    big = "x" * (spool_convert.READ_BLOCK + 123)
    writer.append(_span(0, blob=big))
    for number in range(1, 3000):  # several remaps of the mapped window
        writer.append(_span(number))
    assert writer.statistics().remaps > 0
    writer.close()
    assert convert_spool(spool).deleted
    names = _names(jsonl_path(spool))
    assert names == [f"span-{n}" for n in range(3000)]
    assert big in jsonl_path(spool).read_text().splitlines()[0]


def test_values_marshal_cannot_carry_are_encoded_on_the_spot(tmp_path: Path) -> None:
    class Odd:
        def __str__(self) -> str:
            return "odd-value"

    payload = fmt.span_payload(1, 2, 0, "odd", 0, 1, 2, {"value": Odd()})
    assert fmt.decode_payload(payload)[0] == fmt.LINE
    spool = tmp_path / "driver-6.spool"
    writer = SpoolWriter(spool, PREFIX)
    writer.append(payload)
    writer.close()
    convert_spool(spool)
    assert '"stringValue":"odd-value"' in jsonl_path(spool).read_text()


def test_threads_never_mix_records(tmp_path: Path) -> None:
    spool = tmp_path / "worker-8.spool"
    writer = SpoolWriter(spool, PREFIX)

    def write(base: int) -> None:
        for number in range(base, base + 500):
            writer.append(_span(number, padding="p" * (number % 300)))

    threads = [threading.Thread(target=write, args=(base,)) for base in (0, 1000, 2000, 3000)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    writer.close()
    result = convert_spool(spool)
    assert not result.warnings
    assert sorted(_names(jsonl_path(spool))) == sorted(
        f"span-{base + n}" for base in (0, 1000, 2000, 3000) for n in range(500))


def test_a_spool_left_by_an_earlier_process_with_the_same_pid_is_kept(tmp_path: Path) -> None:
    spool = tmp_path / "worker-9.spool"
    old = SpoolWriter(spool, PREFIX)
    old.append(_span(1))  # its writer "was killed": never closed, never converted
    again = SpoolWriter(spool, PREFIX.replace("[]", '[{"key":"k","value":{"intValue":"2"}}]'))
    again.append(_span(2))
    again.close()
    convert_spool(spool)
    lines = jsonl_path(spool).read_text().splitlines()
    assert _names(jsonl_path(spool)) == ["span-1", "span-2"]
    assert '"intValue":"2"' not in lines[0] and '"intValue":"2"' in lines[1]


def test_a_forked_child_spools_beside_the_parent(tmp_path: Path) -> None:
    spool = tmp_path / "driver-10.spool"
    writer = SpoolWriter(spool, PREFIX)
    writer.append(_span(1))
    pid = run_in_forked_child(lambda: (writer.append(_span(2)), writer.close()))
    writer.append(_span(3))
    writer.close()
    sync_traces_dir(tmp_path)
    assert _names(jsonl_path(spool)) == ["span-1", "span-3"]
    assert _names(tmp_path / f"driver-10.fork-{pid}.jsonl") == ["span-2"]


def test_a_full_disk_at_remap_falls_back_to_writes(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    spool = tmp_path / "worker-11.spool"
    writer = SpoolWriter(spool, PREFIX)

    def no_space(fd: int, offset: int, length: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(append_file.os, "posix_fallocate", no_space)
    count = append_file.FIRST_CHUNK_BYTES // 40  # ~80 bytes each: past the first window
    for number in range(count):
        writer.append(_span(number))
    stats = writer.statistics()
    assert not stats.mapped and "No space left" in stats.fallback_reason
    writer.close()
    convert_spool(spool)
    assert _names(jsonl_path(spool)) == [f"span-{n}" for n in range(count)]


def test_foreign_files_are_left_alone(tmp_path: Path) -> None:
    stray = tmp_path / "notes.spool"
    stray.write_bytes(b"not a spool at all, but long enough to have a header" * 3)
    result = convert_spool(stray)
    assert result.spans == 0 and "not a span spool" in result.warnings[0]
    assert stray.exists() and not jsonl_path(stray).exists()


def test_a_resource_larger_than_a_read_block_is_read_whole(tmp_path: Path) -> None:
    huge = PREFIX.replace("[]", '[{"key":"k","value":{"stringValue":"' + "v" * (
        spool_convert.READ_BLOCK + 10) + '"}}]')
    spool = tmp_path / "driver-13.spool"
    writer = SpoolWriter(spool, huge)
    writer.append(_span(1))
    writer.close()
    assert convert_spool(spool).spans == 1
    assert _names(jsonl_path(spool)) == ["span-1"]


def test_a_resource_larger_than_the_first_read_costs_one_more_read_of_it_alone(
        tmp_path: Path) -> None:
    large = PREFIX.replace("[]", '[{"key":"k","value":{"stringValue":"' + "v" * (
        spool_convert.HEAD_READ * 3) + '"}}]')
    spool = tmp_path / "driver-15.spool"
    writer = SpoolWriter(spool, large)
    for number in range(3):
        writer.append(_span(number))
    assert convert_spool(spool).spans == 3
    writer.append(_span(3))
    assert convert_spool(spool).spans == 1
    writer.close()
    assert _names(jsonl_path(spool)) == ["span-0", "span-1", "span-2", "span-3"]
    assert all(line.startswith(large) for line in jsonl_path(spool).read_text().splitlines())


def test_a_spool_whose_resource_record_is_not_committed_yet_waits(tmp_path: Path) -> None:
    spool = tmp_path / "worker-16.spool"
    spool.write_bytes(fmt.header_bytes(16) + bytes(fmt.LENGTH.size) + fmt.prefix_payload(PREFIX))
    result = convert_spool(spool)
    assert result.spans == 0 and not result.warnings and not result.deleted
    assert spool.exists() and not jsonl_path(spool).exists()


def test_one_round_reads_past_many_first_blocks(tmp_path: Path) -> None:
    spool = tmp_path / "worker-17.spool"
    writer = SpoolWriter(spool, PREFIX)
    count = 0
    while writer.statistics().bytes < spool_convert.FIRST_BLOCK * 40:
        writer.append(_span(count, padding="p" * (count % 500)))
        count += 1
    result = convert_spool(spool)
    assert result.spans == count and not result.pending
    writer.close()
    assert _names(jsonl_path(spool)) == [f"span-{n}" for n in range(count)]


def test_a_corrupt_record_is_skipped_with_a_warning_and_the_rest_converted(
        tmp_path: Path) -> None:
    spool = tmp_path / "worker-18.spool"
    writer = SpoolWriter(spool, PREFIX, mapped=False)
    writer.append(_span(1))
    corrupt_at = writer.statistics().bytes + fmt.HEADER_BYTES
    writer.append(_span(2))
    writer.append(_span(3))
    writer.close()
    with open(spool, "r+b") as handle:  # the second span's payload is not marshal data
        handle.seek(corrupt_at + fmt.LENGTH.size)
        handle.write(b"\xff" * 8)
    result = convert_spool(spool)
    assert result.spans == 2 and result.deleted
    (warning,) = result.warnings
    assert f"corrupt record at byte {corrupt_at}" in warning
    assert _names(jsonl_path(spool)) == ["span-1", "span-3"]


def test_a_spool_this_reader_may_not_write_is_decoded_in_memory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A copied session folder, read by another user: nothing is written or moved."""
    spool = tmp_path / "worker-14.spool"
    writer = SpoolWriter(spool, PREFIX)
    for number in range(3):
        writer.append(_span(number))
    writer.close()
    before = spool.read_bytes()
    real_open = os.open

    def no_write_access(path: object, flags: int, *args: int) -> int:
        if str(path) == str(spool) and flags & os.O_RDWR:
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(path, flags, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(spool_convert.os, "open", no_write_access)
    resource_spans, warnings = otlp_json.read_trace_dir(tmp_path)
    assert warnings == []
    assert [span.name for span in otlp_json.to_readable_spans(resource_spans)] == [
        "span-0", "span-1", "span-2"]
    assert spool.read_bytes() == before and not jsonl_path(spool).exists()
    assert convert_spool(spool, max_bytes=1).spans == 3  # no budget: nothing would record it
