"""What authentication costs: empty tasks/s and actor calls/s with auth on vs off.

Each run is a fresh interpreter and a fresh 2-CPU cluster (``--child``), with
``TRACEDRAY_AUTH_MODE`` unset (token, the default) or ``disabled``; the modes
alternate so that load from elsewhere on the machine hits both alike. Every run
reports the median of ``--repeats`` measurements; the parent prints the median
over runs per mode and the ratio on/off (the goal: >= 0.97). Next to the rates it
reports the CPU time the whole cluster (driver, GCS, raylet, workers) spent per
task or call: on a machine that other work keeps busy the rates swing by 2x from
run to run, the CPU spent per task much less.

Run: ``.venv/bin/python benchmarks/auth.py [--pairs 5] [--repeats 5]``
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

EMPTY_TASKS = 3_000
ACTOR_CALLS = 2_000


def _cluster_cpu_s() -> float:
    """CPU seconds (user + system) of this process and every process under it."""
    import psutil

    me = psutil.Process()
    total = 0.0
    for process in [me, *me.children(recursive=True)]:
        try:
            times = process.cpu_times()
        except psutil.Error:  # exited meanwhile
            continue
        total += times.user + times.system
    return total


def _child(repeats: int) -> dict[str, float]:
    import tracedray as ray

    ray.init(num_cpus=2)

    @ray.remote
    def empty() -> None:
        return None

    @ray.remote
    class Actor:
        def ping(self) -> None:
            return None

    cpu_us: dict[str, list[float]] = {"task": [], "actor_call": []}

    def tasks_per_s() -> float:
        started, cpu = time.perf_counter(), _cluster_cpu_s()
        ray.get([empty.remote() for _ in range(EMPTY_TASKS)])
        cpu_us["task"].append((_cluster_cpu_s() - cpu) / EMPTY_TASKS * 1e6)
        return EMPTY_TASKS / (time.perf_counter() - started)

    actor = Actor.remote()

    def actor_calls_per_s() -> float:
        started, cpu = time.perf_counter(), _cluster_cpu_s()
        ray.get([actor.ping.remote() for _ in range(ACTOR_CALLS)])
        cpu_us["actor_call"].append((_cluster_cpu_s() - cpu) / ACTOR_CALLS * 1e6)
        return ACTOR_CALLS / (time.perf_counter() - started)

    try:
        ray.get([empty.remote() for _ in range(300)])  # warm: workers, leases, streams
        ray.get([actor.ping.remote() for _ in range(200)])
        return {"tasks_per_s": statistics.median(tasks_per_s() for _ in range(repeats)),
                "actor_calls_per_s": statistics.median(actor_calls_per_s()
                                                       for _ in range(repeats)),
                "cpu_us_per_task": statistics.median(cpu_us["task"]),
                "cpu_us_per_actor_call": statistics.median(cpu_us["actor_call"])}
    finally:
        ray.shutdown()


def _run(mode: str, repeats: int) -> dict[str, float]:
    env = dict(os.environ)
    env.pop("TRACEDRAY_AUTH_MODE", None)
    env.pop("TRACEDRAY_AUTH_TOKEN", None)
    if mode == "off":
        env["TRACEDRAY_AUTH_MODE"] = "disabled"
    temp_dir = tempfile.mkdtemp(prefix=f"bench-auth-{mode}-")
    env["TRACEDRAY_TEMP_DIR"] = temp_dir
    try:
        out = subprocess.run([sys.executable, __file__, "--child", "--repeats", str(repeats)],
                             env=env, capture_output=True, text=True, timeout=900)
    finally:
        shutil.rmtree(temp_dir, ignore_errors=True)
    if out.returncode != 0:
        sys.stderr.write(out.stderr)
        raise SystemExit(f"the auth={mode} run failed with exit code {out.returncode}")
    parsed: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    return parsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(_child(args.repeats)))
        return
    runs: dict[str, list[dict[str, float]]] = {"on": [], "off": []}
    for pair in range(args.pairs):
        order = ("on", "off") if pair % 2 == 0 else ("off", "on")
        for mode in order:
            runs[mode].append(_run(mode, args.repeats))
            print(f"pair {pair + 1} auth {mode}: {runs[mode][-1]}", file=sys.stderr)
    report: dict[str, Any] = {}
    for key in ("tasks_per_s", "actor_calls_per_s", "cpu_us_per_task", "cpu_us_per_actor_call"):
        on = statistics.median(r[key] for r in runs["on"])
        off = statistics.median(r[key] for r in runs["off"])
        # A ratio >= 1 is good for rates, <= 1 for CPU per task.
        report[key] = {"on": round(on, 1), "off": round(off, 1), "ratio": round(on / off, 3)}
        print(f"{key:<22} auth on {on:9.1f}   off {off:9.1f}   on/off {on / off:.3f}")
    print(json.dumps(report))


if __name__ == "__main__":
    main()
