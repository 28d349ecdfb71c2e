"""What keeping the object store's events in the trace index costs the index writer.

The writer (telemetry/trace_index.py, run by each node's telemetry agent at nice 19)
takes every store event out of the trace lines it indexes (telemetry/memory_index.py),
so that `memory --timeline` reads rows instead of lines. This builds a session (a local
cluster, ``--tasks`` tasks that print a line, five 200 KB puts every 500 tasks), then
indexes copies of it from scratch, with and without the store-event rows, alternated,
``--rounds`` times, and prints the CPU seconds of each (median and range).

Usage: python benchmarks/index_store_events.py [--tasks 5000] [--rounds 3] [--save DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any


def _session(tasks: int) -> Path:
    import tracedray as ray

    ray.init(num_cpus=2, object_store_memory=256 << 20)

    @ray.remote
    def step(i: int) -> int:
        print("step", i)
        return i

    kept = []
    for start in range(0, tasks, 500):
        ray.get([step.remote(i) for i in range(start, min(tasks, start + 500))])
        kept.extend(ray.put(b"x" * 200_000) for _ in range(5))
        del kept[:-5]
    ray.api.calls.global_worker().flush_background_work()
    root: Path = ray.api.calls._require_cluster().session.root
    ray.shutdown()
    return root


def _index(root: Path, copy: Path, keep_events: bool) -> float:
    from tracedray.telemetry import memory_index, trace_index

    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(root, copy, ignore=shutil.ignore_patterns("trace_index.sqlite*", "*.spool"))
    real = memory_index.events_of_line
    if not keep_events:
        memory_index.events_of_line = lambda raw: ([], "")  # type: ignore[assignment]
    try:
        started = time.process_time()
        writer = trace_index.IndexWriter(copy)
        while True:
            update = writer.update(max_bytes=64 << 20)
            if not update.pending or not update.lines:
                break
        writer.close()
        return time.process_time() - started
    finally:
        memory_index.events_of_line = real  # type: ignore[assignment]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tasks", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--save", type=Path, default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="td-bench-index-") as folder:
        os.environ["TRACEDRAY_TEMP_DIR"] = str(Path(folder) / "root")
        root = _session(args.tasks)
        runs: dict[str, list[float]] = {"with_store_events": [], "without": []}
        for _ in range(args.rounds):
            for mode in runs:
                runs[mode].append(_index(root, Path(folder) / mode, mode != "without"))
        trace_bytes = sum(p.stat().st_size for p in (root / "traces").glob("*.jsonl"))
    result: dict[str, Any] = {
        "tasks": args.tasks, "trace_bytes": trace_bytes,
        **{mode: {"cpu_s": round(statistics.median(v), 3),
                  "range_s": [round(min(v), 3), round(max(v), 3)]} for mode, v in runs.items()}}
    print(json.dumps(result))
    if args.save:
        args.save.mkdir(parents=True, exist_ok=True)
        (args.save / "index_store_events.json").write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
