"""Core runtime benchmark: tracedray next to Ray, same workload, same machine.

Figures (median of ``--runs`` repetitions, each repetition a fresh measurement
on a warm 2-CPU cluster):

* empty tasks/s: 5,000 ``f.remote()`` submitted, then all gotten;
* task round trip: ``get(f.remote())`` in a loop;
* tree aggregation: 256 leaf tasks, then pairwise ``add.remote(a, b)`` with the
  futures as arguments until one value is left (511 tasks, the Ray tutorial shape);
* actor calls/s (2,000 calls submitted, then gotten) and actor round trip;
* put and get of 1 MB and 100 MB numpy arrays, in GB/s, and whether the 100 MB
  get is zero-copy (the array does not own its data, its buffer lives in a
  file-backed mapping, and the process's anonymous memory did not grow).

Each runtime runs in its own interpreter (``--child``) so they share no process
state; the parent prints both columns and the ratio. Ray is measured when it
is importable. ``--telemetry off`` runs tracedray with ``OTEL_SDK_DISABLED=true``
to show what the tracing costs.

Run: ``.venv/bin/python benchmarks/core.py [--runs 5] [--rounds 5] [--only tracedray]
[--ray-python /tmp/rayvenv/bin/python] [--json out.json]``
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

MB = 1_000_000
EMPTY_TASKS = 5_000
ACTOR_CALLS = 2_000
ROUND_TRIPS = 200
TREE_LEAVES = 256


@dataclass(frozen=True)
class Metric:
    key: str
    label: str
    unit: str
    higher_is_better: bool


METRICS = (
    Metric("tasks_per_s", "empty tasks/s (5,000 submitted, then gotten)", "/s", True),
    Metric("task_rtt_ms", "task round trip", "ms", False),
    Metric("tree_ms", "tree aggregation, 256 values (511 tasks)", "ms", False),
    Metric("actor_calls_per_s", "actor calls/s (2,000 submitted, then gotten)", "/s", True),
    Metric("actor_rtt_ms", "actor round trip", "ms", False),
    Metric("put_1mb_gbps", "put 1 MB numpy", "GB/s", True),
    Metric("get_1mb_gbps", "get 1 MB numpy", "GB/s", True),
    Metric("put_100mb_gbps", "put 100 MB numpy", "GB/s", True),
    Metric("get_100mb_gbps", "get 100 MB numpy", "GB/s", True),
)


# --------------------------------------------------------------------------- child side
def _median_of(runs: int, measure: Callable[[], float]) -> float:
    return statistics.median(measure() for _ in range(runs))


def _anonymous_rss_bytes() -> int:
    """RssAnon of this process: grows by the array size if a get copies it."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) * 1024
    return 0


def _mapping_of(address: int) -> str:
    """The /proc/self/maps path backing ``address`` ("" for anonymous memory)."""
    with open("/proc/self/maps") as maps:
        for line in maps:
            fields = line.split(maxsplit=5)
            start, end = (int(part, 16) for part in fields[0].split("-"))
            if start <= address < end:
                return fields[5].strip() if len(fields) > 5 else ""
    return "?"


def _run_child(runtime: str, runs: int) -> dict[str, Any]:
    import numpy as np

    ray: Any = __import__(runtime)
    if runtime == "ray":
        ray.init(num_cpus=2, include_dashboard=False, logging_level="WARNING",
                 log_to_driver=False)
    else:
        ray.init(num_cpus=2)

    @ray.remote
    def empty() -> None:
        return None

    @ray.remote
    def leaf(i: int) -> int:
        return i

    @ray.remote
    def add(a: int, b: int) -> int:
        return a + b

    @ray.remote
    class Actor:
        def ping(self) -> None:
            return None

    def tasks_per_s() -> float:
        start = time.perf_counter()
        ray.get([empty.remote() for _ in range(EMPTY_TASKS)])
        return EMPTY_TASKS / (time.perf_counter() - start)

    def task_rtt_ms() -> float:
        start = time.perf_counter()
        for _ in range(ROUND_TRIPS):
            ray.get(empty.remote())
        return (time.perf_counter() - start) / ROUND_TRIPS * 1e3

    def tree_ms() -> float:
        start = time.perf_counter()
        level = [leaf.remote(i) for i in range(TREE_LEAVES)]
        while len(level) > 1:
            level = [add.remote(level[i], level[i + 1]) for i in range(0, len(level), 2)]
        total = ray.get(level[0])
        elapsed = time.perf_counter() - start
        assert total == TREE_LEAVES * (TREE_LEAVES - 1) // 2, total
        return elapsed * 1e3

    actor: Any = Actor.remote()  # type: ignore[attr-defined]
    ray.get(actor.ping.remote())

    def actor_calls_per_s() -> float:
        start = time.perf_counter()
        ray.get([actor.ping.remote() for _ in range(ACTOR_CALLS)])
        return ACTOR_CALLS / (time.perf_counter() - start)

    def actor_rtt_ms() -> float:
        start = time.perf_counter()
        for _ in range(ROUND_TRIPS):
            ray.get(actor.ping.remote())
        return (time.perf_counter() - start) / ROUND_TRIPS * 1e3

    def put_get(size: int, repeat: int) -> tuple[float, float]:
        """GB/s of put and of get, each the median over ``repeat`` fresh objects."""
        array = np.random.default_rng(0).integers(0, 255, size, dtype=np.uint8)
        puts, gets = [], []
        for _ in range(repeat):
            start = time.perf_counter()
            ref = ray.put(array)
            puts.append(time.perf_counter() - start)
            start = time.perf_counter()
            value = ray.get(ref)
            gets.append(time.perf_counter() - start)
            assert value.shape == array.shape
            del value, ref
        return size / statistics.median(puts) / 1e9, size / statistics.median(gets) / 1e9

    def zero_copy_100mb() -> dict[str, Any]:
        array = np.ones(100 * MB, dtype=np.uint8)
        ref = ray.put(array)
        before = _anonymous_rss_bytes()
        value = ray.get(ref)
        grown = _anonymous_rss_bytes() - before
        mapping = _mapping_of(value.ctypes.data)
        verdict = {"owndata": bool(value.flags.owndata), "writeable": bool(value.flags.writeable),
                   "mapping": mapping, "anon_rss_growth_mb": grown / MB,
                   "zero_copy": (not value.flags.owndata and mapping not in ("", "[heap]", "?")
                                 and grown < 10 * MB)}
        del value, ref
        return verdict

    # Warm up: workers started, functions exported, leases and channels open.
    ray.get([empty.remote() for _ in range(200)])
    ray.get([add.remote(leaf.remote(1), leaf.remote(2)) for _ in range(20)])
    results: dict[str, Any] = {"version": getattr(ray, "__version__", "?")}
    try:
        results["tasks_per_s"] = _median_of(runs, tasks_per_s)
        results["task_rtt_ms"] = _median_of(runs, task_rtt_ms)
        results["tree_ms"] = _median_of(runs, tree_ms)
        results["actor_calls_per_s"] = _median_of(runs, actor_calls_per_s)
        results["actor_rtt_ms"] = _median_of(runs, actor_rtt_ms)
        results["put_1mb_gbps"], results["get_1mb_gbps"] = put_get(1 * MB, 10 * runs)
        results["put_100mb_gbps"], results["get_100mb_gbps"] = put_get(100 * MB, runs)
        results["zero_copy_100mb"] = zero_copy_100mb()
    finally:
        ray.shutdown()
    return results


# --------------------------------------------------------------------------- parent side
def _measure(runtime: str, python: str, runs: int, telemetry: bool) -> dict[str, Any]:
    env = dict(os.environ)
    temp_dir = tempfile.mkdtemp(prefix=f"bench-{runtime}-")
    if runtime == "tracedray":
        env["TRACEDRAY_TEMP_DIR"] = temp_dir
        if not telemetry:
            env["OTEL_SDK_DISABLED"] = "true"
    try:
        out = subprocess.run([python, __file__, "--child", runtime, "--runs", str(runs)],
                             env=env, capture_output=True, text=True, timeout=1800)
    finally:
        shutil.rmtree(temp_dir, ignore_errors=True)
    if out.returncode != 0:
        sys.stderr.write(out.stderr)
        raise SystemExit(f"{runtime} benchmark failed with exit code {out.returncode}")
    last_line = out.stdout.strip().splitlines()[-1]
    parsed: dict[str, Any] = json.loads(last_line)
    return parsed


def advantage(metric: Metric, ours: float, theirs: float) -> float:
    """How many times better tracedray is (> 1 means tracedray wins)."""
    if metric.higher_is_better:
        return ours / theirs
    return theirs / ours


def combine(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """One engine's figures over its rounds: each metric's median (pure); the version
    and the zero-copy check as the first round saw them."""
    combined = dict(rounds[0])
    for metric in METRICS:
        combined[metric.key] = statistics.median(r[metric.key] for r in rounds)
    return combined


def ratio_interval(metric: Metric, per_round: list[dict[str, dict[str, Any]]]) -> str:
    """The 95% bootstrap interval of the per-round advantages, when there are rounds
    enough to give one."""
    if len(per_round) < 3:
        return ""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from telemetry import median_interval

    low, high = median_interval([advantage(metric, r["tracedray"][metric.key],
                                           r["ray"][metric.key]) for r in per_round])
    return f" [{low:.2f}, {high:.2f}]"


def render(results: dict[str, dict[str, Any]],
           per_round: list[dict[str, dict[str, Any]]] | None = None) -> str:
    names = list(results)
    compare = sorted(names) == ["ray", "tracedray"]
    header = f"{'metric':46}" + "".join(f"{name:>16}" for name in names)
    if compare:
        header += f"{'td vs ray':>11}"
    versions = ", ".join(f"{name} {figures['version']}" for name, figures in results.items())
    lines = [versions, header]
    for metric in METRICS:
        row = f"{metric.label:46}" + "".join(
            f"{figures[metric.key]:>11.2f} {metric.unit:<4}" for figures in results.values())
        if compare:
            ratio = advantage(metric, results["tracedray"][metric.key], results["ray"][metric.key])
            row += f"{ratio:>10.2f}x" + ratio_interval(metric, per_round or [])
        lines.append(row)
    for name, figures in results.items():
        copy = figures["zero_copy_100mb"]
        lines.append(f"{name} get 100 MB zero-copy: {copy['zero_copy']} "
                     f"(owndata={copy['owndata']}, writeable={copy['writeable']}, "
                     f"mapping={copy['mapping'] or 'anonymous'}, "
                     f"anon RSS +{copy['anon_rss_growth_mb']:.1f} MB)")
    if compare:
        lines.append("td vs ray: > 1 means tracedray is better (faster or higher throughput)"
                     + (f"; medians of {len(per_round)} rounds, engines alternating, with "
                        "the 95% bootstrap interval of the per-round ratios"
                        if per_round and len(per_round) > 1 else ""))
    lines.append(f"load average during the run: {os.getloadavg()[0]:.1f} "
                 f"on {os.cpu_count()} CPUs (other work on the machine skews every figure)")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--only", choices=("tracedray", "ray"))
    parser.add_argument("--telemetry", choices=("on", "off"), default="on",
                        help="tracedray tracing (off = OTEL_SDK_DISABLED=true)")
    parser.add_argument("--rounds", type=int, default=1,
                        help="fresh clusters per engine, the engines alternating (and which "
                        "goes first): a busy machine's load falls on both")
    parser.add_argument("--ray-python", help="an interpreter where ray is installed "
                        "(default: this one, when it can import ray)")
    parser.add_argument("--json", help="also write the raw figures to this file")
    parser.add_argument("--child", choices=("tracedray", "ray"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(_run_child(args.child, args.runs)))
        return
    runtimes = [args.only] if args.only else ["tracedray"]
    pythons = {"tracedray": sys.executable, "ray": args.ray_python or sys.executable}
    if not args.only:
        if args.ray_python or importlib.util.find_spec("ray") is not None:
            runtimes.append("ray")
        else:
            print("ray is not importable: measuring tracedray only (--ray-python names "
                  "an interpreter that has it)")
    per_round = []
    for index in range(max(1, args.rounds)):
        order = runtimes if index % 2 == 0 else runtimes[::-1]
        per_round.append({name: _measure(name, pythons[name], args.runs,
                                         args.telemetry == "on") for name in order})
    results: dict[str, Any] = {name: combine([r[name] for r in per_round])
                               for name in runtimes}
    print(render(results, per_round))
    if args.json:
        with open(args.json, "w") as out:
            json.dump({**results, "rounds": per_round}, out, indent=2)


if __name__ == "__main__":
    main()
