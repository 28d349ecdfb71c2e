"""Where the GCS tables live, and how finished entries leave memory.

::

    open_storage(url, session_dir=...)  -> GcsStorage   (sqlite cold tier | Redis)
    TieredTable(name, storage, write_through=...)       hot dict + storage, per table
    Flusher(tables, FlushPolicy(...))                   periodic flush, span + log line
    select_flush(entries, now, policy)                  the pure decision

Typical GCS wiring::

    storage = open_storage(url, session_dir=session.root)
    through = is_write_through(storage)
    tables = {name: TieredTable(name, storage, write_through=through) for name in TABLES}
    flusher = Flusher(tables, FlushPolicy.from_config(), enabled=config.GCS_FLUSH_ENABLED.get())
    flusher.start()
    ...
    flusher.stop(); storage.close()
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tracedray.core.gcs.storage.base import GcsStorage, StorageStatistics, validate_table_name
    from tracedray.core.gcs.storage.factory import is_write_through, open_storage
    from tracedray.core.gcs.storage.flush import Flusher, FlusherStatistics, FlushReport
    from tracedray.core.gcs.storage.memory import InMemoryStorage
    from tracedray.core.gcs.storage.policy import FlushPolicy, HotEntry, select_flush
    from tracedray.core.gcs.storage.sqlite import SqliteStorage
    from tracedray.core.gcs.storage.tiered import TableFlushResult, TableStatistics, TieredTable
    from tracedray.core.gcs.storage.url import StorageSpec, parse_storage_url

# Each name's submodule, imported on first use: a process that needs one part (the head
# raylet launching a GCS needs FlushPolicy) does not load the rest (sqlite, Redis).
_SUBMODULE = {
    "GcsStorage": "base", "StorageStatistics": "base", "validate_table_name": "base",
    "is_write_through": "factory", "open_storage": "factory",
    "Flusher": "flush", "FlusherStatistics": "flush", "FlushReport": "flush",
    "InMemoryStorage": "memory",
    "FlushPolicy": "policy", "HotEntry": "policy", "select_flush": "policy",
    "SqliteStorage": "sqlite",
    "TableFlushResult": "tiered", "TableStatistics": "tiered", "TieredTable": "tiered",
    "StorageSpec": "url", "parse_storage_url": "url",
}


def __getattr__(name: str) -> Any:
    submodule = _SUBMODULE.get(name)
    if submodule is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{submodule}"), name)
    globals()[name] = value
    return value


__all__ = [
    "FlushPolicy",
    "FlushReport",
    "Flusher",
    "FlusherStatistics",
    "GcsStorage",
    "HotEntry",
    "InMemoryStorage",
    "SqliteStorage",
    "StorageSpec",
    "StorageStatistics",
    "TableFlushResult",
    "TableStatistics",
    "TieredTable",
    "is_write_through",
    "open_storage",
    "parse_storage_url",
    "select_flush",
    "validate_table_name",
]
