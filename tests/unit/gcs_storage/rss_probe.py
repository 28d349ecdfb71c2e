"""Run as a script: stream finished entries through a TieredTable, print RSS growth as JSON.

    python rss_probe.py <session_dir> <entries> <flush: 0|1>

Run in a fresh interpreter so the baseline RSS is not inflated by other tests.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import psutil

from tracedray.core.gcs.storage import Flusher, FlushPolicy, TieredTable, open_storage


def main() -> None:
    session, total, flush = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "1"
    clock = [0.0]
    storage = open_storage("memory", session_dir=session)
    table = TieredTable("tasks", storage, write_through=False, clock=lambda: clock[0])
    flusher = Flusher({"tasks": table}, FlushPolicy(max_hot_entries=10_000, min_age_s=2.0),
                      clock=lambda: clock[0])
    process = psutil.Process()
    payload = b"x" * 280
    warm_up = total // 10
    baseline = 0
    for i in range(total):
        # ~300-byte finished task entries, 1,000 "tasks" per simulated second.
        table.put(f"task:{i:08d}", payload + i.to_bytes(20, "big"), finished=True)
        if i % 1000 == 999:
            clock[0] += 1.0
            if flush:
                flusher.flush_now()
        if i == warm_up:
            baseline = process.memory_info().rss
    growth = process.memory_info().rss - baseline
    readable = all(
        table.get(f"task:{i:08d}") == payload + i.to_bytes(20, "big") for i in range(0, total, 997)
    )
    print(json.dumps({"growth": growth, "hot": table.hot_count(), "count": len(table),
                      "readable": readable}))
    storage.close()


if __name__ == "__main__":
    main()
