"""What metrics cost the runtime: empty tasks/s with metrics on (and scraped every
second) versus off (``TRACEDRAY_METRICS=false``). Goal (issue 25): on/off >= 0.97.

Two drivers, each with its own cluster started with the variable set, kept alive for
the whole benchmark; they take turns in ABBA order (on, off, off, on, ...), so each
pair of adjacent runs sees nearly the same machine, and the median of the pairs' ratios
is the figure least moved by this shared machine's noise. While it runs, this process
scrapes every target of the "on" cluster's ``prometheus_sd.json`` once a second, as a
Prometheus would (its own CPU is not the cluster's, but the scrapes' work in the raylet
and the GCS is).

``--control`` turns metrics on in both clusters (an A/A run): how far its ratios stray
from 1.00 is how far this machine's noise alone moves the figure.

Usage: python benchmarks/metrics_cost.py [--rounds N] [--tasks N] [--control]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import IO

GOAL = 0.97

DRIVER = r"""
import json, sys, time
import tracedray

info = tracedray.init(num_cpus=2, object_store_memory=256 << 20)

@tracedray.remote
def empty():
    return None

tracedray.get([empty.remote() for _ in range(200)])  # warm the workers
print(json.dumps({"session_dir": info["session_dir"]}), flush=True)
for line in sys.stdin:
    n = int(line)
    started = time.perf_counter()
    tracedray.get([empty.remote() for _ in range(n)])
    print(json.dumps({"ops": n / (time.perf_counter() - started)}), flush=True)
tracedray.shutdown()
"""


class Driver:
    def __init__(self, metrics: bool) -> None:
        env = {**os.environ, "TRACEDRAY_METRICS": "true" if metrics else "false"}
        self.process = subprocess.Popen([sys.executable, "-c", DRIVER], env=env,
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        text=True)
        self.session_dir = Path(json.loads(self._read())["session_dir"])

    def _read(self) -> str:
        out: IO[str] | None = self.process.stdout
        assert out is not None
        line = out.readline()
        if not line:
            raise RuntimeError("the driver exited")
        return line

    def run(self, tasks: int) -> float:
        assert self.process.stdin is not None
        self.process.stdin.write(f"{tasks}\n")
        self.process.stdin.flush()
        return float(json.loads(self._read())["ops"])

    def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        self.process.wait(timeout=60)


def scrape_forever(sd_file: Path, stop: threading.Event, counts: list[int],
                   latencies: list[float]) -> None:
    while not stop.wait(1.0):
        try:
            for group in json.loads(sd_file.read_text()):
                started = time.perf_counter()
                with urllib.request.urlopen(f"http://{group['targets'][0]}/metrics",
                                            timeout=5) as response:
                    response.read()
                latencies.append(time.perf_counter() - started)
                counts[0] += 1
        except (OSError, ValueError):
            counts[1] += 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--tasks", type=int, default=1000)
    parser.add_argument("--control", action="store_true", help="metrics on in both (A/A)")
    args = parser.parse_args()
    on, off = Driver(metrics=True), Driver(metrics=args.control)
    stop = threading.Event()
    scrapes = [0, 0]
    latencies: list[float] = []
    scraper = threading.Thread(target=scrape_forever, daemon=True,
                               args=(on.session_dir / "prometheus_sd.json", stop, scrapes,
                                     latencies))
    scraper.start()
    ratios, on_ops, off_ops = [], [], []
    try:
        for i in range(args.rounds):
            order = (on, off) if i % 2 == 0 else (off, on)
            result = {id(d): d.run(args.tasks) for d in order}
            on_ops.append(result[id(on)])
            off_ops.append(result[id(off)])
            ratios.append(result[id(on)] / result[id(off)])
    finally:
        stop.set()
        on.close()
        off.close()
    median = statistics.median(ratios)
    what = "A/A control, both on" if args.control else "metrics on (scraped every 1 s) / off"
    scrape_ms = statistics.median(latencies) * 1000 if latencies else float("nan")
    print(f"empty tasks/s, {what}: median ratio {median:.3f} "
          f"over {len(ratios)} pairs (min {min(ratios):.3f}, max {max(ratios):.3f}); "
          f"on {statistics.median(on_ops):.0f}/s, off {statistics.median(off_ops):.0f}/s; "
          f"{scrapes[0]} scrapes ({scrape_ms:.1f} ms median), {scrapes[1]} failed; "
          f"goal >= {GOAL}: "
          f"{'meets' if median >= GOAL else 'MISSES'}")


if __name__ == "__main__":
    main()
