"""AppendFile: mapped appends survive SIGKILL and grow; the public file holds only whole lines."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any

import pytest
from fork_support import run_in_forked_child

from tracedray.telemetry import append_file, line_spool
from tracedray.telemetry.append_file import (
    AppendFile,
    complete_length,
    data_length,
    read_data,
)
from tracedray.telemetry.otlp_json import end_offsets, scan_trace_file


def test_lines_are_mapped_into_a_spool_and_the_public_file_gets_whole_lines(
        tmp_path: Path) -> None:
    path = tmp_path / "x.jsonl"
    appender = AppendFile(path)
    appender.append(b'{"a":1}\n')
    stats = appender.statistics()
    spool = tmp_path / "x.spool"
    assert stats.mapped and stats.length == 8 and stats.spool == str(spool)
    assert stats.reserved >= append_file.FIRST_CHUNK_BYTES - line_spool.HEADER_BYTES
    assert path.read_bytes() == b""  # created at once (readers find it), written later
    raw = spool.read_bytes()  # the private spool is the padded one
    assert raw[line_spool.HEADER_BYTES:][8:] == bytes(len(raw) - line_spool.HEADER_BYTES - 8)
    assert read_data(path) == b'{"a":1}\n'  # a reader copies first
    assert path.read_bytes() == b'{"a":1}\n'
    appender.append(b'{"b":2}\n')
    appender.close()
    assert path.read_bytes() == b'{"a":1}\n{"b":2}\n' and not spool.exists()


def test_lines_larger_than_a_chunk_and_many_remaps(tmp_path: Path) -> None:
    path = tmp_path / "x.jsonl"
    appender = AppendFile(path)
    lines = [(json.dumps({"i": i, "pad": "p" * (i * 997 % 70000)}) + "\n").encode()
             for i in range(300)]
    for line in lines:
        appender.append(line)
    assert appender.statistics().remaps > 0
    assert read_data(path) == b"".join(lines)  # live: padded, but the data is whole
    appender.close()
    assert path.read_bytes() == b"".join(lines)


def test_threads_never_interleave_inside_a_line(tmp_path: Path) -> None:
    path = tmp_path / "x.jsonl"
    appender = AppendFile(path)

    def writer(tag: int) -> None:
        for i in range(2000):
            appender.append(f"{tag}:{i}:{'x' * (i % 50)}\n".encode())

    threads = [threading.Thread(target=writer, args=(tag,)) for tag in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    appender.close()
    lines = path.read_text().splitlines()
    assert len(lines) == 8000
    for tag in range(4):
        mine = [line for line in lines if line.startswith(f"{tag}:")]
        assert [int(line.split(":")[1]) for line in mine] == list(range(2000))
        assert all(line.endswith("x" * (int(line.split(":")[1]) % 50)) for line in mine)


def test_reopening_copies_the_earlier_spool_and_never_its_torn_line(tmp_path: Path) -> None:
    path = tmp_path / "x.jsonl"
    path.write_bytes(b'{"a":1}\n')
    # What a writer killed mid-copy leaves: whole lines, a torn one, the reserved tail.
    (tmp_path / "x.spool").write_bytes(line_spool.header_bytes(1, len(path.read_bytes()))
                                       + b'{"b":2}\n{"tor' + bytes(5000))
    appender = AppendFile(path)
    assert path.read_bytes() == b'{"a":1}\n{"b":2}\n'
    appender.append(b'{"c":3}\n')
    assert read_data(path) == b'{"a":1}\n{"b":2}\n{"c":3}\n'
    appender.close()
    assert path.read_bytes() == b'{"a":1}\n{"b":2}\n{"c":3}\n'


@pytest.mark.parametrize("mapped", [True, False])
def test_write_mode_and_unmap_leave_a_plain_file(tmp_path: Path, mapped: bool) -> None:
    path = tmp_path / "x.jsonl"
    appender = AppendFile(path, mapped=mapped)
    appender.append(b"one\n")
    appender.unmap()
    assert path.read_bytes() == b"one\n"  # the spool's lines copied, without a reader
    assert not (tmp_path / "x.spool").exists()
    appender.append(b"two\n")
    assert path.read_bytes() == b"one\ntwo\n" and not appender.statistics().mapped
    appender.close()
    with pytest.raises(OSError):
        appender.append(b"three\n")


def test_reader_helpers_stop_at_the_first_nul() -> None:
    assert data_length(b"ab\n\0\0") == 3 and data_length(b"ab\n") == 3
    assert complete_length(b"a\nb\n") == 4
    assert complete_length(b"a\nb") == 2  # last line still being written
    assert complete_length(b"a\nb\0c\n\0\0") == 2  # a line whose copy is in progress
    assert complete_length(b"\0\0\0") == 0


def test_trace_reader_skips_a_reserved_tail_and_a_growing_last_line(tmp_path: Path) -> None:
    traces = tmp_path / "traces"
    traces.mkdir()
    line = b'{"resourceSpans":[]}\n'
    (traces / "worker-1.jsonl").write_bytes(line + b'{"resour' + bytes(100))  # older files
    warnings: list[str] = []
    objects, offset = scan_trace_file(traces / "worker-1.jsonl", warnings=warnings)
    assert objects == [{"resourceSpans": []}] and offset == len(line)
    (traces / "worker-1.jsonl").unlink()
    appender = AppendFile(traces / "worker-1.jsonl", mapped=False)
    appender.append(line)
    warnings = []
    objects, offset = scan_trace_file(traces / "worker-1.jsonl", warnings=warnings)
    assert objects == [{"resourceSpans": []}] and offset == len(line) and warnings == []
    assert end_offsets(traces) == {"worker-1.jsonl": len(line)}
    appender.append(line)
    objects, offset = scan_trace_file(traces / "worker-1.jsonl", start=offset)
    assert len(objects) == 1 and offset == 2 * len(line)
    appender.close()


def test_lines_appended_before_sigkill_are_in_the_file(tmp_path: Path,
                                                       sigkill_after: Any) -> None:
    path = tmp_path / "killed.jsonl"
    code = (
        "import sys, pathlib\n"
        "from tracedray.telemetry.append_file import AppendFile\n"
        f"appender = AppendFile(pathlib.Path({str(path)!r}))\n"
        "for i in range(1000):\n"
        "    appender.append(b'{\"i\":%d}\\n' % i)\n"
        "print('appended', flush=True)\n"
        "sys.stdin.read()\n"
    )
    sigkill_after(code, "appended")
    lines = read_data(path).decode().splitlines()
    assert [json.loads(line)["i"] for line in lines] == list(range(1000))


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_writes_beside_the_parent_not_into_its_mapping(tmp_path: Path) -> None:
    path = tmp_path / "driver-1.jsonl"
    appender = AppendFile(path)
    appender.append(b"parent-before\n")
    pid = run_in_forked_child(lambda: (appender.append(b"child\n"), appender.close()))
    appender.append(b"parent-after\n")
    appender.close()
    assert path.read_bytes() == b"parent-before\nparent-after\n"
    assert not (tmp_path / "driver-1.spool").exists()  # the child left it to the parent
    assert (tmp_path / f"driver-1.fork-{pid}.jsonl").read_bytes() == b"child\n"


def test_a_full_disk_at_remap_falls_back_to_writes(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "x.jsonl"
    appender = AppendFile(path)

    def no_space(fd: int, offset: int, length: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(append_file.os, "posix_fallocate", no_space)
    line = b"y" * 1000 + b"\n"
    count = append_file.FIRST_CHUNK_BYTES // len(line) + 5  # crosses the first window
    for _ in range(count):
        appender.append(line)
    stats = appender.statistics()
    assert not stats.mapped and "No space left" in stats.fallback_reason
    assert path.read_bytes() == line * count  # the spool copied, nothing lost or doubled
    assert not (tmp_path / "x.spool").exists()
    appender.close()
    assert path.read_bytes() == line * count


def test_the_public_file_never_shows_a_nul_or_a_partial_line_while_lines_are_added(
        tmp_path: Path) -> None:
    path = tmp_path / "x.jsonl"
    appender = AppendFile(path)
    count = 3000

    def writer() -> None:
        for i in range(count):
            appender.append(json.dumps({"i": i, "pad": "p" * (i * 7 % 3000)}).encode() + b"\n")

    thread = threading.Thread(target=writer)
    thread.start()
    looks = 0
    while thread.is_alive() or looks < 3:
        line_spool.copy_spool(tmp_path / "x.spool")  # what the agent does
        data = path.read_bytes()
        assert b"\0" not in data and (not data or data.endswith(b"\n"))
        looks += 1
    thread.join()
    appender.close()
    numbers = [json.loads(line)["i"] for line in path.read_bytes().splitlines()]
    assert numbers == list(range(count))


def test_a_copier_killed_between_its_write_and_its_mark_doubles_nothing(tmp_path: Path) -> None:
    path = tmp_path / "x.jsonl"
    appender = AppendFile(path)
    spool = tmp_path / "x.spool"
    appender.append(b'{"a":1}\n{"b":2}\n')
    # A copier that wrote all of it, or a torn part of it, then died before recording it.
    with open(path, "ab") as out:
        out.write(b'{"a":1}\n{"b')
    appender.append(b'{"c":3}\n')
    line_spool.copy_spool(spool)
    assert path.read_bytes() == b'{"a":1}\n{"b":2}\n{"c":3}\n'
    # A log tool truncated (rotated) the public file: copying goes on from there.
    path.write_bytes(b"")
    appender.append(b'{"d":4}\n')
    line_spool.copy_spool(spool)
    assert path.read_bytes() == b'{"d":4}\n'
    appender.close()


def test_a_read_only_spool_is_read_without_being_changed(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "x.jsonl"
    appender = AppendFile(path)
    appender.append(b'{"a":1}\n{"b"')
    real_open = line_spool.os.open

    def no_write(file: Any, flags: int, *args: Any) -> int:
        if str(file).endswith(".spool") and flags & os.O_RDWR:
            raise PermissionError(13, "Permission denied")
        return real_open(file, flags, *args)

    monkeypatch.setattr(line_spool.os, "open", no_write)
    assert read_data(path) == b'{"a":1}\n' and path.read_bytes() == b""
    monkeypatch.undo()
    appender.close()


def test_without_a_spool_lines_are_written_to_the_public_file(tmp_path: Path) -> None:
    path = tmp_path / "x.jsonl"
    (tmp_path / "x.spool").mkdir()  # in the way, and not removable as a file
    appender = AppendFile(path)
    appender.append(b'{"a":1}\n')
    stats = appender.statistics()
    assert not stats.mapped and "FileExistsError" in stats.fallback_reason
    assert path.read_bytes() == b'{"a":1}\n'
    appender.close()
