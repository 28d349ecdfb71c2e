"""The one API suite every GcsStorage backend passes (dicts, SQLite, a real Redis)."""

from __future__ import annotations

import threading

import pytest

from tracedray.core.gcs.storage import GcsStorage
from tracedray.exceptions import ConfigError


def test_put_get_overwrite_and_missing(storage: GcsStorage) -> None:
    assert storage.get("tasks", "t1") is None
    storage.put("tasks", "t1", b"running")
    assert storage.get("tasks", "t1") == b"running"
    storage.put("tasks", "t1", b"finished")
    assert storage.get("tasks", "t1") == b"finished"
    assert storage.count("tasks") == 1


def test_values_are_arbitrary_bytes(storage: GcsStorage) -> None:
    every_byte = bytes(range(256))
    storage.put_many("objects", {"all": every_byte, "empty": b""})
    assert storage.get("objects", "all") == every_byte
    assert storage.get("objects", "empty") == b""


def test_put_many_and_get_many(storage: GcsStorage) -> None:
    items = {f"k{i:04d}": f"v{i}".encode() for i in range(1200)}  # spans several batches
    storage.put_many("tasks", items)
    assert storage.count("tasks") == 1200
    wanted = ["k0000", "missing", "k1199", "k0000"]
    assert storage.get_many("tasks", wanted) == {"k0000": b"v0", "k1199": b"v1199"}
    assert storage.get_many("tasks", []) == {}
    storage.put_many("tasks", {})
    assert storage.count("tasks") == 1200


def test_tables_are_isolated(storage: GcsStorage) -> None:
    storage.put("actors", "same", b"actor")
    storage.put("jobs", "same", b"job")
    assert storage.get("actors", "same") == b"actor"
    assert storage.get("jobs", "same") == b"job"
    assert storage.delete("actors", ["same"]) == 1
    assert storage.get("jobs", "same") == b"job"
    assert list(storage.scan("actors")) == []


def test_delete_counts_only_existing_keys(storage: GcsStorage) -> None:
    storage.put_many("kv", {"a": b"1", "b": b"2", "c": b"3"})
    assert storage.delete("kv", ["a", "nope", "a", "c"]) == 2
    assert storage.get("kv", "a") is None
    assert [k for k, _ in storage.scan("kv")] == ["b"]
    assert storage.delete("kv", []) == 0
    assert storage.count("kv") == 1


def test_scan_is_ordered_by_key_and_filters_by_prefix(storage: GcsStorage) -> None:
    keys = ["b", "a", "ab", "abc", "a\u00e9", "a\U0001f600", "ac", "\u00e9t\u00e9", ""]
    storage.put_many("kv", {k: k.encode() or b"root" for k in keys})
    assert [k for k, _ in storage.scan("kv")] == sorted(keys)
    assert [k for k, _ in storage.scan("kv", prefix="ab")] == ["ab", "abc"]
    assert [k for k, _ in storage.scan("kv", prefix="a")] == sorted(
        k for k in keys if k.startswith("a")
    )
    assert list(storage.scan("kv", prefix="zz")) == []
    assert dict(storage.scan("kv"))["abc"] == b"abc"


def test_scan_pages_through_large_tables_without_duplicates(storage: GcsStorage) -> None:
    items = {f"task:{i:05d}": str(i).encode() for i in range(2345)}
    items.update({f"node:{i}": b"n" for i in range(10)})
    storage.put_many("tasks", items)
    scanned = list(storage.scan("tasks", prefix="task:"))
    assert len(scanned) == 2345
    assert [k for k, _ in scanned] == sorted(k for k in items if k.startswith("task:"))
    assert all(items[k] == v for k, v in scanned)


def test_scan_tolerates_deletes_while_iterating(storage: GcsStorage) -> None:
    storage.put_many("tasks", {f"k{i:04d}": b"x" for i in range(1500)})
    seen = []
    for key, _ in storage.scan("tasks"):
        seen.append(key)
        if key == "k0000":
            storage.delete("tasks", [f"k{i:04d}" for i in range(1000, 1500)])
    assert seen == [f"k{i:04d}" for i in range(1000)]


def test_bad_table_names_are_config_errors(storage: GcsStorage) -> None:
    for bad in ("", "Tasks", "a:b", "1x", "x" * 65):
        with pytest.raises(ConfigError, match="table name"):
            storage.put(bad, "k", b"v")


def test_concurrent_writers(storage: GcsStorage) -> None:
    def write(worker: int) -> None:
        for i in range(200):
            storage.put("tasks", f"w{worker}:{i}", b"x")

    threads = [threading.Thread(target=write, args=(w,)) for w in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert storage.count("tasks") == 800


def test_statistics_count_operations(storage: GcsStorage) -> None:
    storage.put("kv", "a", b"123")
    storage.put_many("kv", {"b": b"4", "c": b"56"})
    storage.get("kv", "a")
    storage.get_many("kv", ["b", "zz"])
    storage.delete("kv", ["c"])
    list(storage.scan("kv"))
    stats = storage.statistics()
    assert (stats.puts, stats.bytes_written) == (3, 6)
    assert (stats.gets, stats.get_hits, stats.bytes_read) == (3, 2, 4)
    assert (stats.deletes, stats.scans) == (1, 1)
    assert stats.description == storage.description
    assert stats.backend in ("memory", "sqlite", "redis")
