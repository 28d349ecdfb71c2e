"""Reading the session's trace index (``trace_index.py`` writes it): the lines that name a
key, through the index plus the files' unindexed tails, so that ``tracedray trace`` and
``logs --task/--actor/--worker`` cost what their answer holds, not what the session does.

Opened read-only: a reader never writes the index (a copied or read-only session reads
the same) and never waits for a writer (WAL). A missing index (an older or copied
session) or one that does not open (corrupt) makes :func:`open_index` return None with a
reason: the caller scans every file and says so.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TypeVar

from tracedray.exceptions import SessionFileCorruptError
from tracedray.telemetry import line_file, memory_index
from tracedray.telemetry.index_keys import (
    CLOCK_KEY,
    LOGS,
    STORE_KEY,
    TAGS,
    TRACES,
    complete_lines,
    jsonl_files,
    line_keys,
    log_line_time,
    names_node,
    pid_of,
    span_line_times,
)
from tracedray.telemetry.trace_index import (
    KEY_TABLES,
    catch_up,
    check_schema,
    index_path,
    read_range,
)

T = TypeVar("T")


@dataclass(frozen=True)
class Extent:
    """One line of one file: ``length`` bytes at ``offset`` (without its newline)."""

    kind: str
    name: str
    offset: int
    length: int


@dataclass(frozen=True)
class IndexReadStatistics:
    lookups: int
    lines_read: int  # lines the index named, read by offset
    tail_lines_scanned: int  # lines after the index's end of a file, scanned
    bytes_read: int


class IndexReader:
    """Answers "which lines name this key?" from the index plus the files' unindexed tails.

    Opened read-only: a reader never writes the index (a copied or read-only session
    works the same), and never waits for a writer (WAL).
    """

    def __init__(self, session_root: Path, conn: sqlite3.Connection) -> None:
        self.root = session_root
        self._conn = conn
        self._lookups = 0
        self._lines_read = 0
        self._tail_lines = 0
        self._bytes_read = 0
        self.errors: list[str] = []  # a query the database failed: answered by scanning

    def close(self) -> None:
        self._conn.close()

    def statistics(self) -> IndexReadStatistics:
        return IndexReadStatistics(self._lookups, self._lines_read, self._tail_lines,
                                   self._bytes_read)

    def _indexed_to(self, kind: str) -> dict[str, int]:
        return dict(self._conn.execute("SELECT name, indexed_to FROM files WHERE kind=?",
                                       (kind,)).fetchall())

    def _snapshot(self, kind: str, query: Callable[[], T]) -> tuple[T, dict[str, int]] | None:
        """``query()`` and how far each of ``kind``'s files is indexed, in one snapshot:
        lines an agent indexes in between are then either in the answer or in the
        tails, never in neither nor in both. None (and an error noted) when the
        database fails: the caller scans."""
        try:
            self._conn.execute("BEGIN")
            try:
                return query(), self._indexed_to(kind)
            finally:
                self._conn.execute("COMMIT")
        except sqlite3.DatabaseError as exc:  # damaged after it opened: every line scanned
            self.errors.append(f"trace index {index_path(self.root)}: {exc}; "
                               "reading every file")
            return None

    def lines(self, kind: str, keys: Iterable[bytes]) -> Iterator[tuple[str, bytes]]:
        """Every line of ``kind``'s files holding one of ``keys``, each once, in file
        and offset order (a file's lines in the order they were written), with the
        name of its file."""
        wanted = set(keys)
        self._lookups += 1
        marks = ",".join("?" * len(wanted))
        # The same lookup in each key table (recent and merged); UNION: each line once.
        query = " UNION ".join(
            f"SELECT f.name, k.offset, l.length FROM {table} k "  # noqa: S608
            f"JOIN files f ON f.id = k.file_id "
            f"JOIN lines l ON l.file_id = k.file_id AND l.offset = k.offset "
            f"WHERE f.kind = ? AND k.key IN ({marks})" for table in KEY_TABLES)
        found = self._snapshot(kind, lambda: self._conn.execute(
            query + " ORDER BY 1, 2", (kind, *wanted) * len(KEY_TABLES)).fetchall()
            if wanted else [])
        rows, indexed = found if found is not None else ([], {})
        extents = [Extent(kind, name, offset, length) for name, offset, length in rows]
        yield from self.read(extents)
        yield from self._tails(kind, wanted, indexed)

    def lines_in_window(self, kind: str, since_ns: int | None,
                        until_ns: int | None) -> Iterator[tuple[str, bytes]]:
        """Every line of ``kind``'s files whose time range meets [since, until] (either
        end open), in file and offset order, then the lines the index has not reached
        that do (a line without times is always included)."""
        low = -(1 << 63) if since_ns is None else since_ns
        high = (1 << 63) - 1 if until_ns is None else until_ns
        self._lookups += 1
        found = self._snapshot(kind, lambda: self._conn.execute(
            "SELECT f.name, l.offset, l.length FROM lines l "
            "JOIN files f ON f.id = l.file_id WHERE f.kind = ? "
            "AND (l.t_max IS NULL OR l.t_max >= ?) AND (l.t_min IS NULL OR l.t_min <= ?) "
            "ORDER BY f.name, l.offset", (kind, low, high)).fetchall())
        rows, indexed = found if found is not None else ([], {})
        yield from self.read([Extent(kind, name, offset, length) for name, offset, length in rows])
        for name, raw in self._unindexed(kind, indexed):
            t_min, t_max = (span_line_times(raw) if kind == TRACES
                            else (log_line_time(raw),) * 2)
            if (t_max is None or t_max >= low) and (t_min is None or t_min <= high):
                yield name, raw

    def store_events(self) -> tuple[list[memory_index.StoreEvent], list[bytes]] | None:
        """The object store's events the index holds (telemetry/memory_index.py), and
        the lines holding such events that it has not indexed yet; None when this index
        does not keep them (made by an older tracedray: the caller scans)."""
        self._lookups += 1
        try:
            if not memory_index.kept(self._conn):
                return None
        except sqlite3.DatabaseError as exc:
            self.errors.append(f"trace index {index_path(self.root)}: {exc}")
            return None
        found = self._snapshot(TRACES, lambda: memory_index.read_events(self._conn))
        if found is None:
            return None
        events, indexed = found
        return events, [raw for _, raw in self._tails(TRACES, {STORE_KEY}, indexed)]

    def files_of_pid(self, kind: str, pid: int) -> list[Path]:
        """The files a process wrote (one per process and kind)."""
        return [p for p in jsonl_files(self.root / kind) if pid_of(p.name) == pid]

    def read(self, extents: Sequence[Extent]) -> Iterator[tuple[str, bytes]]:
        handle: line_file.LineFile | None = None
        current = ""
        try:
            for extent in extents:
                if extent.name != current:
                    if handle is not None:
                        handle.close()
                    current = extent.name
                    try:  # a rotated part may be compressed: offsets are uncompressed
                        handle = line_file.LineFile(self.root / extent.kind / extent.name)
                    except (OSError, SessionFileCorruptError) as exc:
                        handle = None
                        if not isinstance(exc, FileNotFoundError):
                            self.errors.append(str(exc))
                if handle is None:
                    continue
                try:
                    raw = handle.read(extent.offset, extent.length)
                except SessionFileCorruptError as exc:
                    self.errors.append(str(exc))
                    handle.close()
                    handle = None
                    continue
                self._lines_read += 1
                self._bytes_read += len(raw)
                yield extent.name, raw
        finally:
            if handle is not None:
                handle.close()

    def _unindexed(self, kind: str, indexed: dict[str, int]) -> Iterator[tuple[str, bytes]]:
        """Every complete line of ``kind``'s files past where the index ends."""
        for path in jsonl_files(self.root / kind):
            start = indexed.get(path.name, 0)
            try:
                size = path.stat().st_size
            except FileNotFoundError:  # a compressed part: indexed whole when it rotated
                if path.name in indexed:
                    continue
                size = _size(path)
            except OSError:
                continue
            if size == start:
                continue
            if size < start:  # replaced since it was indexed: all of it is unindexed
                start = 0
            data = read_range(path, start, size - start)
            self._bytes_read += len(data)
            for _, raw in complete_lines(data, start):
                self._tail_lines += 1
                yield path.name, raw

    def _tails(self, kind: str, wanted: set[bytes],
               indexed: dict[str, int]) -> Iterator[tuple[str, bytes]]:
        for name, raw in self._unindexed(kind, indexed):
            if wanted & line_keys(kind, raw) or (
                    CLOCK_KEY in wanted and kind == LOGS and names_node(raw)):
                yield name, raw

    def gone(self, kind: str) -> str:
        """What retention dropped of ``kind`` (rotation.py), as a note for a reader's
        answer ("" when nothing): those lines are gone, not missing by mistake."""
        try:
            row = self._conn.execute(
                "SELECT COUNT(*), SUM(lines), MIN(t_min), MAX(t_max) FROM dropped "
                "WHERE kind=?", (kind,)).fetchone()
        except sqlite3.DatabaseError:
            return ""
        if not row or not row[0]:
            return ""
        return (f"{row[0]} older {kind} part(s) of this session ({row[1] or 0} lines, "
                f"{_when(row[2])} to {_when(row[3])}) were dropped to keep it under "
                "TRACEDRAY_SESSION_MAX_BYTES or the rotation backup count: what they "
                "held is gone")

    def ids_with_prefix(self, kind: str, prefix: str, limit: int = 10) -> list[str]:
        """Ids of ``kind`` (task, actor, object, trace) starting with ``prefix`` (hex)."""
        text = prefix.strip().lower()
        try:
            low = TAGS[kind] + bytes.fromhex(text + "0" * (len(text) % 2))
            high = TAGS[kind] + bytes.fromhex(text + "f" * (len(text) % 2)) + b"\xff" * 64
        except ValueError:
            return []
        try:
            rows = self._conn.execute(
                " UNION ".join(f"SELECT key FROM {table} WHERE key >= ? AND key <= ?"  # noqa: S608
                               for table in KEY_TABLES) + " ORDER BY 1 LIMIT ?",
                (low, high) * len(KEY_TABLES) + (limit,)).fetchall()
        except sqlite3.DatabaseError as exc:
            self.errors.append(f"trace index {index_path(self.root)}: {exc}")
            return []
        return [bytes(row[0][1:]).hex() for row in rows]
    def resolve(self, kind: str, given: str) -> str:
        """The whole id when ``given`` is a unique prefix of one; ``given`` otherwise."""
        found = self.ids_with_prefix(kind, given, limit=2) if given.strip() else []
        return found[0] if len(found) == 1 else given

    def similar_ids(self, kind: str, given: str, limit: int = 5) -> list[str]:
        """Ids sharing the first half (at least 4 characters) of ``given``: what a cut or
        mistyped paste may have meant."""
        text = given.strip()
        return self.ids_with_prefix(kind, text[:max(4, len(text) // 2)], limit)


def suggest_ids(session_root: Path, kind: str, given: str) -> list[str]:
    """:meth:`IndexReader.similar_ids` of the session's index as it stands ([] without)."""
    index, _ = open_index(session_root, up_to_date=False)
    if index is None:
        return []
    try:
        return index.similar_ids(kind, given)
    finally:
        index.close()


def matching_lines(session_root: Path, kind: str,
                   keys: Iterable[bytes]) -> Iterator[tuple[str, bytes]]:
    """(file name, line) of every line of ``kind`` holding one of ``keys``: through the
    index, or, without a usable one, by scanning every file (still sending only those)."""
    wanted = set(keys)
    index, _ = open_index(session_root)
    if index is not None:
        try:
            yield from index.lines(kind, wanted)
        finally:
            index.close()
        return
    for path in jsonl_files(session_root / kind):
        named = False
        for _, raw in complete_lines(read_range(path, 0, 1 << 62), 0):
            clock = CLOCK_KEY in wanted and kind == LOGS and not named and names_node(raw)
            named = named or clock
            if clock or wanted & line_keys(kind, raw):
                yield path.name, raw


def open_index(session_root: Path, *,
               up_to_date: bool = True) -> tuple[IndexReader | None, str]:
    """The session's index, read-only, and a note to show ("" if none); or None and why
    (the caller scans instead).

    ``up_to_date``: first index what the agents have not (:func:`catch_up`; a corrupt
    index is rebuilt then), so id prefixes find every id; a read-only session's reader
    scans those lines instead.
    """
    path = index_path(session_root)
    if not path.exists():
        return None, f"no trace index in {session_root} (an older or copied session)"
    note = catch_up(session_root) if up_to_date else ""
    try:
        # mode=ro: a copied session may be read-only; the WAL needs its -shm beside it,
        # which a read-only folder may lack: then immutable=1 reads the main file alone.
        conn = sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True, isolation_level=None)
        try:
            check_schema(conn)
        except sqlite3.OperationalError as exc:
            if "unable to open" not in str(exc) and "readonly" not in str(exc):
                raise
            conn.close()
            conn = sqlite3.connect(f"{path.as_uri()}?immutable=1", uri=True,
                                   isolation_level=None)
            check_schema(conn)
    except sqlite3.DatabaseError as exc:
        return None, f"trace index {path} unusable ({exc}); ignoring it"
    return IndexReader(session_root, conn), note


def _size(path: Path) -> int:
    try:
        return line_file.file_size(path) or 0
    except (OSError, SessionFileCorruptError):
        return 0


def _when(ns: int | None) -> str:

    if ns is None:
        return "?"
    return datetime.fromtimestamp(ns / 1e9, timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
