"""Telemetry bytes on disk per task (issue 24: goal <= 2 KB), as a session keeps them.

Each run starts a cluster (``init``, 2 CPUs) whose files rotate every
``--rotation-bytes`` (default 256 KiB) and whose parts are compressed at once
(TRACEDRAY_LOG_ROTATION_COMPRESS_DELAY_S=0), runs ``--tasks`` tasks that each print a
line (like benchmarks/trace_store.py), waits SETTLE_S, stops the cluster and counts the bytes of
``logs/`` and ``traces/``: the line files as the session left them (current files plain,
at most one rotation size each per process, parts compressed), and what those lines are
uncompressed. The trace index and the GCS's sqlite are counted apart (they are not
telemetry files: the index can be rebuilt, the GCS tables are the cluster's state).

Runs alternate with ``--runs`` repeats; the median and range of bytes per task are
printed and, with ``--save DIR``, written to DIR/trace_disk.json.

Usage: python benchmarks/trace_disk.py [--tasks 5000] [--runs 3] [--save DIR]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path
from typing import Any

SETTLE_S = 3.0  # after the last task, before the cluster stops

DRIVER = textwrap.dedent("""
    import sys, time
    import tracedray as ray

    ray.init(num_cpus=2, object_store_memory=128 << 20)

    @ray.remote
    def step(i):
        print("step", i, "done")
        return i

    count = int(sys.argv[1])
    for start in range(0, count, 500):
        refs = [step.remote(i) for i in range(start, min(count, start + 500))]
        assert ray.get(refs) == list(range(start, min(count, start + 500)))
    time.sleep(float(sys.argv[2]))  # the agent's next rounds rotate and compress
    print(ray.api.calls._require_cluster().session.root, flush=True)
    ray.shutdown()
""")


def measure(session: Path) -> dict[str, int]:
    from tracedray.telemetry.line_file import file_size, line_files

    result = {"logs": 0, "traces": 0, "logs_uncompressed": 0, "traces_uncompressed": 0,
              "compressed_parts": 0, "plain_files": 0}
    for kind in ("logs", "traces"):
        for path in line_files(session / kind):
            stored = path if path.exists() else path.with_name(path.name + ".zst")
            result[kind] += stored.stat().st_size
            result[f"{kind}_uncompressed"] += file_size(path) or 0
            result["compressed_parts" if stored != path else "plain_files"] += 1
    result["index"] = sum(p.stat().st_size for p in session.glob("trace_index.sqlite*"))
    result["gcs"] = sum(p.stat().st_size for p in session.glob("gcs.sqlite3*"))
    return result


def run_once(tasks: int, rotation_bytes: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="trace-disk-") as temp:
        env = {**os.environ, "TRACEDRAY_TEMP_DIR": temp, "TRACEDRAY_LOG_TO_DRIVER": "false",
               "TRACEDRAY_LOG_ROTATION_BYTES": str(rotation_bytes),
               "TRACEDRAY_LOG_ROTATION_COMPRESS_DELAY_S": "0",
               # The agent's rounds are not put off on a busy machine: a long-lived
               # session's agent catches up; this short one would end before it did.
               "TRACEDRAY_TELEMETRY_AGENT_MAX_DEFER_S": "0"}
        done = subprocess.run([sys.executable, "-c", DRIVER, str(tasks), str(SETTLE_S)], env=env,
                              capture_output=True, text=True, timeout=1800, check=False)
        if done.returncode != 0:
            raise SystemExit(f"driver failed:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
        session = Path(done.stdout.strip().splitlines()[-1])
        sizes = measure(session)
    telemetry = sizes["logs"] + sizes["traces"]
    plain = sizes["logs_uncompressed"] + sizes["traces_uncompressed"]
    return {**sizes, "tasks": tasks,
            "telemetry_bytes_per_task": round(telemetry / tasks),
            "uncompressed_bytes_per_task": round(plain / tasks),
            "index_bytes_per_task": round(sizes["index"] / tasks),
            "gcs_bytes_per_task": round(sizes["gcs"] / tasks)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=5000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--rotation-bytes", type=int, default=256 << 10)
    parser.add_argument("--save", type=Path)
    args = parser.parse_args()
    runs = []
    for number in range(args.runs):
        row = run_once(args.tasks, args.rotation_bytes)
        runs.append(row)
        print(f"run {number + 1}: {row['telemetry_bytes_per_task']} B/task on disk "
              f"({row['uncompressed_bytes_per_task']} uncompressed; index "
              f"{row['index_bytes_per_task']}, gcs {row['gcs_bytes_per_task']} B/task; "
              f"{row['compressed_parts']} compressed parts, {row['plain_files']} plain files)",
              flush=True)
    summary: dict[str, Any] = {}
    for field in ("telemetry_bytes_per_task", "uncompressed_bytes_per_task",
                  "index_bytes_per_task", "gcs_bytes_per_task"):
        values = [row[field] for row in runs]
        summary[field] = {"median": statistics.median(values), "min": min(values),
                          "max": max(values)}
        print(f"{field}: median {summary[field]['median']} "
              f"({summary[field]['min']}-{summary[field]['max']})")
    if args.save:
        args.save.mkdir(parents=True, exist_ok=True)
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                                text=True, check=False).stdout.strip()
        (args.save / "trace_disk.json").write_text(json.dumps({
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "commit": commit, "tasks": args.tasks, "rotation_bytes": args.rotation_bytes,
            "runs": runs, "summary": summary}, indent=1) + "\n")


if __name__ == "__main__":
    main()
