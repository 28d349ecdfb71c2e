"""TieredTable over every backend: Redis write-through, the others flushed into."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

import pytest

from tracedray.core.gcs.storage import (
    FlushPolicy,
    GcsStorage,
    InMemoryStorage,
    TieredTable,
    is_write_through,
)
from tracedray.core.gcs.storage.tiered import FLUSH_BATCH


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(params=["memory", "sqlite", "redis"])
def table(
    request: pytest.FixtureRequest, make_storage: Callable[[str], GcsStorage]
) -> tuple[TieredTable, FakeClock]:
    storage = make_storage(request.param)
    clock = FakeClock()
    through = is_write_through(storage)
    return TieredTable("tasks", storage, write_through=through, clock=clock), clock


POLICY = FlushPolicy(min_age_s=2.0, max_hot_entries=1000)


def test_finished_entries_move_to_storage_and_stay_readable(
    table: tuple[TieredTable, FakeClock],
) -> None:
    tiered, clock = table
    tiered.put("live", b"running", finished=False)
    for i in range(50):
        tiered.put(f"t{i:02d}", f"done{i}".encode(), finished=True)
    assert tiered.flush(clock.now, POLICY).entries == 0  # too young yet
    clock.now += 2.0
    result = tiered.flush(clock.now, POLICY)
    assert (result.entries, result.bytes) == (50, sum(len(f"done{i}") for i in range(50)))
    assert tiered.hot_count() == 1  # only the live entry
    assert tiered.get("t07") == b"done7"
    assert tiered.storage.get("tasks", "t07") == b"done7"
    assert tiered.get("live") == b"running"
    assert len(tiered) == 51
    stats = tiered.statistics()
    assert (stats.flushed_entries, stats.hot_entries, stats.hot_bytes) == (50, 1, len(b"running"))
    assert stats.storage_hits == 1 and stats.hot_hits == 1


def test_live_entries_stay_hot_until_finished(table: tuple[TieredTable, FakeClock]) -> None:
    tiered, clock = table
    tiered.put("t", b"pending", finished=False)
    clock.now += 100
    assert tiered.flush(clock.now, POLICY).entries == 0
    tiered.put("t", b"finished", finished=True)
    clock.now += 2
    assert tiered.flush(clock.now, POLICY).entries == 1
    assert tiered.get("t") == b"finished"


def test_a_put_after_a_flush_wins_over_the_flushed_copy(
    table: tuple[TieredTable, FakeClock],
) -> None:
    tiered, clock = table
    tiered.put("t", b"v1", finished=True)
    clock.now += 5
    tiered.flush(clock.now, POLICY)
    tiered.put("t", b"v2", finished=False)  # e.g. a retried task
    assert tiered.get("t") == b"v2"
    assert list(tiered.scan()) == [("t", b"v2")]
    assert len(tiered) == 1


def test_scan_merges_memory_and_storage_in_key_order(table: tuple[TieredTable, FakeClock]) -> None:
    tiered, clock = table
    for key in ("b", "d", "f"):
        tiered.put(key, key.encode(), finished=True)
    clock.now += 5
    tiered.flush(clock.now, POLICY)
    for key in ("a", "c", "e", "g"):
        tiered.put(key, key.encode(), finished=False)
    tiered.put("d", b"D", finished=False)
    assert list(tiered.scan()) == [
        ("a", b"a"), ("b", b"b"), ("c", b"c"), ("d", b"D"), ("e", b"e"), ("f", b"f"), ("g", b"g")
    ]
    assert [k for k, _ in tiered.scan(prefix="d")] == ["d"]
    assert len(tiered) == 7


def _one_flushed_one_hot(tiered: TieredTable, clock: FakeClock) -> None:
    """"flushed" (b"x") in storage only, "hot" (b"y") in memory only."""
    tiered.put("flushed", b"x", finished=True)
    clock.now += 5
    tiered.flush(clock.now, POLICY)
    tiered.put("hot", b"y", finished=False)


def test_delete_removes_from_memory_and_storage(table: tuple[TieredTable, FakeClock]) -> None:
    tiered, clock = table
    _one_flushed_one_hot(tiered, clock)
    tiered.put("both", b"old", finished=True)
    clock.now += 5
    tiered.flush(clock.now, POLICY)
    tiered.put("both", b"new", finished=False)
    assert tiered.delete(["flushed", "hot", "both", "never"]) == 3
    for key in ("flushed", "hot", "both"):
        assert tiered.get(key) is None
        assert tiered.storage.get("tasks", key) is None
    assert len(tiered) == 0 and list(tiered.scan()) == []


def test_cap_flushes_young_entries(table: tuple[TieredTable, FakeClock]) -> None:
    tiered, clock = table
    for i in range(30):
        tiered.put(f"k{i:02d}", b"x", finished=True)
        clock.now += 0.001
    policy = FlushPolicy(min_age_s=60.0, max_hot_entries=10)
    assert tiered.flush(clock.now, policy).entries == 20
    assert sorted(k for k, _ in tiered.scan()) == [f"k{i:02d}" for i in range(30)]
    assert tiered.hot_count() == 10
    assert tiered.get("k29") == b"x" and tiered.statistics().hot_hits == 1  # newest stayed hot


def test_write_through_put_reaches_storage_before_returning(tmp_path: Path) -> None:
    storage = InMemoryStorage()
    tiered = TieredTable("actors", storage, write_through=True)
    tiered.put("a", b"alive", finished=False)
    assert storage.get("actors", "a") == b"alive"
    embedded = TieredTable("actors", InMemoryStorage(), write_through=False)
    embedded.put("a", b"alive", finished=False)
    assert embedded.storage.get("actors", "a") is None


class RacingStorage(InMemoryStorage):
    """Runs a callback in the middle of the flush's write, like a concurrent RPC would."""

    def __init__(self) -> None:
        super().__init__()
        self.during_put_many: list[object] = []

    def put_many(self, table: str, items: Mapping[str, bytes]) -> None:
        super().put_many(table, items)
        for callback in self.during_put_many:
            callback()  # type: ignore[operator]
        self.during_put_many.clear()


def test_a_put_racing_a_flush_is_not_lost() -> None:
    storage = RacingStorage()
    clock = FakeClock()
    tiered = TieredTable("tasks", storage, write_through=False, clock=clock)
    tiered.put("t", b"finished-v1", finished=True)
    clock.now += 5
    storage.during_put_many.append(lambda: tiered.put("t", b"updated-v2", finished=False))
    assert tiered.flush(clock.now, POLICY).entries == 0  # the newer slot stayed hot
    assert tiered.get("t") == b"updated-v2"
    assert tiered.hot_count() == 1


def test_hot_dict_is_rebuilt_after_a_large_flush() -> None:
    clock = FakeClock()
    tiered = TieredTable("tasks", InMemoryStorage(), write_through=False, clock=clock)
    for i in range(5000):
        tiered.put(f"k{i}", b"x", finished=True)
    clock.now += 5
    tiered.flush(clock.now, POLICY)
    assert tiered.statistics().rebuilds == 1
    assert tiered.hot_count() == 0


class FailingStorage(InMemoryStorage):
    def put_many(self, table: str, items: Mapping[str, bytes]) -> None:
        raise OSError("disk full")

    def delete(self, table: str, keys: Iterable[str]) -> int:
        raise OSError("disk full")


class CountingStorage(InMemoryStorage):
    def __init__(self) -> None:
        super().__init__()
        self.batches: list[int] = []

    def put_many(self, table: str, items: Mapping[str, bytes]) -> None:
        self.batches.append(len(items))
        super().put_many(table, items)


def test_a_burst_of_live_entries_leaves_memory_in_batches_and_stays_readable() -> None:
    storage = CountingStorage()
    clock = FakeClock()
    tiered = TieredTable("tasks", storage, write_through=False, clock=clock)
    tiered.put_many({f"k{i:05d}": b"pending" for i in range(5000)}, finished=False)
    policy = FlushPolicy(min_age_s=2.0, max_hot_entries=100_000, max_live_entries=1000)
    result = tiered.flush(clock.now, policy)
    assert result.entries == 4000 and result.hot_after == 1000
    assert storage.batches == [FLUSH_BATCH, FLUSH_BATCH]
    assert tiered.live_flushed() == 4000
    # The oldest went (a live entry's next update reads it back from the storage);
    # live_items sees only those left in memory, scan sees them all.
    assert tiered.get("k00000") == b"pending" and tiered.storage.get("tasks", "k00000")
    assert tiered.storage.get("tasks", "k04999") is None
    assert len(tiered.live_items()) == 1000 and len(list(tiered.scan())) == 5000
    tiered.put("k00000", b"finished", finished=True)
    assert tiered.get("k00000") == b"finished"


def test_a_failed_flush_keeps_entries_hot() -> None:
    clock = FakeClock()
    tiered = TieredTable("tasks", FailingStorage(), write_through=False, clock=clock)
    tiered.put("t", b"x", finished=True)
    clock.now += 5
    with pytest.raises(OSError):
        tiered.flush(clock.now, POLICY)
    assert tiered.get("t") == b"x" and tiered.hot_count() == 1




def test_put_many_batches_like_put(table: tuple[TieredTable, FakeClock]) -> None:
    tiered, clock = table
    tiered.put_many({f"k{i}": b"v" for i in range(700)}, finished=True)
    tiered.put_many({}, finished=False)
    assert tiered.hot_count() == 700
    if tiered.write_through:
        assert tiered.storage.count("tasks") == 700
    clock.now += 5
    assert tiered.flush(clock.now, POLICY).entries == 700
    assert tiered.get("k699") == b"v" and len(tiered) == 700


def test_get_many_reads_memory_then_storage_once(table: tuple[TieredTable, FakeClock]) -> None:
    tiered, clock = table
    _one_flushed_one_hot(tiered, clock)
    before = tiered.statistics()
    found = tiered.get_many(["hot", "flushed", "absent", "hot", "absent"])
    after = tiered.statistics()
    assert found == {"hot": b"y", "flushed": b"x"}
    assert after.hot_hits - before.hot_hits == 1
    assert after.storage_hits - before.storage_hits == 1
    assert found == {k: v for k in ("hot", "flushed", "absent")
                     if (v := tiered.get(k)) is not None}
