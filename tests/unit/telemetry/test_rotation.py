"""Rotation decisions (rotation.py), the seekable compressed parts (rotated_file.py) and
the one way of reading a line file (line_file.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
import zstandard

from tracedray import config
from tracedray.exceptions import ConfigError, SessionFileCorruptError
from tracedray.telemetry import line_file, rotated_file
from tracedray.telemetry.rotation import Action, FileFact, Limits, Reason, plan

LIMITS = Limits(rotation_bytes=1000, backup_count=3, compress_delay_s=30.0,
                session_max_bytes=10_000)


def fact(name: str, size: int, mtime: float = 0.0, kind: str = "logs") -> FileFact:
    parsed = line_file.parse_name(name)
    assert parsed is not None
    return FileFact(kind, parsed.name, parsed.base, parsed.number,
                    name.endswith(".zst"), size, mtime)


def test_a_full_current_file_rotates_into_the_next_part() -> None:
    files = [fact("worker-7.jsonl", 1000), fact("worker-7.000002.jsonl.zst", 300),
             fact("worker-7.000001.jsonl.zst", 300), fact("raylet-3.jsonl", 999)]
    steps = plan(files, now=10.0, limits=LIMITS)
    assert [(s.action, s.file.name, s.new_name) for s in steps] == [
        (Action.ROTATE, "worker-7.jsonl", "worker-7.000003.jsonl")]


def test_a_part_is_compressed_only_once_nobody_wrote_it_for_the_delay() -> None:
    files = [fact("worker-7.000001.jsonl", 500, mtime=100.0)]
    assert plan(files, now=129.0, limits=LIMITS) == []
    steps = plan(files, now=130.0, limits=LIMITS)
    assert [(s.action, s.reason) for s in steps] == [(Action.COMPRESS, Reason.QUIET)]
    compressed = [fact("worker-7.000001.jsonl.zst", 100, mtime=100.0)]
    assert plan(compressed, now=1e9, limits=LIMITS) == []


def test_parts_beyond_the_backup_count_go_oldest_first() -> None:
    files = [fact(f"worker-7.{n:06d}.jsonl.zst", 10, mtime=n) for n in range(1, 6)]
    steps = plan(files, now=100.0, limits=LIMITS)
    assert [(s.action, s.reason, s.file.number) for s in steps] == [
        (Action.DROP, Reason.BACKUP_COUNT, 1), (Action.DROP, Reason.BACKUP_COUNT, 2)]


def test_over_the_session_limit_the_oldest_parts_go_never_a_current_file() -> None:
    files = [fact("worker-7.jsonl", 900, mtime=50.0),
             fact("worker-7.000001.jsonl.zst", 4000, mtime=10.0, kind="traces"),
             fact("worker-8.000001.jsonl.zst", 4000, mtime=20.0),
             fact("worker-8.000002.jsonl.zst", 4000, mtime=30.0)]
    steps = plan(files, now=100.0, limits=LIMITS, other_bytes=200)
    assert [(s.action, s.reason, s.file.kind, s.file.name) for s in steps] == [
        (Action.DROP, Reason.SESSION_MAX_BYTES, "traces", "worker-7.000001.jsonl")]
    # Not enough even without every part: the parts go, the current file stays.
    steps = plan(files, now=100.0, limits=Limits(1000, 3, 30.0, 500))
    assert [s.file.name for s in steps] == [
        "worker-7.000001.jsonl", "worker-8.000001.jsonl", "worker-8.000002.jsonl"]


def test_a_dropped_part_is_not_also_compressed() -> None:
    files = [fact("worker-7.000001.jsonl", 20_000, mtime=0.0)]
    steps = plan(files, now=100.0, limits=LIMITS)
    assert [s.action for s in steps] == [Action.DROP]


def test_rotation_settings_read_rays_names_when_tracedrays_are_unset() -> None:
    assert config.LOG_ROTATION_BYTES.get({}) == 2 << 20
    assert config.LOG_ROTATION_BYTES.get({"RAY_ROTATION_MAX_BYTES": "4096"}) == 4096
    assert config.LOG_ROTATION_BYTES.get({"RAY_ROTATION_MAX_BYTES": "4096",
                                          "TRACEDRAY_LOG_ROTATION_BYTES": "10"}) == 10
    assert config.LOG_ROTATION_BACKUP_COUNT.get({"RAY_ROTATION_BACKUP_COUNT": "5"}) == 5
    with pytest.raises(ConfigError, match="RAY_ROTATION_MAX_BYTES"):
        config.LOG_ROTATION_BYTES.get({"RAY_ROTATION_MAX_BYTES": "lots"})


def lines(count: int) -> bytes:
    return b"".join(b'{"n": %d, "pad": "%s"}\n' % (n, b"x" * (n % 50)) for n in range(count))


def test_a_compressed_part_reads_any_range_by_uncompressed_offset(tmp_path: Path) -> None:
    data = lines(20_000)
    part = tmp_path / "worker-7.000001.jsonl"
    part.write_bytes(data)
    stored = rotated_file.compress_file(part)
    assert not part.exists() and stored.name == "worker-7.000001.jsonl.zst"
    assert stored.stat().st_size < len(data) / 4
    with rotated_file.SeekableReader(stored) as reader:
        assert reader.size == len(data)
        assert len(reader._starts) > 3  # several frames, so offsets need the table
        for offset in (0, 1, rotated_file.FRAME_BYTES - 5, len(data) // 2, len(data) - 10):
            assert reader.read(offset, 300) == data[offset:offset + 300]
        reader.frames_read = 0
        reader.read(len(data) // 2, 10)
        assert reader.frames_read <= 1  # one frame, not the file
    # Read through its plain name, as every reader does; the whole; and by zstd itself.
    assert line_file.read_range(part, 5, 20) == data[5:25]
    assert line_file.read_all(part) == data
    assert line_file.file_size(part) == len(data)
    with stored.open("rb") as handle:  # plain zstd frames: zstdcat reads the part whole
        whole = zstandard.ZstdDecompressor().stream_reader(
            handle, read_across_frames=True).read()
    assert whole == data


def test_a_line_longer_than_a_frame_is_never_cut(tmp_path: Path) -> None:
    long_line = b'{"big": "' + b"y" * (3 * rotated_file.FRAME_BYTES) + b'"}\n'
    data = lines(3000) + long_line + lines(3000) + b'{"last": 1}'  # and no final newline
    part = tmp_path / "worker-7.000001.jsonl"
    part.write_bytes(data)
    rotated_file.compress_file(part)
    assert line_file.read_all(part) == data
    start = data.index(long_line)
    assert line_file.read_range(part, start, len(long_line)) == long_line
    assert rotated_file.frame_bounds(data, 100)[0] == (0, data.rfind(b"\n", 0, 100) + 1)


def test_a_damaged_compressed_part_is_a_clear_error(tmp_path: Path) -> None:
    part = tmp_path / "worker-7.000001.jsonl"
    part.write_bytes(lines(5000))
    stored = rotated_file.compress_file(part)
    good = stored.read_bytes()
    stored.write_bytes(good[:-3])  # cut: no footer
    with pytest.raises(SessionFileCorruptError, match="no seek table"):
        line_file.read_all(part)
    stored.write_bytes(good[:40] + b"\0" * 40 + good[80:])  # a frame overwritten
    with pytest.raises(SessionFileCorruptError, match=r"worker-7\.000001\.jsonl\.zst.*frame 0"):
        line_file.read_range(part, 0, 10)
    stored.write_bytes(b"x" * 5)
    with pytest.raises(SessionFileCorruptError, match="too short"):
        line_file.read_all(part)


def test_line_files_lists_parts_oldest_first_then_the_current_file(tmp_path: Path) -> None:
    for name in ("worker-7.jsonl", "worker-7.000002.jsonl", "worker-7.000001.jsonl.zst",
                 "raylet-3.jsonl", "worker-7.spool", ".worker-7.000003.jsonl.zst.tmp"):
        (tmp_path / name).write_bytes(b"")
    assert [p.name for p in line_file.line_files(tmp_path)] == [
        "raylet-3.jsonl", "worker-7.000001.jsonl", "worker-7.000002.jsonl", "worker-7.jsonl"]
    assert line_file.base_name("worker-7.000002.jsonl") == "worker-7.jsonl"
    assert line_file.read_range(tmp_path / "gone.jsonl") == b""


def test_a_readers_position_follows_its_file_into_the_part(tmp_path: Path) -> None:
    for name in ("worker-7.000001.jsonl", "worker-7.jsonl", "raylet-3.jsonl"):
        (tmp_path / name).write_bytes(b"")
    positions = {"worker-7.jsonl": 500, "raylet-3.jsonl": 20}
    line_file.follow_rotations(positions, line_file.line_files(tmp_path))
    assert positions == {"worker-7.000001.jsonl": 500, "raylet-3.jsonl": 20}
    line_file.follow_rotations(positions, line_file.line_files(tmp_path))  # seen: stays
    assert positions == {"worker-7.000001.jsonl": 500, "raylet-3.jsonl": 20}
