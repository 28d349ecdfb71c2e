"""The seam between the GCS and where its tables live.

A :class:`GcsStorage` maps ``(table, key) -> bytes``.  Values are opaque here
(serialized protobuf is the GCS's business); keys are ``str`` and every backend
scans them in the same order: by their UTF-8 bytes, which is also code-point
order, so a shared API suite can compare backends exactly.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from tracedray.exceptions import ConfigError

# Table names end up inside Redis key names and SQL parameters; a small alphabet
# keeps both unambiguous (no ':' to confuse the Redis key layout).
_TABLE_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,63}$")


def validate_table_name(table: str) -> str:
    """Return ``table`` if it is a legal table name, else raise :class:`ConfigError`."""
    if not _TABLE_NAME.match(table):
        raise ConfigError(
            f"invalid GCS table name {table!r}: use lowercase letters, digits and '_' "
            "(at most 64 characters, not starting with a digit)"
        )
    return table


def prefix_upper_bound(prefix: bytes) -> bytes:
    """The smallest byte string greater than every string starting with ``prefix``.

    0xFF never occurs in UTF-8, so ``prefix + b"\\xff"`` is an exact exclusive bound
    for UTF-8 keys; both SQLite (BLOB keys) and Redis (ZRANGEBYLEX) compare bytes.
    """
    return prefix + b"\xff"


@dataclass(frozen=True)
class StorageStatistics:
    """A snapshot of one storage backend's counters since it was opened."""

    backend: str  # "memory" | "sqlite" | "redis"
    description: str
    puts: int  # entries written (put counts 1, put_many counts its items)
    gets: int  # keys looked up (get counts 1, get_many counts its keys)
    get_hits: int
    deletes: int  # entries actually removed
    scans: int
    bytes_written: int
    bytes_read: int
    retries: int = 0  # operations retried after a lost connection (Redis)
    connection_losses: int = 0  # times the backend went from reachable to unreachable


@runtime_checkable
class GcsStorage(Protocol):
    """Where the GCS tables live: ``key -> bytes`` per table, safe to share between threads."""

    description: str

    def put(self, table: str, key: str, value: bytes) -> None: ...

    def put_many(self, table: str, items: Mapping[str, bytes]) -> None: ...

    def get(self, table: str, key: str) -> bytes | None: ...

    def get_many(self, table: str, keys: Sequence[str]) -> dict[str, bytes]: ...

    def delete(self, table: str, keys: Iterable[str]) -> int: ...

    def scan(self, table: str, *, prefix: str = "") -> Iterator[tuple[str, bytes]]: ...

    def count(self, table: str) -> int: ...

    def close(self) -> None: ...

    def statistics(self) -> StorageStatistics: ...


class Counters:
    """Thread-safe operation counters shared by the backends' ``statistics()``."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.puts = 0
        self.gets = 0
        self.get_hits = 0
        self.deletes = 0
        self.scans = 0
        self.bytes_written = 0
        self.bytes_read = 0
        self.retries = 0
        self.connection_losses = 0

    def wrote(self, entries: int, nbytes: int) -> None:
        with self._lock:
            self.puts += entries
            self.bytes_written += nbytes

    def read(self, looked_up: int, hits: int, nbytes: int) -> None:
        with self._lock:
            self.gets += looked_up
            self.get_hits += hits
            self.bytes_read += nbytes

    def deleted(self, entries: int) -> None:
        with self._lock:
            self.deletes += entries

    def scanned(self) -> None:
        with self._lock:
            self.scans += 1

    def retried(self) -> None:
        with self._lock:
            self.retries += 1

    def lost_connection(self) -> None:
        with self._lock:
            self.connection_losses += 1

    def snapshot(self, backend: str, description: str) -> StorageStatistics:
        with self._lock:
            return StorageStatistics(
                backend=backend,
                description=description,
                puts=self.puts,
                gets=self.gets,
                get_hits=self.get_hits,
                deletes=self.deletes,
                scans=self.scans,
                bytes_written=self.bytes_written,
                bytes_read=self.bytes_read,
                retries=self.retries,
                connection_losses=self.connection_losses,
            )
