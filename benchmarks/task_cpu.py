"""CPU time per empty task, per process of the cluster (where the hot path spends).

Runs batches of empty tasks (``--batch`` submitted, then gotten) for
``--batches`` rounds on a warm 2-CPU cluster and reads each process's user +
system CPU time from /proc before and after. Prints, per process role (driver,
raylet, gcs, busy workers, idle workers), the CPU microseconds spent per task,
next to the wall time per task. On a 2-core machine the sum of the CPU column
is what bounds throughput: at ~1,750 tasks/s (Ray) the whole cluster may spend
at most ~1,140 CPU-us per task.

``--telemetry off`` sets OTEL_SDK_DISABLED=true in every process of the cluster.
Run: ``.venv/bin/python benchmarks/task_cpu.py [--batch 1000] [--batches 5]``
"""

from __future__ import annotations

import argparse
import collections
import os
import shutil
import tempfile
import time

import psutil

ROLES = ("driver", "raylet", "gcs", "worker (busy)", "worker (idle)")


def _role(process: psutil.Process) -> str:
    command = " ".join(process.cmdline())
    if "raylet.main" in command:
        return "raylet"
    if "gcs.main" in command:
        return "gcs"
    if "api.worker_main" in command:
        return "worker"
    return "other"


def _cpu_seconds(process: psutil.Process) -> float:
    times = process.cpu_times()
    return float(times.user + times.system)


def _snapshot(root: psutil.Process) -> dict[int, tuple[str, float]]:
    result = {root.pid: ("driver", _cpu_seconds(root))}
    for child in root.children(recursive=True):
        try:
            result[child.pid] = (_role(child), _cpu_seconds(child))
        except psutil.NoSuchProcess:
            continue
    return result


def per_task_cpu_us(before: dict[int, tuple[str, float]], after: dict[int, tuple[str, float]],
                    tasks: int, busy_threshold_us: float = 50.0) -> dict[str, float]:
    """CPU-us per task by role; a worker is busy when it spent more than the threshold."""
    totals: dict[str, float] = collections.defaultdict(float)
    counts: dict[str, int] = collections.defaultdict(int)
    for pid, (role, end) in after.items():
        start = before.get(pid, (role, 0.0))[1]
        used_us = (end - start) / tasks * 1e6
        if role == "worker":
            role = "worker (busy)" if used_us > busy_threshold_us else "worker (idle)"
        totals[role] += used_us
        counts[role] += 1
    return {**totals, **{f"#{role}": float(n) for role, n in counts.items()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--batches", type=int, default=5)
    parser.add_argument("--telemetry", choices=("on", "off"), default="on")
    args = parser.parse_args()
    if args.telemetry == "off":
        os.environ["OTEL_SDK_DISABLED"] = "true"
    temp_dir = tempfile.mkdtemp(prefix="bench-task-cpu-")
    os.environ["TRACEDRAY_TEMP_DIR"] = temp_dir
    import tracedray

    try:
        tracedray.init(num_cpus=2)

        @tracedray.remote
        def empty() -> None:
            return None

        for _ in range(2):  # warm: workers started, function exported, leases held
            tracedray.get([empty.remote() for _ in range(args.batch)])
        root = psutil.Process()
        tasks = args.batch * args.batches
        before = _snapshot(root)
        start = time.perf_counter()
        for _ in range(args.batches):
            tracedray.get([empty.remote() for _ in range(args.batch)])
        wall = time.perf_counter() - start
        figures = per_task_cpu_us(before, _snapshot(root), tasks)
    finally:
        tracedray.shutdown()
        shutil.rmtree(temp_dir, ignore_errors=True)
    print(f"{tasks} empty tasks, telemetry {args.telemetry}: {tasks / wall:.0f} tasks/s, "
          f"wall {wall / tasks * 1e6:.0f} us/task, load average {os.getloadavg()[0]:.1f}")
    print(f"{'process':16} {'count':>5} {'CPU us/task':>12}")
    total = 0.0
    for role in ROLES:
        if role in figures:
            total += figures[role]
            print(f"{role:16} {int(figures['#' + role]):>5} {figures[role]:>12.0f}")
    print(f"{'total':16} {'':>5} {total:>12.0f}")


if __name__ == "__main__":
    main()
