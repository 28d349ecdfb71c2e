"""The embedded cold tier: one SQLite file in the session directory.

Layout: a single ``entries(tbl, key, value)`` table with ``key`` stored as UTF-8
BLOB so ordering and prefix ranges compare bytes, exactly like Redis' lexical
ranges.  WAL with ``synchronous=NORMAL`` survives the GCS process dying (only an
OS crash can lose the last commits), which is all the cold tier must promise:
the hot tier in memory dies with the process anyway.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from tracedray.core.gcs.storage.base import (
    Counters,
    StorageStatistics,
    prefix_upper_bound,
    validate_table_name,
)
from tracedray.exceptions import RaySystemError

DB_FILE_NAME = "gcs.sqlite3"
_SCAN_BATCH = 500
# SQLite caps bound parameters per statement (32766 by default since 3.32); stay well below.
_PARAMS_PER_QUERY = 900
PAGE_SIZE = 16384

# A rowid table, its (tbl, key) key a separate index: a WITHOUT ROWID table keeps whole
# rows in its key's B-tree, which SQLite advises against for rows over ~1/20 of a page
# (task records are ~650 bytes): a flush of 2,000 records at random keys then cost 20-45
# µs of CPU per row against 5-13 here (issue 28). Files made with the former layout
# (WITHOUT ROWID) are read and written by the same statements.
_SCHEMA = """
CREATE TABLE IF NOT EXISTS entries (
    tbl TEXT NOT NULL,
    key BLOB NOT NULL,
    value BLOB NOT NULL,
    PRIMARY KEY (tbl, key)
)
"""


class SqliteStorage:
    """``GcsStorage`` in one SQLite file; one connection shared under a lock."""

    def __init__(self, path: Path, *, description: str | None = None) -> None:
        self.path = path
        self.description = description or f"sqlite:{path}"
        self._lock = threading.Lock()
        self._counters = Counters()
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            # check_same_thread=False: the GCS's RPC threads and the flusher share it,
            # serialized by self._lock.
            self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
            # A new file's pages (a no-op on one that has a table already): 16 KiB rather
            # than 4 hold 4x the index entries each, so a flush at random task ids
            # splits and touches fewer pages: 2,000-row flushes into 20-120k rows cost
            # 3.5-8.4 µs of CPU per row against 4.5-11.5 (issue 28).
            self._db.execute(f"PRAGMA page_size={PAGE_SIZE}")
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.execute(_SCHEMA)
        except (OSError, sqlite3.Error) as exc:
            raise RaySystemError(f"cannot open the GCS cold-tier database {path}: {exc}") from exc
        self._closed = False

    @classmethod
    def open_read_only(cls, path: Path) -> SqliteStorage:
        """The database a stopped or dead GCS left, opened for reading only (a GCS killed
        mid-write leaves its WAL, which is read too). A missing, truncated or corrupt
        file raises RaySystemError saying which."""
        if not path.is_file():
            raise RaySystemError(f"no GCS database at {path}")
        storage = cls.__new__(cls)
        storage.path = path
        storage.description = f"sqlite:{path} (read-only)"
        storage._lock = threading.Lock()
        storage._counters = Counters()
        storage._closed = False
        # A GCS that closed its database left no WAL: open it as immutable, which takes no
        # lock and creates no -wal/-shm files. A killed one left its WAL, read in mode=ro.
        wal = path.with_name(path.name + "-wal")
        query = "mode=ro" if wal.exists() else "immutable=1"
        try:
            storage._db = sqlite3.connect(f"{path.resolve().as_uri()}?{query}", uri=True,
                                          check_same_thread=False, isolation_level=None)
            # Reading the table checks the header and the schema: a damaged file fails here.
            storage._db.execute("SELECT COUNT(*) FROM entries").fetchone()
        except sqlite3.Error as exc:
            raise RaySystemError(f"cannot read the GCS database {path}: {exc} (is the file "
                                 "truncated or corrupt?)") from exc
        return storage

    def _run(self, what: str, sql: str, params: Sequence[object] = ()) -> list[tuple[Any, ...]]:
        try:
            with self._lock:
                self._check_open()
                return self._db.execute(sql, params).fetchall()
        except sqlite3.Error as exc:
            raise RaySystemError(f"GCS storage {self.description}: {what} failed: {exc}") from exc

    def _run_rowcount(self, what: str, sql: str, params: Sequence[object]) -> int:
        try:
            with self._lock:
                self._check_open()
                return self._db.execute(sql, params).rowcount
        except sqlite3.Error as exc:
            raise RaySystemError(f"GCS storage {self.description}: {what} failed: {exc}") from exc

    def _check_open(self) -> None:
        if self._closed:
            raise RaySystemError(f"GCS storage {self.description} is closed")

    def put(self, table: str, key: str, value: bytes) -> None:
        self.put_many(table, {key: value})

    def put_many(self, table: str, items: Mapping[str, bytes]) -> None:
        validate_table_name(table)
        if not items:
            return
        rows = [(table, key.encode(), bytes(value)) for key, value in items.items()]
        try:
            with self._lock:
                self._check_open()
                # One transaction per batch: a flush of 10k entries is one fsync, not 10k.
                self._db.execute("BEGIN")
                try:
                    self._db.executemany(
                        "INSERT OR REPLACE INTO entries (tbl, key, value) VALUES (?, ?, ?)", rows
                    )
                    self._db.execute("COMMIT")
                except BaseException:
                    self._db.execute("ROLLBACK")
                    raise
        except sqlite3.Error as exc:
            raise RaySystemError(f"GCS storage {self.description}: put failed: {exc}") from exc
        self._counters.wrote(len(rows), sum(len(row[2]) for row in rows))

    def get(self, table: str, key: str) -> bytes | None:
        return self.get_many(table, [key]).get(key)

    def get_many(self, table: str, keys: Sequence[str]) -> dict[str, bytes]:
        validate_table_name(table)
        found: dict[str, bytes] = {}
        unique = list(dict.fromkeys(keys))
        for start in range(0, len(unique), _PARAMS_PER_QUERY):
            chunk = [key.encode() for key in unique[start : start + _PARAMS_PER_QUERY]]
            marks = ",".join("?" * len(chunk))
            rows = self._run(
                "get",
                f"SELECT key, value FROM entries WHERE tbl = ? AND key IN ({marks})",
                [table, *chunk],
            )
            for raw_key, value in rows:
                found[bytes(raw_key).decode()] = bytes(value)
        self._counters.read(len(keys), len(found), sum(len(v) for v in found.values()))
        return found

    def delete(self, table: str, keys: Iterable[str]) -> int:
        validate_table_name(table)
        unique = list(dict.fromkeys(keys))
        removed = 0
        for start in range(0, len(unique), _PARAMS_PER_QUERY):
            chunk = [key.encode() for key in unique[start : start + _PARAMS_PER_QUERY]]
            marks = ",".join("?" * len(chunk))
            removed += self._run_rowcount(
                "delete", f"DELETE FROM entries WHERE tbl = ? AND key IN ({marks})", [table, *chunk]
            )
        self._counters.deleted(removed)
        return removed

    def scan(self, table: str, *, prefix: str = "") -> Iterator[tuple[str, bytes]]:
        validate_table_name(table)
        self._counters.scanned()
        low = prefix.encode()
        high = prefix_upper_bound(low)
        # Keyset pagination: each batch is its own short query, so the lock is never
        # held while the caller works through the rows.
        first = True
        while True:
            op = ">=" if first else ">"
            rows = self._run(
                "scan",
                f"SELECT key, value FROM entries WHERE tbl = ? AND key {op} ? AND key < ? "
                "ORDER BY key LIMIT ?",
                [table, low, high, _SCAN_BATCH],
            )
            for raw_key, value in rows:
                yield bytes(raw_key).decode(), bytes(value)
            if len(rows) < _SCAN_BATCH:
                return
            low = bytes(rows[-1][0])
            first = False

    def count(self, table: str) -> int:
        validate_table_name(table)
        rows = self._run("count", "SELECT COUNT(*) FROM entries WHERE tbl = ?", [table])
        return int(rows[0][0])

    def close(self) -> None:
        with self._lock:
            if not self._closed:
                self._closed = True
                self._db.close()

    def statistics(self) -> StorageStatistics:
        return self._counters.snapshot("sqlite", self.description)

    def __repr__(self) -> str:
        return f"<SqliteStorage {self.path} closed={self._closed}>"
