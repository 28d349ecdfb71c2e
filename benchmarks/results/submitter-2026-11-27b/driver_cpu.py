"""The driver process's CPU per empty task (all its threads: the caller, the submit
inbox, the task streams' readers, the submitter), before and after, alternated ABBA,
each side's source chosen with ``PYTHONPATH``. CPU time moves less with the machine's
load than wall time does.

Usage: python driver_cpu.py BEFORE_SRC AFTER_SRC PAIRS OUT.json (appends);
``python driver_cpu.py --summary OUT.json``; ``--child`` measures one side.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve()
sys.path.insert(0, str(HERE.parents[2]))
from telemetry import median_interval  # noqa: E402

TASKS = 5_000
REPEAT = 3


def child() -> None:
    import tracedray as ray

    ray.init(num_cpus=2)

    @ray.remote
    def empty() -> None:
        return None

    ray.get([empty.remote() for _ in range(TASKS)])  # warm: workers started, leases held
    samples = []
    for _ in range(REPEAT):
        start = time.process_time()
        ray.get([empty.remote() for _ in range(TASKS)])
        samples.append((time.process_time() - start) / TASKS * 1e6)
    ray.shutdown()
    print(json.dumps({"driver_cpu_us_per_task": statistics.median(samples)}))


def side(src: str) -> float:
    out = subprocess.run([sys.executable, str(HERE), "--child"], check=True, timeout=300,
                         env={**os.environ, "PYTHONPATH": src}, capture_output=True, text=True)
    return float(json.loads(out.stdout.strip().splitlines()[-1])["driver_cpu_us_per_task"])


def main() -> None:
    if sys.argv[1] == "--child":
        child()
        return
    if sys.argv[1] == "--summary":
        pairs = json.loads(Path(sys.argv[2]).read_text())
        ratios = [p["before"] / p["after"] for p in pairs]  # > 1: after uses less CPU
        low, high = median_interval(ratios)
        print(f"{len(pairs)} pairs: before {statistics.median(p['before'] for p in pairs):.1f} µs,"
              f" after {statistics.median(p['after'] for p in pairs):.1f} µs, before/after "
              f"{statistics.median(ratios):.3f} [{low:.3f}, {high:.3f}]")
        return
    before_src, after_src = sys.argv[1], sys.argv[2]
    count, out = int(sys.argv[3]), Path(sys.argv[4])
    pairs = json.loads(out.read_text()) if out.exists() else []
    for i in range(count):
        order = ("before", "after") if (len(pairs) + i) % 2 == 0 else ("after", "before")
        pair: dict[str, float] = {"load": os.getloadavg()[0]}
        for name in order:
            pair[name] = side(before_src if name == "before" else after_src)
        pairs.append(pair)
        out.write_text(json.dumps(pairs, indent=1))
        print(f"pair {len(pairs)}: {pair}", flush=True)


if __name__ == "__main__":
    main()
