"""A process-local storage: dictionaries only.

Used by unit tests and as the reference the shared API suite holds the real
backends to.  It is not what ``--gcs-storage memory`` means (that is the hot tier
plus the SQLite cold tier); nothing here survives the process.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence

from tracedray.core.gcs.storage.base import Counters, StorageStatistics, validate_table_name

_SCAN_BATCH = 500


class InMemoryStorage:
    """``GcsStorage`` over plain dicts, one per table."""

    def __init__(self) -> None:
        self.description = "in-process dict"
        self._tables: dict[str, dict[str, bytes]] = {}
        self._lock = threading.Lock()
        self._counters = Counters()

    def _table(self, table: str) -> dict[str, bytes]:
        found = self._tables.get(table)
        if found is None:
            found = self._tables.setdefault(validate_table_name(table), {})
        return found

    def put(self, table: str, key: str, value: bytes) -> None:
        with self._lock:
            self._table(table)[key] = bytes(value)
        self._counters.wrote(1, len(value))

    def put_many(self, table: str, items: Mapping[str, bytes]) -> None:
        copied = {key: bytes(value) for key, value in items.items()}
        with self._lock:
            self._table(table).update(copied)
        self._counters.wrote(len(copied), sum(len(v) for v in copied.values()))

    def get(self, table: str, key: str) -> bytes | None:
        with self._lock:
            value = self._table(table).get(key)
        self._counters.read(1, value is not None, len(value) if value is not None else 0)
        return value

    def get_many(self, table: str, keys: Sequence[str]) -> dict[str, bytes]:
        with self._lock:
            rows = self._table(table)
            found = {key: rows[key] for key in keys if key in rows}
        self._counters.read(len(keys), len(found), sum(len(v) for v in found.values()))
        return found

    def delete(self, table: str, keys: Iterable[str]) -> int:
        removed = 0
        with self._lock:
            rows = self._table(table)
            for key in set(keys):
                if rows.pop(key, None) is not None:
                    removed += 1
        self._counters.deleted(removed)
        return removed

    def scan(self, table: str, *, prefix: str = "") -> Iterator[tuple[str, bytes]]:
        self._counters.scanned()
        with self._lock:
            keys = sorted(key for key in self._table(table) if key.startswith(prefix))
        # Read in batches under the lock so a concurrent writer is never blocked for long
        # and keys deleted meanwhile are skipped rather than raising.
        for start in range(0, len(keys), _SCAN_BATCH):
            with self._lock:
                rows = self._table(table)
                batch = [(k, rows[k]) for k in keys[start : start + _SCAN_BATCH] if k in rows]
            yield from batch

    def count(self, table: str) -> int:
        with self._lock:
            return len(self._table(table))

    def close(self) -> None:
        with self._lock:
            self._tables.clear()

    def statistics(self) -> StorageStatistics:
        return self._counters.snapshot("memory", self.description)

    def __repr__(self) -> str:
        with self._lock:
            sizes = {name: len(rows) for name, rows in self._tables.items()}
        return f"<InMemoryStorage tables={sizes}>"
