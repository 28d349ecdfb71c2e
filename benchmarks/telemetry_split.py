"""Where telemetry's cost lands in a burst of empty tasks: the driver or the cluster.

``OTEL_SDK_DISABLED`` is read once per process, so a cluster started with
``tracedray start --head`` and a driver connecting to it can each have telemetry on
or off. Four combinations (driver on/off × cluster on/off) run in turn, ``--rounds``
times; each prints the median tasks/s of five bursts of ``--tasks`` empty tasks. The
driver's share is (off, off) against (on, off); the cluster's (raylet, workers,
telemetry agent) is (off, off) against (off, on).

Usage: python benchmarks/telemetry_split.py [--rounds 3] [--tasks 4000]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

DRIVER = r"""
import json, statistics, sys, time
import tracedray

@tracedray.remote
def empty():
    return None

tasks = int(sys.argv[1])
tracedray.init(address="auto")
tracedray.get([empty.remote() for _ in range(1000)])  # warm the worker pool
rates = []
for _ in range(5):
    start = time.perf_counter()
    tracedray.get([empty.remote() for _ in range(tasks)])
    rates.append(tasks / (time.perf_counter() - start))
print(json.dumps(statistics.median(rates)))
tracedray.shutdown()
"""


def _env(telemetry_on: bool, temp_root: str) -> dict[str, str]:
    env = {**os.environ, "TRACEDRAY_TEMP_DIR": temp_root}
    for key in ("OTEL_SDK_DISABLED", "OTEL_EXPORTER_OTLP_ENDPOINT",
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "TRACEDRAY_ADDRESS"):
        env.pop(key, None)
    if not telemetry_on:
        env["OTEL_SDK_DISABLED"] = "true"
    return env


def _cli() -> list[str]:
    return [sys.executable, "-c", "from tracedray.cli.app import main; main()"]


def one_run(driver_on: bool, cluster_on: bool, tasks: int, temp_root: str) -> float:
    cluster_env = _env(cluster_on, temp_root)
    subprocess.run([*_cli(), "start", "--head", "--num-cpus", "2"], env=cluster_env,
                   check=True, capture_output=True, timeout=120)
    try:
        done = subprocess.run([sys.executable, "-c", DRIVER, str(tasks)],
                              env=_env(driver_on, temp_root), capture_output=True, text=True,
                              check=False, timeout=600)
        if done.returncode != 0:
            raise SystemExit(f"driver failed:\n{done.stderr[-3000:]}")
        return float(json.loads(done.stdout.strip().splitlines()[-1]))
    finally:
        subprocess.run([*_cli(), "stop"], env=cluster_env, capture_output=True, timeout=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tasks", type=int, default=4000)
    args = parser.parse_args()
    combos = [(True, True), (True, False), (False, True), (False, False)]
    rates: dict[tuple[bool, bool], list[float]] = {combo: [] for combo in combos}
    with tempfile.TemporaryDirectory(prefix="tracedray-split-") as temp_root:
        for _ in range(args.rounds):
            for driver_on, cluster_on in combos:
                rates[(driver_on, cluster_on)].append(
                    one_run(driver_on, cluster_on, args.tasks, temp_root))
    median = {combo: statistics.median(values) for combo, values in rates.items()}
    label = {True: "on", False: "off"}
    print(f"{'driver':>7} {'cluster':>8} {'tasks/s (median)':>17}")
    for (driver_on, cluster_on), value in median.items():
        print(f"{label[driver_on]:>7} {label[cluster_on]:>8} {value:>17,.0f}")
    base = median[(False, False)]
    print(f"\nthe driver's telemetry costs {1 - median[(True, False)] / base:.0%} of the "
          f"throughput, the cluster's {1 - median[(False, True)] / base:.0%}; both "
          f"{1 - median[(True, True)] / base:.0%} ({args.rounds} rounds of "
          f"{args.tasks} tasks x 5 bursts; the machine's noise is ~±10%)")


if __name__ == "__main__":
    main()
