"""The per-node shared-memory object store.

One file per object, ``<shm_dir>/<name_prefix>-<object_id_hex>``:

* core workers write and read the files themselves (:mod:`.client`);
* the raylet's :class:`ObjectStore` accounts them against capacity, spills,
  restores, evicts and frees them (:mod:`.store`), following the pure decisions
  of :mod:`.policy`; under its one lock it keeps what it holds in :mod:`.holdings`,
  counts in :mod:`.accounting` and remembers early frees and refused seals in
  :mod:`.remembered`, moves files with :mod:`.moves`, writes pulled copies with
  :mod:`.receiving`, keeps freed files for reuse in :mod:`.pool` and deletes big
  files off its lock with :mod:`.deleter`;
* :mod:`.layout` is the byte layout of one object (pickle stream + 64-byte
  aligned out-of-band buffers).
"""

from __future__ import annotations

from tracedray.core.object_store.client import map_object, read_spilled, write_object
from tracedray.core.object_store.layout import pack_into, packed_size, unpack
from tracedray.core.object_store.store import (
    ObjectLocation,
    ObjectStore,
    ObjectStoreStatistics,
    StoredObjectInfo,
    remove_orphans,
)

__all__ = [
    "ObjectLocation",
    "ObjectStore",
    "ObjectStoreStatistics",
    "StoredObjectInfo",
    "map_object",
    "pack_into",
    "packed_size",
    "read_spilled",
    "remove_orphans",
    "unpack",
    "write_object",
]
