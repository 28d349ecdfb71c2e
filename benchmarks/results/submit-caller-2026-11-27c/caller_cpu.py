"""The caller thread's CPU per ``.remote()`` (and the loop's wall time), before and after,
alternated ABBA, each side's source chosen with ``PYTHONPATH``.

A child starts a 2-CPU cluster, warms it, then runs ``ROUNDS`` loops of ``TASKS`` empty
``.remote()`` (each loop's results gotten after it, untimed), and reports the median
over loops of the caller thread's CPU per call (``time.thread_time``), of the loop's
wall time per call, and of the cyclic collector's time on the caller thread per call
(``gc.callbacks``; it runs during the loop and the untimed get alike); and, from as many
loops run with the collector off (alternating with the others), the caller's CPU per
call without it, which moves less with the machine's load.

Usage: python caller_cpu.py BEFORE_SRC AFTER_SRC PAIRS OUT.json (appends);
``python caller_cpu.py --summary OUT.json``; ``--child`` measures one side.
"""

from __future__ import annotations

import gc
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve()
sys.path.insert(0, str(HERE.parents[2]))
from telemetry import median_interval  # noqa: E402

TASKS = 5_000
ROUNDS = 8
FIGURES = ("caller_cpu_us", "wall_us", "gc_us", "no_gc_cpu_us")


def child() -> None:
    import tracedray as ray

    ray.init(num_cpus=2)

    @ray.remote
    def empty() -> None:
        return None

    for _ in range(2):  # warm: workers started, leases held
        ray.get([empty.remote() for _ in range(TASKS)])
    gc_cpu = [0.0, 0.0]  # collector time on this thread; when the running one started
    main = threading.main_thread()

    def timed(phase: str, _info: dict[str, int]) -> None:
        if threading.current_thread() is main:
            if phase == "start":
                gc_cpu[1] = time.thread_time()
            else:
                gc_cpu[0] += time.thread_time() - gc_cpu[1]

    gc.callbacks.append(timed)
    samples: dict[str, list[float]] = {name: [] for name in FIGURES}
    for _ in range(ROUNDS):
        gc.disable()
        cpu = time.thread_time()
        refs = [empty.remote() for _ in range(TASKS)]
        cpu = time.thread_time() - cpu
        gc.enable()
        ray.get(refs)
        del refs
        samples["no_gc_cpu_us"].append(cpu / TASKS * 1e6)
        gc.collect()
        gc_before = gc_cpu[0]
        cpu, start = time.thread_time(), time.perf_counter()
        refs = [empty.remote() for _ in range(TASKS)]
        wall, cpu = time.perf_counter() - start, time.thread_time() - cpu
        ray.get(refs)
        del refs
        samples["caller_cpu_us"].append(cpu / TASKS * 1e6)
        samples["wall_us"].append(wall / TASKS * 1e6)
        samples["gc_us"].append((gc_cpu[0] - gc_before) / TASKS * 1e6)
    gc.callbacks.remove(timed)
    ray.shutdown()
    print(json.dumps({name: statistics.median(values) for name, values in samples.items()}))


def side(src: str) -> dict[str, float]:
    out = subprocess.run([sys.executable, str(HERE), "--child"], check=True, timeout=300,
                         env={**os.environ, "PYTHONPATH": src}, capture_output=True, text=True)
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def summary(path: Path) -> None:
    pairs = json.loads(path.read_text())
    loads = [p["load"] for p in pairs]
    print(f"{len(pairs)} pairs, load average {min(loads):.1f}-{max(loads):.1f}")
    for name in FIGURES:
        if not all(name in p["before"] for p in pairs):
            continue  # measured by a later version of this script
        before = [p["before"][name] for p in pairs]
        after = [p["after"][name] for p in pairs]
        ratios = [b / a for b, a in zip(before, after, strict=True)]  # > 1: after is less
        low, high = median_interval(ratios)
        print(f"{name:14} before {statistics.median(before):6.2f}  after "
              f"{statistics.median(after):6.2f}  before/after {statistics.median(ratios):.3f} "
              f"[{low:.3f}, {high:.3f}]")


def main() -> None:
    if sys.argv[1] == "--child":
        child()
        return
    if sys.argv[1] == "--summary":
        summary(Path(sys.argv[2]))
        return
    before_src, after_src = sys.argv[1], sys.argv[2]
    count, out = int(sys.argv[3]), Path(sys.argv[4])
    pairs = json.loads(out.read_text()) if out.exists() else []
    for i in range(count):
        order = ("before", "after") if (len(pairs) + i) % 2 == 0 else ("after", "before")
        pair: dict[str, object] = {"load": os.getloadavg()[0]}
        for name in order:
            pair[name] = side(before_src if name == "before" else after_src)
        pairs.append(pair)
        out.write_text(json.dumps(pairs, indent=1))
        print(f"pair {len(pairs)}: {json.dumps(pair)}", flush=True)


if __name__ == "__main__":
    main()
