from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from tracedray.core.gcs.storage import (
    Flusher,
    FlushPolicy,
    InMemoryStorage,
    SqliteStorage,
    TieredTable,
)
from tracedray.telemetry.append_file import read_data  # live files end in NULs


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_flush_now_reports_per_table_and_totals(tmp_path: Path) -> None:
    clock = FakeClock()
    storage = SqliteStorage(tmp_path / "gcs.sqlite3")
    tables = {name: TieredTable(name, storage, write_through=False, clock=clock)
              for name in ("tasks", "objects")}
    for i in range(10):
        tables["tasks"].put(f"t{i}", b"x" * 30, finished=True)
    tables["objects"].put("o", b"y" * 7, finished=True)
    tables["objects"].put("live", b"z", finished=False)
    flusher = Flusher(tables, FlushPolicy(min_age_s=1.0), clock=clock)
    assert flusher.flush_now().entries == 0
    clock.now = 5.0
    report = flusher.flush_now()
    assert (report.entries, report.bytes) == (11, 307)
    assert report.per_table["tasks"].entries == 10 and report.per_table["objects"].bytes == 7
    # What is left in memory: the live entry only.
    assert {name: r.hot_after for name, r in report.per_table.items()} == {"tasks": 0, "objects": 1}
    assert report.rss_before > 0 and report.rss_after > 0 and report.duration_s >= 0
    stats = flusher.statistics()
    assert (stats.flushes, stats.idle_flushes, stats.entries_flushed) == (1, 1, 11)
    assert not stats.running
    storage.close()


def test_background_thread_flushes_until_stopped(wait_until: Callable[..., None]) -> None:
    table = TieredTable("tasks", InMemoryStorage(), write_through=False)
    flusher = Flusher({"tasks": table}, FlushPolicy(interval_s=0.01, min_age_s=0.0))
    flusher.start()
    try:
        assert flusher.statistics().running
        table.put("t", b"done", finished=True)
        wait_until(lambda: table.hot_count() == 0)
        assert table.get("t") == b"done"
    finally:
        flusher.stop()
    assert not flusher.statistics().running
    assert flusher.statistics().entries_flushed == 1


def test_disabled_flusher_runs_no_thread() -> None:
    table = TieredTable("tasks", InMemoryStorage(), write_through=False)
    flusher = Flusher({"tasks": table}, FlushPolicy(interval_s=0.01, min_age_s=0.0),
                      enabled=False)
    flusher.start()
    assert not flusher.statistics().running
    table.put("t", b"done", finished=True)
    assert flusher.flush_now().entries == 1  # an explicit flush still works
    flusher.stop()


class BrokenStorage(InMemoryStorage):
    def __init__(self) -> None:
        super().__init__()
        self.broken = True

    def put_many(self, table: str, items: Mapping[str, bytes]) -> None:
        if self.broken:
            raise OSError("storage unavailable")
        super().put_many(table, items)


def test_thread_survives_failed_flushes(wait_until: Callable[..., None]) -> None:
    storage = BrokenStorage()
    table = TieredTable("tasks", storage, write_through=False)
    flusher = Flusher({"tasks": table}, FlushPolicy(interval_s=0.01, min_age_s=0.0))
    table.put("t", b"done", finished=True)
    flusher.start()
    try:
        wait_until(lambda: flusher.statistics().failures >= 2)
        assert table.hot_count() == 1  # nothing lost while the storage is down
        storage.broken = False
        wait_until(lambda: table.hot_count() == 0)
    finally:
        flusher.stop()
    assert storage.get("tasks", "t") == b"done"


def test_flush_emits_a_span_and_a_log_line_with_the_same_numbers(tmp_path: Path) -> None:
    # A fresh interpreter: telemetry and logs are configured per process.
    script = textwrap.dedent(
        f"""
        from pathlib import Path
        from tracedray import logs, telemetry
        from tracedray.core.gcs.storage import FlushPolicy, Flusher, TieredTable, open_storage
        session = Path({str(tmp_path)!r})
        telemetry.configure("gcs", session_dir=session)
        logs.configure("gcs", session_dir=session)
        storage = open_storage("memory", session_dir=session)
        table = TieredTable("tasks", storage, write_through=False)
        for i in range(100):
            table.put(f"t{{i}}", b"v" * 50, finished=True)
        table.put("running", b"r", finished=False)  # stays in memory
        flusher = Flusher({{"tasks": table}}, FlushPolicy(min_age_s=0.0))
        flusher.flush_now()
        flusher.flush_now()  # moves nothing: no second span or line
        storage.close()
        telemetry.shutdown()
        """
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    spans: list[dict[str, Any]] = []
    for path in (tmp_path / "traces").glob("*.jsonl"):
        for line in read_data(path).decode().splitlines():
            for resource in json.loads(line)["resourceSpans"]:
                for scope in resource["scopeSpans"]:
                    spans.extend(s for s in scope["spans"] if s["name"] == "gcs.flush")
    assert len(spans) == 1
    attributes = {a["key"]: a["value"] for a in spans[0]["attributes"]}
    assert attributes["tracedray.gcs.flush.entries"] == {"intValue": "100"}
    assert attributes["tracedray.gcs.flush.bytes"] == {"intValue": "5000"}
    assert "memory" in attributes["tracedray.gcs.storage"]["stringValue"]
    assert int(attributes["tracedray.gcs.memory_after"]["intValue"]) > 0
    assert attributes["tracedray.gcs.hot_entries"] == {"intValue": "1"}
    lines = [json.loads(line) for path in (tmp_path / "logs").glob("*.jsonl")
             for line in read_data(path).decode().splitlines()]
    flushes = [line for line in lines if line["event"] == "gcs.flush"]
    assert len(flushes) == 1
    assert (flushes[0]["entries"], flushes[0]["bytes"]) == (100, 5000)
    assert flushes[0]["memory_after"] == int(attributes["tracedray.gcs.memory_after"]["intValue"])
    assert flushes[0]["hot_entries"] == {"tasks": 1}
