"""A GCS that stops leaves its whole tables in its storage, for post-mortem readers."""

from __future__ import annotations

from pathlib import Path

from tracedray.core.gcs.storage import SqliteStorage, TieredTable


def test_persist_hot_writes_live_and_finished_entries_and_keeps_them(tmp_path: Path) -> None:
    storage = SqliteStorage(tmp_path / "gcs.sqlite3")
    table = TieredTable("tasks", storage, write_through=False)
    table.put("running", b"r", finished=False)  # live: never flushed
    table.put("done", b"d", finished=True)  # finished, but younger than any flush
    assert list(storage.scan("tasks")) == []
    assert table.persist_hot() == 2
    assert list(storage.scan("tasks")) == [("done", b"d"), ("running", b"r")]
    assert table.hot_count() == 2 and table.get("running") == b"r"  # still served
    storage.close()
    reader = SqliteStorage.open_read_only(tmp_path / "gcs.sqlite3")
    assert dict(reader.scan("tasks")) == {"done": b"d", "running": b"r"}
    reader.close()


def test_a_write_through_table_has_nothing_to_persist(tmp_path: Path) -> None:
    storage = SqliteStorage(tmp_path / "gcs.sqlite3")
    table = TieredTable("jobs", storage, write_through=True)
    table.put("j", b"x", finished=False)
    assert table.persist_hot() == 0 and list(storage.scan("jobs")) == [("j", b"x")]
    storage.close()
