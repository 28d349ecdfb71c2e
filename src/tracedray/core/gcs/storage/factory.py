"""``open_storage``: from a ``--gcs-storage`` value to a ready backend."""

from __future__ import annotations

from pathlib import Path

from tracedray.core.gcs.storage.base import GcsStorage
from tracedray.core.gcs.storage.sqlite import DB_FILE_NAME, SqliteStorage
from tracedray.core.gcs.storage.url import parse_storage_url


def open_storage(url: str, *, session_dir: Path) -> GcsStorage:
    """Open the storage named by ``url``.

    ``"memory"``: the GCS keeps hot entries in memory (``TieredTable``) and this
    returns their cold tier, ``<session_dir>/gcs.sqlite3``.  ``redis://``,
    ``rediss://``, ``unix://``: every table lives in Redis.

    Raises ``ConfigError`` for a malformed URL and ``ClusterConnectionError`` when
    Redis does not answer, both naming the URL (password masked).
    """
    spec = parse_storage_url(url)
    if spec.kind == "memory":
        path = session_dir / DB_FILE_NAME
        return SqliteStorage(path, description=f"memory (cold tier sqlite:{path})")
    # Imported here so the embedded default never pays for the redis client import.
    from tracedray.core.gcs.storage.redis_backend import RedisStorage

    return RedisStorage(spec)


def is_write_through(storage: GcsStorage) -> bool:
    """Whether a ``TieredTable`` over ``storage`` must write every put through.

    Redis is the source of truth the restarted GCS recovers from, so nothing may
    live only in memory; the embedded cold tier only receives flushed entries.
    """
    return storage.statistics().backend == "redis"
