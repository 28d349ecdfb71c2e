"""CPU per task of each kind of cluster process, for the tracedray on ``PYTHONPATH``.

Two workloads, each on a fresh 2-CPU cluster with telemetry on:

``burst``   rounds of 5,000 empty tasks submitted then gotten, followed at once by
            2,000 actor calls (their calls/s are what submission.py compares with Ray
            as "actor calls right after a burst"), 2.5 s apart;
``rtt``     sequential round trips of one empty task (submit, get, submit, …).

Prints one JSON line: the workload's rate (median over rounds) and the CPU seconds each
kind of process (driver, workers, raylet, GCS, telemetry agent) spent per task or call,
read from ``/proc``. Compare two source trees by running it with each on
``PYTHONPATH`` in turn, ABBA:

    PYTHONPATH=/tmp/before/src python benchmarks/per_task_cpu.py --workload rtt
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import time
from collections.abc import Callable

BURST_TASKS = 5_000
ACTOR_CALLS = 2_000
ROUND_TRIPS = 3_000
_KINDS = ("gcs.main", "raylet.main", "telemetry_agent", "worker")


def _processes() -> dict[int, str]:
    """This driver and the cluster's processes, by pid, named by kind."""
    found = {os.getpid(): "driver"}
    listing = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True,
                             check=True).stdout.splitlines()[1:]
    for line in listing:
        pid, args = line.strip().split(" ", 1)
        if "tracedray" in args:
            kind = next((k for k in _KINDS if k in args), None)
            if kind is not None:
                found[int(pid)] = kind
    return found


def _cpu_s(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0  # gone (a worker that exited): what it used is lost to the count
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure(workload: str, rounds: int) -> dict[str, object]:
    import tracedray as rt

    rt.init(num_cpus=2, object_store_memory=256 << 20)

    @rt.remote
    def empty() -> None:
        return None

    @rt.remote
    class Pinger:
        def ping(self) -> None:
            return None

    actor = Pinger.remote()  # type: ignore[attr-defined]

    def burst_then_calls() -> float:
        rt.get([empty.remote() for _ in range(BURST_TASKS)])
        start = time.perf_counter()
        rt.get([actor.ping.remote() for _ in range(ACTOR_CALLS)])
        rate = ACTOR_CALLS / (time.perf_counter() - start)
        time.sleep(2.5)
        return rate

    def round_trips() -> float:
        start = time.perf_counter()
        for _ in range(ROUND_TRIPS):
            rt.get(empty.remote())
        rate = ROUND_TRIPS / (time.perf_counter() - start)
        time.sleep(1)
        return rate

    one_round: Callable[[], float] = burst_then_calls if workload == "burst" else round_trips
    per_round = BURST_TASKS + ACTOR_CALLS if workload == "burst" else ROUND_TRIPS
    try:
        for _ in range(2):  # warm the worker pool and every path
            burst_then_calls()
        processes = _processes()
        before = {pid: _cpu_s(pid) for pid in processes}
        rates = [one_round() for _ in range(rounds)]
        after = {pid: _cpu_s(pid) for pid in processes}
    finally:
        rt.shutdown()
    per_kind: dict[str, float] = {}
    for pid, kind in processes.items():
        per_kind[kind] = per_kind.get(kind, 0.0) + after[pid] - before[pid]
    count = rounds * per_round
    return {"workload": workload,
            "rate": round(statistics.median(rates)),
            "rate_name": "actor calls/s after the burst" if workload == "burst"
            else "round trips/s",
            "cpu_us_per_task": {kind: round(cpu / count * 1e6, 1)
                                for kind, cpu in sorted(per_kind.items())}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workload", choices=("burst", "rtt"), default="burst")
    parser.add_argument("--rounds", type=int, default=8)
    args = parser.parse_args()
    print(json.dumps(measure(args.workload, args.rounds)), flush=True)


if __name__ == "__main__":
    main()
