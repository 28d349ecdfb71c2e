"""One way to list and read a session's line files, plain or compressed.

A process's lines (``logs/<component>-<pid>.jsonl``, ``traces/…``) live in its *current*
file and, once it has grown past TRACEDRAY_LOG_ROTATION_BYTES, in numbered *parts*
(rotation.py): ``<component>-<pid>.000001.jsonl``, ``.000002.jsonl``, …, oldest first,
each compressed after a while into ``<part>.zst`` (rotated_file.py). Every reader names
a file by its plain name — the index's offsets are into the uncompressed lines — and
opens it here, which reads whichever of the two is on disk.
"""

from __future__ import annotations

import contextlib
import os
import re
from dataclasses import dataclass
from pathlib import Path

from tracedray.telemetry.rotated_file import SUFFIX as COMPRESSED_SUFFIX
from tracedray.telemetry.rotated_file import SeekableReader

LINES_SUFFIX = ".jsonl"
PART_DIGITS = 6
_TO_THE_END = 1 << 40  # a length this large or larger reads to the end
_PART = re.compile(r"^(?P<stem>.+)\.(?P<number>\d{6,})\.jsonl$")


@dataclass(frozen=True, order=True)
class PartName:
    """Where a plain file name sits among its file's parts."""

    base: str  # the current file's name (``worker-7.jsonl``)
    number: int  # the part's number; 0 for the current file (which sorts last: see key)
    name: str


def part_name(base: str, number: int) -> str:
    """The name of part ``number`` of the current file ``base``."""
    return f"{base[:-len(LINES_SUFFIX)]}.{number:0{PART_DIGITS}d}{LINES_SUFFIX}"


def parse_name(name: str) -> PartName | None:
    """A plain or compressed line file's place among its parts; None for other files."""
    if name.endswith(COMPRESSED_SUFFIX):
        name = name[:-len(COMPRESSED_SUFFIX)]
    if not name.endswith(LINES_SUFFIX) or name.startswith("."):
        return None
    found = _PART.match(name)
    if found is None:
        return PartName(name, 0, name)
    return PartName(found["stem"] + LINES_SUFFIX, int(found["number"]), name)


def base_name(name: str) -> str:
    """The current file's name of ``name`` (itself, or the file a part was rotated from)."""
    parsed = parse_name(name)
    return parsed.base if parsed is not None else name


def _order(part: PartName) -> tuple[str, int]:
    return part.base, part.number if part.number else 1 << 62  # the current file last


def line_files(folder: Path) -> list[Path]:
    """Every line file of ``folder`` by its plain name, a file's parts oldest first and
    its current file last (a compressed part listed as the plain name it reads as)."""
    try:
        entries = [entry.name for entry in os.scandir(folder) if entry.is_file()]
    except OSError:
        return []
    parts = {parsed.name: parsed for parsed in map(parse_name, entries) if parsed is not None}
    return [folder / part.name for part in sorted(parts.values(), key=_order)]


def follow_rotations(positions: dict[str, int], files: list[Path]) -> None:
    """Move a reader's per-file positions (bytes read, lines printed: ``positions``) onto
    the parts their files rotated into: a part of ``files`` (line_files order) seen for
    the first time takes its current file's position, and that file starts again from 0.
    """
    for path in files:
        name = path.name
        base = base_name(name)
        if name != base and name not in positions and base in positions:
            positions[name] = positions.pop(base)


def stored_path(path: Path) -> Path | None:
    """The file that holds ``path``'s lines now: itself, its compressed form, or None."""
    if path.exists():
        return path
    compressed = path.with_name(path.name + COMPRESSED_SUFFIX)
    return compressed if compressed.exists() else None


class LineFile:
    """Reads uncompressed byte ranges of one line file, plain or compressed."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._plain = None
        self._compressed: SeekableReader | None = None
        try:
            self._plain = open(path, "rb")  # noqa: SIM115 - closed by close()
        except FileNotFoundError:
            compressed = path.with_name(path.name + COMPRESSED_SUFFIX)
            try:
                self._compressed = SeekableReader(compressed)
            except FileNotFoundError:
                # Compressed in between: the plain name was just replaced.
                self._plain = open(path, "rb")  # noqa: SIM115

    @property
    def compressed(self) -> bool:
        return self._compressed is not None

    def size(self) -> int:
        if self._compressed is not None:
            return self._compressed.size
        assert self._plain is not None
        return os.fstat(self._plain.fileno()).st_size

    def read(self, offset: int, length: int) -> bytes:
        if self._compressed is not None:
            return self._compressed.read(offset, length)
        assert self._plain is not None
        self._plain.seek(offset)
        # read(n) allocates n bytes up front: "to the end" is read() (the file may grow).
        return self._plain.read() if length >= _TO_THE_END else self._plain.read(length)

    def close(self) -> None:
        if self._plain is not None:
            self._plain.close()
        if self._compressed is not None:
            self._compressed.close()

    def __enter__(self) -> LineFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def file_size(path: Path) -> int | None:
    """The uncompressed size of a line file; None when it is gone. A damaged compressed
    part raises SessionFileCorruptError."""
    with contextlib.suppress(FileNotFoundError):
        return path.stat().st_size
    try:
        with LineFile(path) as handle:
            return handle.size()
    except FileNotFoundError:
        return None


def read_range(path: Path, offset: int = 0, length: int = 1 << 62) -> bytes:
    """Up to ``length`` uncompressed bytes of ``path`` from ``offset`` (b"" when it is
    gone). A damaged compressed part raises SessionFileCorruptError."""
    try:
        with LineFile(path) as handle:
            return handle.read(offset, length)
    except FileNotFoundError:
        return b""


def read_all(path: Path) -> bytes:
    return read_range(path)
