"""Every GCS table in a real Redis server, through the ``redis`` client.

Key layout (one pair per table, so a table never collides with another and
``count`` is O(1)):

``tracedray:gcs:<table>``         hash        key -> value bytes
``tracedray:gcs:<table>:index``   sorted set  every key at score 0, for ordered prefix scans

Writes update both in one MULTI/EXEC, so a reader never sees a key in one and not
the other.  Scans page through the index with ZRANGEBYLEX (bounded work per call,
ordered, no duplicates even while Redis rehashes, unlike HSCAN) and fetch values
with HMGET, so a scan of a large table never blocks Redis for long.

Durability: an operation returns only after Redis has replied, i.e. applied it
(and, with ``appendonly yes``, written it to the AOF before replying).  When the
connection is lost the operation is retried with exponential backoff for up to
``TRACEDRAY_GCS_REDIS_RETRY_TIMEOUT_S``; every write is idempotent (HSET/ZADD of
the same value, HDEL/ZREM), so re-sending after a lost reply is safe.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, TypeVar, cast

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from tracedray import config
from tracedray.core.gcs.storage.base import (
    Counters,
    StorageStatistics,
    prefix_upper_bound,
    validate_table_name,
)
from tracedray.core.gcs.storage.url import StorageSpec
from tracedray.exceptions import ClusterConnectionError, RaySystemError
from tracedray.logs import get_logger

T = TypeVar("T")

KEY_PREFIX = "tracedray:gcs:"
_BATCH = 500  # entries per round trip for writes, reads, deletes and scan pages
_BACKOFF_INITIAL_S = 0.05

_log = get_logger(__name__)


def hash_key(table: str) -> str:
    return f"{KEY_PREFIX}{table}"


def index_key(table: str) -> str:
    return f"{KEY_PREFIX}{table}:index"


def next_backoff(delay: float, maximum: float) -> float:
    """Exponential backoff: double the pause, never beyond ``maximum``."""
    return min(delay * 2.0, maximum)


class RedisStorage:
    """``GcsStorage`` backed by Redis; thread-safe (the client's pool hands out connections)."""

    def __init__(
        self,
        spec: StorageSpec,
        *,
        retry_timeout_s: float | None = None,
        backoff_max_s: float | None = None,
        connect_timeout_s: float = 2.0,
        socket_timeout_s: float = 10.0,
    ) -> None:
        self.description = spec.display
        self._retry_timeout_s = (
            config.GCS_REDIS_RETRY_TIMEOUT_S.get() if retry_timeout_s is None else retry_timeout_s
        )
        self._backoff_max_s = (
            config.GCS_REDIS_BACKOFF_MAX_S.get() if backoff_max_s is None else backoff_max_s
        )
        self._counters = Counters()
        self._closing = threading.Event()
        self._state_lock = threading.Lock()
        self._reachable = True
        self._client = redis.Redis.from_url(
            spec.url,
            socket_connect_timeout=connect_timeout_s,
            socket_timeout=socket_timeout_s,
            # Our own loop owns retrying (bounded, logged, counted); the client's
            # built-in retry would hide connection loss from statistics and logs.
            retry=Retry(NoBackoff(), 0),
        )
        try:
            self._client.ping()
        except redis.RedisError as exc:
            self._client.close()
            raise ClusterConnectionError(
                f"cannot reach Redis at {spec.display} for GCS storage: {exc}. Is redis-server "
                "running there (e.g. `redis-server --port 6379 --appendonly yes`)? "
                "Or use --gcs-storage memory."
            ) from exc

    # --- retry machinery -------------------------------------------------------------

    def _call(self, what: str, operation: Callable[[], T]) -> T:
        """Run ``operation``, retrying on connection loss; translate redis errors."""
        deadline: float | None = None
        delay = _BACKOFF_INITIAL_S
        while True:
            try:
                result = operation()
            except (redis.ConnectionError, redis.TimeoutError) as exc:
                # BusyLoadingError (Redis replaying its AOF after a restart) is a
                # ConnectionError too: waiting it out is exactly right.
                now = time.monotonic()
                if deadline is None:
                    deadline = now + self._retry_timeout_s
                    self._connection_lost(what, exc)
                if now >= deadline or self._closing.is_set():
                    raise RaySystemError(
                        f"GCS storage {self.description}: {what} failed, Redis unreachable for "
                        f"{self._retry_timeout_s:.0f}s ({exc}); is redis-server still running?"
                    ) from exc
                self._counters.retried()
                self._closing.wait(min(delay, deadline - now))
                delay = next_backoff(delay, self._backoff_max_s)
                continue
            except redis.RedisError as exc:
                raise RaySystemError(
                    f"GCS storage {self.description}: {what} failed: {exc}"
                ) from exc
            if deadline is not None:
                self._connection_back(what)
            return result

    def _connection_lost(self, what: str, exc: Exception) -> None:
        with self._state_lock:
            was_reachable, self._reachable = self._reachable, False
        if was_reachable:
            self._counters.lost_connection()
            _log.warning(
                "gcs.storage.redis_unreachable",
                storage=self.description,
                operation=what,
                error=str(exc),
                retry_timeout_s=self._retry_timeout_s,
            )

    def _connection_back(self, what: str) -> None:
        with self._state_lock:
            was_reachable, self._reachable = self._reachable, True
        if not was_reachable:
            _log.info("gcs.storage.redis_reconnected", storage=self.description, operation=what)

    def _hmget(self, table: str, keys: Sequence[str] | Sequence[bytes]) -> list[bytes | None]:
        # decode_responses is off, so the client hands back bytes (its stubs say str too).
        return cast(
            "list[bytes | None]",
            self._call("get", lambda: self._client.hmget(hash_key(table), list(keys))),
        )

    def _transaction(self, what: str, fill: Callable[[Any], None]) -> list[Any]:
        def run() -> list[Any]:
            pipe = self._client.pipeline(transaction=True)
            fill(pipe)
            return list(pipe.execute())

        return self._call(what, run)

    # --- GcsStorage ------------------------------------------------------------------

    def put(self, table: str, key: str, value: bytes) -> None:
        self.put_many(table, {key: value})

    def put_many(self, table: str, items: Mapping[str, bytes]) -> None:
        validate_table_name(table)
        pairs = list(items.items())
        for start in range(0, len(pairs), _BATCH):
            chunk = dict(pairs[start : start + _BATCH])

            def fill(pipe: Any, chunk: dict[str, bytes] = chunk) -> None:
                pipe.hset(hash_key(table), mapping=chunk)
                pipe.zadd(index_key(table), dict.fromkeys(chunk, 0))

            self._transaction("put", fill)
            self._counters.wrote(len(chunk), sum(len(v) for v in chunk.values()))

    def get(self, table: str, key: str) -> bytes | None:
        validate_table_name(table)
        value = cast(
            "bytes | None", self._call("get", lambda: self._client.hget(hash_key(table), key))
        )
        self._counters.read(1, value is not None, len(value) if value is not None else 0)
        return value

    def get_many(self, table: str, keys: Sequence[str]) -> dict[str, bytes]:
        validate_table_name(table)
        unique = list(dict.fromkeys(keys))
        found: dict[str, bytes] = {}
        for start in range(0, len(unique), _BATCH):
            chunk = unique[start : start + _BATCH]
            values = self._hmget(table, chunk)
            found.update((k, v) for k, v in zip(chunk, values, strict=True) if v is not None)
        self._counters.read(len(keys), len(found), sum(len(v) for v in found.values()))
        return found

    def delete(self, table: str, keys: Iterable[str]) -> int:
        validate_table_name(table)
        unique = list(dict.fromkeys(keys))
        removed = 0
        for start in range(0, len(unique), _BATCH):
            chunk = unique[start : start + _BATCH]

            def fill(pipe: Any, chunk: list[str] = chunk) -> None:
                pipe.hdel(hash_key(table), *chunk)
                pipe.zrem(index_key(table), *chunk)

            # A retry after a lost reply may under-count (the first attempt already
            # deleted); the data is right either way.
            removed += int(self._transaction("delete", fill)[0])
        self._counters.deleted(removed)
        return removed

    def scan(self, table: str, *, prefix: str = "") -> Iterator[tuple[str, bytes]]:
        validate_table_name(table)
        self._counters.scanned()
        raw_prefix = prefix.encode()
        low = b"[" + raw_prefix if prefix else b"-"
        high = b"(" + prefix_upper_bound(raw_prefix)
        while True:
            keys = self._index_page(table, low, high)
            if not keys:
                return
            values = self._hmget(table, keys)
            for raw_key, value in zip(keys, values, strict=True):
                if value is not None:  # deleted between the two calls
                    yield raw_key.decode(), value
            if len(keys) < _BATCH:
                return
            low = b"(" + keys[-1]

    def _index_page(self, table: str, low: bytes, high: bytes) -> list[bytes]:
        def page() -> list[bytes]:
            return cast(
                "list[bytes]",
                self._client.zrangebylex(index_key(table), low, high, start=0, num=_BATCH),
            )

        return self._call("scan", page)

    def count(self, table: str) -> int:
        validate_table_name(table)
        return int(self._call("count", lambda: self._client.hlen(hash_key(table))))

    def close(self) -> None:
        self._closing.set()
        self._client.close()

    def statistics(self) -> StorageStatistics:
        return self._counters.snapshot("redis", self.description)

    def __repr__(self) -> str:
        return f"<RedisStorage {self.description} reachable={self._reachable}>"
