"""The session's trace index: which lines of ``traces/*.jsonl`` and ``logs/*.jsonl``
name a task, actor, object, trace or process, and when they happened.

Readers (``tracedray trace``, ``logs --task/--actor/--worker``; ``index_reader.py``)
read only the lines the index names, so their cost follows the answer, not the session.
The index is an SQLite database in WAL mode, ``<session>/trace_index.sqlite``, written
by each node's telemetry agent (core/raylet/telemetry_agent.py, nice 19 / SCHED_IDLE)
after each conversion round: the agent reads the files' new complete lines from where it
stopped (``files.indexed_to``) and records, per line, its keys and time range. Several
agents sharing a session folder (nodes on one machine) serialise on SQLite's write lock;
each file's progress is read and moved inside one transaction, so no line is indexed
twice.

What a line is keyed under is ``index_keys.py``'s. Lines a file gained after
the index's ``indexed_to`` (the agent is behind, or was killed) are scanned by the
reader itself, so an answer is never missing a line.

A writer that finds its index corrupt moves it aside and builds a new one.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from tracedray.exceptions import SessionFileCorruptError
from tracedray.telemetry import line_file, memory_index
from tracedray.telemetry.index_keys import CLOCK_KEY as CLOCK_KEY
from tracedray.telemetry.index_keys import KINDS as KINDS
from tracedray.telemetry.index_keys import LOGS as LOGS
from tracedray.telemetry.index_keys import NAME_FAMILIES as NAME_FAMILIES

# The keys' names are this module's too: its readers and writer speak them.
from tracedray.telemetry.index_keys import STORE_KEY
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
                check_schema(self._conn)
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
        data = read_range(path, indexed_to, min(size - indexed_to, max(budget, 1)))
        if b"\n" not in data and len(data) < size - indexed_to:  # one long line
            data = read_range(path, indexed_to, size - indexed_to)
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


def check_schema(conn: sqlite3.Connection) -> None:
    row = conn.execute("SELECT value FROM meta WHERE name='schema'").fetchone()
    if row is None or row[0] != SCHEMA_VERSION:
        raise sqlite3.DatabaseError(f"schema {row[0] if row else None}, not {SCHEMA_VERSION}")


def read_range(path: Path, offset: int, length: int) -> bytes:
    """Uncompressed bytes of a line file, plain or a compressed part; b"" for one that
    is gone or unreadable (a damaged part: its lines are missed, the rest reads)."""
    try:
        return line_file.read_range(path, offset, length)
    except (OSError, SessionFileCorruptError):
        return b""


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
