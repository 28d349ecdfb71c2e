"""One GCS table: recent entries hot in memory, finished ones flushed to the storage.

Entries are ``key -> bytes``.  A ``put(..., finished=True)`` (a task that reached a
final state, a dead actor, a finished job) makes the entry a flush candidate; the
:class:`~tracedray.core.gcs.storage.flush.Flusher` later moves it to the storage
and drops it from memory.  Reads look in memory first, then the storage, so a
flushed entry stays readable.

Two locks, so that reads and embedded-mode puts never wait on storage I/O:

``_lock``          guards the hot dict; held only for dict operations.
``_storage_lock``  serializes everything that writes the storage for this table
                   (write-through puts, deletes, the flush from snapshot to removal),
                   so a delete can never be undone by a flush that snapshotted the
                   entry before it, and write-through puts reach Redis and memory in
                   the same order.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass

from tracedray.core.gcs.storage.base import GcsStorage, validate_table_name
from tracedray.core.gcs.storage.policy import FlushPolicy, HotEntry, select_flush

# A hot slot: (value, monotonic time it was put finished or None while live).  A new
# tuple per put, so "is this still the slot I flushed?" is an identity test.
_Slot = tuple[bytes, float | None]

_COUNT_BATCH = 1000
# Entries one flush writes to the storage and drops from memory at a time.
FLUSH_BATCH = 2_000


@dataclass(frozen=True)
class TableFlushResult:
    entries: int
    bytes: int
    hot_after: int  # entries still in memory once the flush was done


@dataclass(frozen=True)
class TableStatistics:
    name: str
    write_through: bool
    hot_entries: int
    hot_bytes: int
    hot_hits: int  # get() answered from memory
    storage_reads: int  # get() that missed memory and asked the storage
    storage_hits: int
    flushed_entries: int  # moved out of memory since the table was created
    flushed_bytes: int
    rebuilds: int  # times the hot dict was rebuilt to give memory back
    live_flushed: int  # unfinished entries moved out (the policy's max_live_entries)


class TieredTable:
    """What the GCS holds per table.  Thread-safe."""

    def __init__(
        self,
        name: str,
        storage: GcsStorage,
        *,
        write_through: bool,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``clock`` stamps finished entries; the Flusher must pass ``now`` from the same clock."""
        self.name = validate_table_name(name)
        self.storage = storage
        self.write_through = write_through
        self._clock = clock
        self._hot: dict[str, _Slot] = {}
        self._hot_bytes = 0
        # Largest size the current dict reached: CPython dicts keep their peak table
        # after deletions, so we rebuild once the live size falls well below it.
        self._peak = 0
        self._lock = threading.Lock()
        self._storage_lock = threading.Lock()
        self._hot_hits = 0
        self._storage_reads = 0
        self._storage_hits = 0
        self._flushed_entries = 0
        self._flushed_bytes = 0
        self._rebuilds = 0
        self._live_flushed = 0

    # --- writes ------------------------------------------------------------------------

    def put(self, key: str, value: bytes, *, finished: bool) -> None:
        """Store ``value``; ``finished`` makes it a flush candidate from now on.

        Write-through (Redis): returns only once the storage has the entry.
        """
        slot: _Slot = (bytes(value), self._clock() if finished else None)
        if not self.write_through:
            self._set_hot(key, slot)
            return
        with self._storage_lock:
            self.storage.put(self.name, key, slot[0])
            self._set_hot(key, slot)

    def put_many(self, items: Mapping[str, bytes], *, finished: bool) -> None:
        """``put`` for a batch: one pipelined round trip to Redis instead of one per entry."""
        stamp = self._clock() if finished else None
        slots: dict[str, _Slot] = {key: (bytes(value), stamp) for key, value in items.items()}
        if not slots:
            return
        if not self.write_through:
            self._set_hot_many(slots)
            return
        with self._storage_lock:
            self.storage.put_many(self.name, {key: slot[0] for key, slot in slots.items()})
            self._set_hot_many(slots)

    def _set_hot(self, key: str, slot: _Slot) -> None:
        self._set_hot_many({key: slot})

    def _set_hot_many(self, slots: Mapping[str, _Slot]) -> None:
        with self._lock:
            for key, slot in slots.items():
                old = self._hot.get(key)
                self._hot[key] = slot
                self._hot_bytes += len(slot[0]) - (len(old[0]) if old is not None else 0)
            self._peak = max(self._peak, len(self._hot))

    def delete(self, keys: Iterable[str]) -> int:
        """Remove ``keys`` from memory and storage; return how many existed."""
        unique = list(dict.fromkeys(keys))
        if not unique:
            return 0
        with self._storage_lock:
            with self._lock:
                in_hot = [key for key in unique if key in self._hot]
            hot_set = set(in_hot)
            elsewhere = [key for key in unique if key not in hot_set]
            # Storage first: if it fails (Redis gone for good), memory still agrees with it.
            removed = self.storage.delete(self.name, elsewhere) if elsewhere else 0
            if in_hot:
                self.storage.delete(self.name, in_hot)
            with self._lock:
                for key in in_hot:
                    slot = self._hot.pop(key, None)
                    if slot is not None:
                        self._hot_bytes -= len(slot[0])
                self._maybe_rebuild()
        return removed + len(in_hot)

    # --- reads -------------------------------------------------------------------------

    def get(self, key: str) -> bytes | None:
        with self._lock:
            slot = self._hot.get(key)
            if slot is not None:
                self._hot_hits += 1
                return slot[0]
        value = self.storage.get(self.name, key)
        with self._lock:
            self._storage_reads += 1
            self._storage_hits += value is not None
        return value

    def get_many(self, keys: Iterable[str]) -> dict[str, bytes]:
        """The values of those ``keys`` that exist (memory winning): what ``get`` gives
        each, with one storage read for all the keys not in memory."""
        found: dict[str, bytes] = {}
        missing: list[str] = []
        with self._lock:
            for key in dict.fromkeys(keys):
                slot = self._hot.get(key)
                if slot is not None:
                    found[key] = slot[0]
                else:
                    missing.append(key)
            self._hot_hits += len(found)
        if missing:
            stored = self.storage.get_many(self.name, missing)
            with self._lock:
                self._storage_reads += len(missing)
                self._storage_hits += len(stored)
            found.update(stored)
        return found

    def scan(self, prefix: str = "") -> Iterator[tuple[str, bytes]]:
        """Every entry whose key starts with ``prefix``, in key order, memory winning ties.

        Not a snapshot: entries written during the scan may or may not appear.
        """
        with self._lock:
            hot = sorted((k, slot[0]) for k, slot in self._hot.items() if k.startswith(prefix))
        i = 0
        for key, value in self.storage.scan(self.name, prefix=prefix):
            while i < len(hot) and hot[i][0] < key:
                yield hot[i]
                i += 1
            if i < len(hot) and hot[i][0] == key:
                yield hot[i]  # memory is at least as new as the storage
                i += 1
            else:
                yield key, value
        yield from hot[i:]

    def live_items(self) -> list[tuple[str, bytes]]:
        """The entries in memory last put live (``finished=False``), unordered. Live
        entries stay in memory up to the policy's ``max_live_entries`` (``live_flushed``
        counts those that left), and a table made on a storage that held entries (a GCS
        restarted on Redis) may have more there: ``scan`` finds those."""
        with self._lock:
            return [(key, slot[0]) for key, slot in self._hot.items() if slot[1] is None]

    def __len__(self) -> int:
        """Distinct keys in memory ∪ storage (exact when no write runs concurrently)."""
        if self.write_through:
            return self.storage.count(self.name)
        with self._lock:
            hot_keys = list(self._hot)
        only_hot = 0
        for start in range(0, len(hot_keys), _COUNT_BATCH):
            chunk = hot_keys[start : start + _COUNT_BATCH]
            only_hot += len(chunk) - len(self.storage.get_many(self.name, chunk))
        return self.storage.count(self.name) + only_hot

    def hot_count(self) -> int:
        with self._lock:
            return len(self._hot)

    def persist_hot(self) -> int:
        """Write every entry held in memory to the storage (they stay in memory), so the
        storage holds the whole table; for a GCS that stops. Returns how many."""
        if self.write_through:
            return 0  # the storage has every entry already
        with self._storage_lock:
            with self._lock:
                items = {key: slot[0] for key, slot in self._hot.items()}
            self.storage.put_many(self.name, items)
        return len(items)

    # --- flushing ----------------------------------------------------------------------

    def flush(self, now: float, policy: FlushPolicy) -> TableFlushResult:
        """Move the entries ``select_flush`` picks to the storage and out of memory, in
        batches of ``FLUSH_BATCH`` (each one write, then dropped from memory: a big flush
        never holds a second copy of the whole hot set, nor the memory lock for long)."""
        with self._storage_lock:
            with self._lock:
                slots = list(self._hot.items())
            chosen = select_flush(
                [HotEntry(key, len(slot[0]), slot[1]) for key, slot in slots], now, policy
            )
            del slots
            moved = nbytes = 0
            for start in range(0, len(chosen), FLUSH_BATCH):
                batch_moved, batch_bytes = self._flush_batch(chosen[start:start + FLUSH_BATCH])
                moved += batch_moved
                nbytes += batch_bytes
            with self._lock:
                self._maybe_rebuild()
                hot_after = len(self._hot)
        return TableFlushResult(moved, nbytes, hot_after)

    def _flush_batch(self, keys: list[str]) -> tuple[int, int]:
        """Called with ``_storage_lock`` held."""
        with self._lock:
            # Re-read: a put since the snapshot wrote a newer value, which is what goes.
            moving = {key: slot for key in keys if (slot := self._hot.get(key)) is not None}
        if not self.write_through:  # write-through entries are in the storage already
            self.storage.put_many(self.name, {key: slot[0] for key, slot in moving.items()})
        moved = nbytes = 0
        with self._lock:
            for key, slot in moving.items():
                # Only drop the exact slot we wrote; a newer put stays hot.
                if self._hot.get(key) is slot:
                    del self._hot[key]
                    moved += 1
                    nbytes += len(slot[0])
                    if slot[1] is None:
                        self._live_flushed += 1
            self._hot_bytes -= nbytes
            self._flushed_entries += moved
            self._flushed_bytes += nbytes
        return moved, nbytes

    def live_flushed(self) -> int:
        """Live entries moved to the storage (``max_live_entries``) since this table was
        created: while non-zero, ``live_items`` does not see every live entry."""
        with self._lock:
            return self._live_flushed

    def _maybe_rebuild(self) -> None:
        # Called with self._lock held.  Copying into a fresh dict sized for the live
        # entries is what actually returns the slot table's memory (Figure 10b).
        if self._peak >= 1024 and len(self._hot) * 4 <= self._peak:
            self._hot = dict(self._hot)
            self._peak = len(self._hot)
            self._rebuilds += 1

    # --- introspection -----------------------------------------------------------------

    def statistics(self) -> TableStatistics:
        with self._lock:
            return TableStatistics(
                name=self.name,
                write_through=self.write_through,
                hot_entries=len(self._hot),
                hot_bytes=self._hot_bytes,
                hot_hits=self._hot_hits,
                storage_reads=self._storage_reads,
                storage_hits=self._storage_hits,
                flushed_entries=self._flushed_entries,
                flushed_bytes=self._flushed_bytes,
                rebuilds=self._rebuilds,
                live_flushed=self._live_flushed,
            )

    def __repr__(self) -> str:
        return (
            f"<TieredTable {self.name} hot={self.hot_count()} "
            f"write_through={self.write_through} storage={self.storage.description!r}>"
        )
