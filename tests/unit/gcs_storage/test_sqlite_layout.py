"""The SQLite cold tier's table layout: a rowid table (cheap inserts of ~650-byte task
records), and files written with the former WITHOUT ROWID layout still served."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from tracedray.core.gcs.storage import SqliteStorage
from tracedray.core.gcs.storage.sqlite import PAGE_SIZE


def _create_sql(path: Path) -> str:
    with sqlite3.connect(path) as db:
        row = db.execute("SELECT sql FROM sqlite_master WHERE name = 'entries'").fetchone()
    db.close()
    return str(row[0])


def test_a_new_file_keeps_entries_in_a_rowid_table_of_large_pages(tmp_path: Path) -> None:
    storage = SqliteStorage(tmp_path / "gcs.sqlite3")
    storage.put("tasks", "t1", b"x" * 650)
    storage.close()
    assert "WITHOUT ROWID" not in _create_sql(tmp_path / "gcs.sqlite3").upper()
    with sqlite3.connect(tmp_path / "gcs.sqlite3") as db:
        assert db.execute("PRAGMA page_size").fetchone()[0] == PAGE_SIZE
    db.close()


def test_a_file_of_the_former_layout_is_read_and_written(tmp_path: Path) -> None:
    path = tmp_path / "gcs.sqlite3"
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE entries (tbl TEXT NOT NULL, key BLOB NOT NULL, "
                   "value BLOB NOT NULL, PRIMARY KEY (tbl, key)) WITHOUT ROWID")
        db.execute("INSERT INTO entries VALUES ('tasks', ?, ?)", (b"old", b"before"))
    db.close()
    storage = SqliteStorage(path)
    storage.put_many("tasks", {"old": b"after", "new": b"added"})
    assert storage.get_many("tasks", ["old", "new"]) == {"old": b"after", "new": b"added"}
    assert [key for key, _ in storage.scan("tasks")] == ["new", "old"]
    assert storage.count("tasks") == 2
    storage.close()
    assert "WITHOUT ROWID" in _create_sql(path).upper()
    with sqlite3.connect(path) as db:  # its pages stay as they were
        assert db.execute("PRAGMA page_size").fetchone()[0] == 4096
    db.close()
    reader = SqliteStorage.open_read_only(path)
    assert reader.get("tasks", "old") == b"after"
    reader.close()
