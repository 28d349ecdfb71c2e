"""The session's trace index: which lines of ``traces/*.jsonl`` and ``logs/*.jsonl``
name a task, actor, object, trace or process, and when they happened.

Readers (``tracedray trace``, ``logs --task/--actor/--worker``) read only the lines the
index names, so their cost follows the answer, not the session. The index is an SQLite
database in WAL mode, ``<session>/trace_index.sqlite``, written by each node's telemetry
agent (core/raylet/telemetry_agent.py, nice 19 / SCHED_IDLE) after each conversion
round: the agent reads the files' new complete lines from where it stopped
(``files.indexed_to``) and records, per line, its keys and time range. Several agents
sharing a session folder (nodes on one machine) serialise on SQLite's write lock; each
file's progress is read and moved inside one transaction, so no line is indexed twice.

What a line is keyed under is ``index_keys.py``'s. Lines a file gained after
the index's ``indexed_to`` (the agent is behind, or was killed) are scanned by the
reader itself, so an answer is never missing a line.

A missing index (an older or copied session) or one that does not open (corrupt) makes
:func:`open_index` return None with a reason: the caller scans every file and says so.
A writer that finds its index corrupt moves it aside and builds a new one.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TypeVar

from tracedray.exceptions import SessionFileCorruptError
from tracedray.telemetry import line_file, memory_index
from tracedray.telemetry.index_keys import CLOCK_KEY as CLOCK_KEY
from tracedray.telemetry.index_keys import KINDS as KINDS
from tracedray.telemetry.index_keys import LOGS as LOGS
from tracedray.telemetry.index_keys import NAME_FAMILIES as NAME_FAMILIES

# The keys' names are this module's too: its readers and writer speak them.
from tracedray.telemetry.index_keys import STORE_KEY, TAGS
from tracedray.telemetry.index_keys import TRACES as TRACES
from tracedray.telemetry.index_keys import complete_end as complete_end
from tracedray.telemetry.index_keys import complete_lines as complete_lines
from tracedray.telemetry.index_keys import jsonl_files as jsonl_files
from tracedray.telemetry.index_keys import key as key
from tracedray.telemetry.index_keys import line_keys as line_keys
from tracedray.telemetry.index_keys import log_line_keys as log_line_keys
from tracedray.telemetry.index_keys import log_line_time as log_line_time
from tracedray.telemetry.index_keys import name_key as name_key
from tracedray.telemetry.index_keys import names_node as names_node
from tracedray.telemetry.index_keys import pid_of as pid_of
from tracedray.telemetry.index_keys import span_line_keys as span_line_keys
from tracedray.telemetry.index_keys import span_line_times as span_line_times

T = TypeVar("T")
INDEX_NAME = "trace_index.sqlite"
SCHEMA_VERSION = "5"
# What one update indexes at most: one write transaction, one write lock. A commit writes
# every B-tree page the transaction touched (keys are random ids: a page per key, nearly)
# to the WAL and checkpoints them: with 256 KiB (~85 tasks' spans) a commit cost ~40 µs of
# CPU per task's spans and grew with the index; 2 MiB shares each page among ~8x the keys
# (indexing a task's spans ~70-95 µs -> ~32-47 µs, benchmarks/results/telemetry-2026-11-27b).
# A writer holds the lock ~20-40 ms of its CPU for it; readers (WAL) never wait on it.
DEFAULT_MAX_BYTES = 2 << 20
# Keys are random ids: entered in one table, each transaction's ~5,000 keys touched
# nearly every page of it, and each commit rewrote them all (to the WAL, then at the
# checkpoint), so a task's index cost grew with the session (36 -> 63 µs of CPU per
# task's spans over 70,000 tasks). So keys enter small tables first and move on in
# sorted passes, as in an LSM tree: new keys go to ``recent_keys`` (at 32k keys, ~1.3 MiB:
# within SQLite's default 2 MiB page cache); once it holds MERGE_ROWS they move to
# ``mid_keys``, and once that holds MID_ROWS, to ``keys``. A pass touches each page of
# the table it enters at most once, so a key costs O(pages / keys moved) per level, not
# a page of the whole index. Readers look in all three (KEY_TABLES). Over 600,000
# tasks a task's spans cost 50 -> 100 µs to index in one table, ~30-40 µs so; the
# transaction that moves mid_keys on (every ~170,000 tasks) takes ~1 s of CPU, with
# the write lock (readers never wait for it: WAL).
MERGE_ROWS = 32 << 10
MID_ROWS = 1 << 20

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta(name TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS files(
    id INTEGER PRIMARY KEY, kind TEXT NOT NULL, name TEXT NOT NULL, pid INTEGER,
    indexed_to INTEGER NOT NULL DEFAULT 0, named INTEGER NOT NULL DEFAULT 0,
    UNIQUE(kind, name));
CREATE TABLE IF NOT EXISTS lines(
    file_id INTEGER NOT NULL, offset INTEGER NOT NULL, length INTEGER NOT NULL,
    t_min INTEGER, t_max INTEGER, PRIMARY KEY(file_id, offset)) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS lines_by_time ON lines(t_min);
CREATE INDEX IF NOT EXISTS lines_by_end ON lines(t_max);
CREATE TABLE IF NOT EXISTS dropped(
    kind TEXT NOT NULL, name TEXT NOT NULL, lines INTEGER NOT NULL, bytes INTEGER NOT NULL,
    t_min INTEGER, t_max INTEGER, reason TEXT NOT NULL, dropped_at REAL NOT NULL,
    PRIMARY KEY(kind, name));
CREATE TABLE IF NOT EXISTS keys(
    key BLOB NOT NULL, file_id INTEGER NOT NULL, offset INTEGER NOT NULL,
    PRIMARY KEY(key, file_id, offset)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS mid_keys(
    key BLOB NOT NULL, file_id INTEGER NOT NULL, offset INTEGER NOT NULL,
    PRIMARY KEY(key, file_id, offset)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS recent_keys(
    key BLOB NOT NULL, file_id INTEGER NOT NULL, offset INTEGER NOT NULL,
    PRIMARY KEY(key, file_id, offset)) WITHOUT ROWID;
"""
KEY_TABLES = ("keys", "mid_keys", "recent_keys")


def index_path(session_root: Path) -> Path:
    return session_root / INDEX_NAME


# --------------------------------------------------------------------------- writer


def create_index(session_root: Path) -> str:
    """Create the session's (empty) index, so readers know the session is indexed even
    before its agent's first round (they scan what it has not indexed yet); returns a
    warning, "" when it worked. Never raises."""
    path = index_path(session_root)
    try:
        # Owner-only as every file of a session, whatever the umask of the process that
        # starts a node (sqlite gives its -wal and -shm files the database's mode).
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600))
        os.chmod(path, 0o600)
        _connect(path, timeout_s=1.0).close()
    except (sqlite3.Error, OSError) as exc:
        return f"cannot create the trace index in {session_root}: {exc}"
    return ""


@dataclass
class IndexUpdate:
    lines: int = 0
    bytes: int = 0
    pending: bool = False  # lines remain (the byte budget ran out, or a lock was held)
    rebuilt: bool = False  # the index did not open and was built anew
    error: str = ""
    keys: int = 0  # key rows entered (in recent_keys)
    merged: int = 0  # key rows moved on from recent_keys (and from mid_keys)


def _connect(path: Path, *, timeout_s: float) -> sqlite3.Connection:
    conn = sqlite3.connect(path, timeout=timeout_s, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")  # an index can be rebuilt; no fsync per round
    conn.execute("PRAGMA wal_autocheckpoint=256")  # pages: the WAL stays near 1 MiB
    conn.execute("PRAGMA journal_size_limit=1048576")  # and shrinks back after a burst
    conn.executescript(_SCHEMA)
    conn.executescript(memory_index.SCHEMA)
    conn.execute(memory_index.MARK_FRESH)
    conn.execute("INSERT OR IGNORE INTO meta VALUES ('schema', ?)", (SCHEMA_VERSION,))
    conn.executemany("INSERT OR IGNORE INTO meta VALUES (?, '0')",
                     [("rows:recent_keys",), ("rows:mid_keys",)])
    return conn


class IndexWriter:
    """Brings the index of one session folder up to date with its files."""

    def __init__(self, session_root: Path, *, timeout_s: float = 0.0) -> None:
        self.root = session_root
        self.path = index_path(session_root)
        self.timeout_s = timeout_s
        self._conn: sqlite3.Connection | None = None
        self.lines_indexed = 0

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def _connection(self, result: IndexUpdate) -> sqlite3.Connection:
        if self._conn is None:
            try:
                self._conn = _connect(self.path, timeout_s=self.timeout_s)
                _check_schema(self._conn)
            except sqlite3.DatabaseError as exc:
                if "locked" in str(exc):
                    raise
                result.rebuilt = True
                result.error = f"{self.path}: {exc}; rebuilt"
                self._set_aside()
                self._conn = _connect(self.path, timeout_s=self.timeout_s)
        return self._conn

    def _set_aside(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(sqlite3.Error):
                self._conn.close()
            self._conn = None
        for suffix in ("", "-wal", "-shm"):
            with contextlib.suppress(OSError):
                os.replace(f"{self.path}{suffix}", f"{self.path}.corrupt{suffix}")

    def update(self, *, max_bytes: int = DEFAULT_MAX_BYTES) -> IndexUpdate:
        """Index the complete lines every file gained, up to ``max_bytes`` of them.

        Never raises: a file another writer is indexing (its lock is held) is left for
        the next round, a corrupt index is moved aside and rebuilt.
        """
        result = IndexUpdate()
        try:
            conn = self._connection(result)
            # One read of every file's progress: a round with nothing new writes nothing.
            done = {(kind, name): int(to) for kind, name, to in conn.execute(
                "SELECT kind, name, indexed_to FROM files").fetchall()}
            changed = []
            for kind in KINDS:
                for path in jsonl_files(self.root / kind):
                    indexed_to = done.get((kind, path.name), -1)
                    try:
                        if path.stat().st_size == indexed_to:
                            continue
                    except FileNotFoundError:  # compressed: indexed whole when it rotated
                        if indexed_to >= 0:
                            continue
                    except OSError:
                        continue
                    changed.append((kind, path))
            if changed:
                # Every file in one transaction: the files' keys share the index's pages,
                # and a commit rewrites each page it touched once (a commit per file
                # rewrote them per file).
                self._in_transaction(conn, lambda staged: self._index_files(
                    conn, changed, max_bytes, staged), result)
        except sqlite3.OperationalError as exc:
            if "locked" in str(exc) or "busy" in str(exc):
                result.pending = True
            else:
                result.error = f"{self.path}: {exc}"
        except sqlite3.DatabaseError as exc:  # corrupt under us: build it again next round
            result.error = f"{self.path}: {exc}; it will be rebuilt"
            self._set_aside()
        self.lines_indexed += result.lines
        return result

    def index_whole(self, kind: str, path: Path) -> IndexUpdate:
        """Index all of ``path`` that is not yet: before it rotates (rotation_io.py), so a
        part is whole in the index from the start. Never raises (see update)."""
        result = IndexUpdate()
        try:
            conn = self._connection(result)
            self._in_transaction(conn, lambda staged: self._index_file(
                conn, kind, path, 1 << 62, staged), result)
        except sqlite3.Error as exc:
            result.error = f"{self.path}: {exc}"
        self.lines_indexed += result.lines
        return result

    def rename(self, kind: str, old: str, new: str) -> str:
        """The file ``old`` is now named ``new`` (it rotated into a part): its lines keep
        their entries. Returns what went wrong ("" if nothing). Never raises.

        Called right after the rename on disk: a writer killed in between leaves
        entries under ``old``, which the next update finds longer than the new current
        file and drops; the part is then indexed again under its own name.
        """
        result = IndexUpdate()
        try:
            conn = self._connection(result)
            conn.execute("UPDATE files SET name=? WHERE kind=? AND name=?", (new, kind, old))
        except sqlite3.Error as exc:
            return f"{self.path}: {exc}"
        return result.error

    def forget(self, kind: str, name: str, size: int, reason: str) -> str:
        """The part ``name`` was dropped (rotation.py): its lines leave the index, and
        a row in ``dropped`` says what went (IndexReader.gone). Returns what went wrong
        ("" if nothing). Never raises. Its object-store events stay (memory_index.py):
        a few bytes each, and `memory --timeline` stays whole."""
        import time

        result = IndexUpdate()
        try:
            conn = self._connection(result)
            conn.execute("BEGIN IMMEDIATE")
            try:
                row = conn.execute("SELECT id FROM files WHERE kind=? AND name=?",
                                   (kind, name)).fetchone()
                lines, t_min, t_max = 0, None, None
                if row is not None:
                    lines, t_min, t_max = conn.execute(
                        "SELECT COUNT(*), MIN(t_min), MAX(t_max) FROM lines WHERE file_id=?",
                        (row[0],)).fetchone()
                    _forget_keys(conn, row[0])
                    conn.execute("DELETE FROM lines WHERE file_id=?", (row[0],))
                    conn.execute("DELETE FROM files WHERE id=?", (row[0],))
                conn.execute("INSERT OR REPLACE INTO dropped VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                             (kind, name, lines, size, t_min, t_max, reason, time.time()))
                conn.execute("COMMIT")
            except BaseException:
                with contextlib.suppress(sqlite3.Error):
                    conn.execute("ROLLBACK")
                raise
        except sqlite3.Error as exc:
            return f"{self.path}: {exc}"
        return result.error

    @staticmethod
    def _in_transaction(conn: sqlite3.Connection, work: Callable[[IndexUpdate], None],
                        result: IndexUpdate) -> None:
        """Run ``work`` in one write transaction; what it staged counts in ``result``
        once committed (rolled back, nothing does, and the error propagates)."""
        staged = IndexUpdate()
        conn.execute("BEGIN IMMEDIATE")
        try:
            work(staged)
            if staged.keys:
                staged.merged = _count_recent(conn, staged.keys)
            conn.execute("COMMIT")
        except BaseException:
            with contextlib.suppress(sqlite3.Error):
                conn.execute("ROLLBACK")
            raise
        result.lines += staged.lines
        result.bytes += staged.bytes
        result.pending = result.pending or staged.pending
        result.error = result.error or staged.error
        result.keys += staged.keys
        result.merged += staged.merged

    def _index_files(self, conn: sqlite3.Connection, files: list[tuple[str, Path]],
                     max_bytes: int, result: IndexUpdate) -> None:
        """Index ``files`` (kind, path) in turn, inside the caller's transaction, until
        ``max_bytes`` of lines are in."""
        for kind, path in files:
            if result.bytes >= max_bytes:
                result.pending = True
                return
            self._index_file(conn, kind, path, max_bytes - result.bytes, result)

    def _index_file(self, conn: sqlite3.Connection, kind: str, path: Path, budget: int,
                    result: IndexUpdate) -> None:
        """Index what ``path`` gained, up to ``budget`` bytes, inside the caller's
        transaction."""
        try:
            size = line_file.file_size(path)
        except (OSError, SessionFileCorruptError) as exc:
            result.error = result.error or str(exc)
            return
        if size is None:
            return
        row = conn.execute("SELECT id, indexed_to, named FROM files WHERE kind=? AND name=?",
                           (kind, path.name)).fetchone()
        if row is None:
            file_id = int(conn.execute(
                "INSERT INTO files(kind, name, pid) VALUES (?, ?, ?)",
                (kind, path.name, pid_of(path.name))).lastrowid or 0)
            indexed_to, named = 0, 0
        else:
            file_id, indexed_to, named = row
        if size < indexed_to:  # replaced or truncated: its old entries are wrong
            _forget_keys(conn, file_id)
            conn.execute("DELETE FROM lines WHERE file_id=?", (file_id,))
            memory_index.forget_file(conn, file_id)
            indexed_to, named = 0, 0
        if size == indexed_to:
            return
        data = _read(path, indexed_to, min(size - indexed_to, max(budget, 1)))
        if b"\n" not in data and len(data) < size - indexed_to:  # one long line
            data = _read(path, indexed_to, size - indexed_to)
        end = indexed_to + complete_end(data)
        line_rows: list[tuple[int, int, int, int | None, int | None]] = []
        key_rows: list[tuple[bytes, int, int]] = []
        store_events: list[memory_index.StoreEvent] = []
        for offset, raw in complete_lines(data, indexed_to):
            keys = line_keys(kind, raw)
            if kind == TRACES:
                t_min, t_max = span_line_times(raw)
                if STORE_KEY in keys:  # its store events, for memory --timeline
                    store_events.extend(memory_index.events_of_line(raw)[0])
            else:
                t_min = t_max = log_line_time(raw)
                if not named and names_node(raw):
                    named = 1
                    keys.add(CLOCK_KEY)
            line_rows.append((file_id, offset, len(raw), t_min, t_max))
            key_rows.extend((k, file_id, offset) for k in keys)
        conn.executemany("INSERT OR REPLACE INTO lines VALUES (?, ?, ?, ?, ?)", line_rows)
        conn.executemany("INSERT OR IGNORE INTO recent_keys VALUES (?, ?, ?)", key_rows)
        result.keys += len(key_rows)
        memory_index.record(conn, file_id, store_events)
        conn.execute("UPDATE files SET indexed_to=?, named=? WHERE id=?",
                     (end, named, file_id))
        result.lines += len(line_rows)
        result.bytes += end - indexed_to
        if end < size and len(data) >= budget:
            result.pending = True


def _forget_keys(conn: sqlite3.Connection, file_id: int) -> None:
    for table in KEY_TABLES:
        conn.execute(f"DELETE FROM {table} WHERE file_id=?", (file_id,))  # noqa: S608


def _count_recent(conn: sqlite3.Connection, added: int) -> int:
    """Count ``added`` keys into recent_keys (in the caller's transaction) and move a
    level's keys on to the next once it holds its limit (MERGE_ROWS, MID_ROWS). Returns
    how many moved (0 if none). Counts are of rows offered (a repeated key counts again):
    a move comes at most that much early."""
    moved = 0
    for table, limit, into in (("recent_keys", MERGE_ROWS, "mid_keys"),
                               ("mid_keys", MID_ROWS, "keys")):
        name = f"rows:{table}"
        row = conn.execute("SELECT value FROM meta WHERE name=?", (name,)).fetchone()
        rows = (int(row[0]) if row is not None else 0) + added
        added = 0
        if rows >= limit:
            # Read in its key order: the next table gets one sorted pass.
            conn.execute(f"INSERT OR IGNORE INTO {into} "  # noqa: S608
                         f"SELECT key, file_id, offset FROM {table}")
            conn.execute(f"DELETE FROM {table}")  # noqa: S608
            moved, added, rows = moved + rows, rows, 0
        conn.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (name, str(rows)))
        if not added:
            break
    return moved


def _check_schema(conn: sqlite3.Connection) -> None:
    row = conn.execute("SELECT value FROM meta WHERE name='schema'").fetchone()
    if row is None or row[0] != SCHEMA_VERSION:
        raise sqlite3.DatabaseError(f"schema {row[0] if row else None}, not {SCHEMA_VERSION}")


def _read(path: Path, offset: int, length: int) -> bytes:
    """Uncompressed bytes of a line file, plain or a compressed part; b"" for one that
    is gone or unreadable (a damaged part: its lines are missed, the rest reads)."""
    try:
        return line_file.read_range(path, offset, length)
    except (OSError, SessionFileCorruptError):
        return b""


# --------------------------------------------------------------------------- reader


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
            data = _read(path, start, size - start)
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
        for _, raw in complete_lines(_read(path, 0, 1 << 62), 0):
            clock = CLOCK_KEY in wanted and kind == LOGS and not named and names_node(raw)
            named = named or clock
            if clock or wanted & line_keys(kind, raw):
                yield path.name, raw


def catch_up(session_root: Path, *, timeout_s: float = 2.0) -> str:
    """Index what the agents have not yet (they run only when a core is idle), if this
    process may write the index: the work a reader would otherwise do scanning the
    tails, done once. Returns what went wrong ("" if nothing). Never raises."""
    path = index_path(session_root)
    if not os.access(path, os.W_OK) or not os.access(session_root, os.W_OK):
        return ""
    writer = IndexWriter(session_root, timeout_s=timeout_s)
    try:
        for _ in range(1 << 20):
            update = writer.update(max_bytes=64 << 20)
            if update.error:
                return update.error
            if not update.pending or not update.lines:
                return ""
    finally:
        writer.close()
    return ""


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
            _check_schema(conn)
        except sqlite3.OperationalError as exc:
            if "unable to open" not in str(exc) and "readonly" not in str(exc):
                raise
            conn.close()
            conn = sqlite3.connect(f"{path.as_uri()}?immutable=1", uri=True,
                                   isolation_level=None)
            _check_schema(conn)
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
