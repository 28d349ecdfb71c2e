"""Submission and actor calls: tracedray next to Ray, alternating, on warm clusters.

Figures, each measured per round on both engines, one after the other (the order
alternates every round):

* submission rate: ``f.remote()`` of an empty task ``--tasks`` times, timed up to the
  last ``.remote()`` returning (the results are gotten after, untimed), with the caller
  thread's CPU per ``.remote()``;
* actor calls/s: 2,000 ``a.ping.remote()`` submitted, then all gotten;
* actor round trip: ``get(a.ping.remote())`` in a loop;
* memory, once per engine when its cluster is idle: the raylet's RSS and the RSS of
  every process of the cluster (the driver and all it started, recursively).

Each engine runs in its own serving driver (this file with ``--serve``): tracedray with
this interpreter, Ray with ``--ray-python`` (default ``/tmp/rayvenv/bin/python``). The
summary gives each figure's median per engine and the median of the per-round ratios
(> 1: tracedray is better) with a 95% bootstrap interval (``telemetry.median_interval``).

Usage: python benchmarks/submission.py [--rounds 9] [--tasks 5000] [--json out.json]
       python benchmarks/submission.py --pool run1.json run2.json ...
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ACTOR_CALLS = 2_000
ROUND_TRIPS = 300
HIGHER_IS_BETTER = {"submit_per_s": True, "caller_cpu_us": False, "actor_calls_per_s": True,
                    "actor_rtt_ms": False}


def _descendants(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                ppid = int(stat.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, []))
    return found


def _rss_mb(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
            return cmdline.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _memory() -> dict[str, float]:
    pids = _descendants(os.getpid())
    raylets = [pid for pid in pids if "raylet" in _cmdline(pid).split(" ", 1)[0]
               or "tracedray.core.raylet.main" in _cmdline(pid)]
    return {"raylet_rss_mb": sum(_rss_mb(pid) for pid in raylets),
            "cluster_rss_mb": sum(_rss_mb(pid) for pid in pids)}


def serve(engine: str, tasks: int) -> None:
    if engine == "ray":
        import ray as rt
    else:
        import tracedray as rt  # type: ignore[no-redef]

    rt.init(num_cpus=2, object_store_memory=256 << 20)

    @rt.remote
    def empty() -> None:
        return None

    @rt.remote
    class Pinger:
        def ping(self) -> None:
            return None

    actor = Pinger.remote()  # type: ignore[attr-defined]

    def submission() -> dict[str, float]:
        cpu, start = time.thread_time(), time.perf_counter()
        refs = [empty.remote() for _ in range(tasks)]  # type: ignore[attr-defined]
        elapsed, cpu = time.perf_counter() - start, time.thread_time() - cpu
        rt.get(refs)
        return {"submit_per_s": tasks / elapsed, "caller_cpu_us": cpu / tasks * 1e6}

    def actor_calls() -> dict[str, float]:
        start = time.perf_counter()
        rt.get([actor.ping.remote() for _ in range(ACTOR_CALLS)])
        return {"actor_calls_per_s": ACTOR_CALLS / (time.perf_counter() - start)}

    def actor_rtt() -> dict[str, float]:
        start = time.perf_counter()
        for _ in range(ROUND_TRIPS):
            rt.get(actor.ping.remote())
        return {"actor_rtt_ms": (time.perf_counter() - start) / ROUND_TRIPS * 1e3}

    try:
        for _ in range(2):  # warm the worker pool and every path
            submission(), actor_calls(), actor_rtt()
        time.sleep(2)
        print(json.dumps(_memory()), flush=True)
        for line in sys.stdin:
            if not line.strip():
                break
            print(json.dumps({**submission(), **actor_calls(), **actor_rtt()}), flush=True)
    finally:
        rt.shutdown()


def _side(engine: str, python: str, tasks: int, temp_root: str) -> Any:
    """The serving process of one engine, telemetry on (the default pipeline)."""
    sys.path.insert(0, str(Path(__file__).parent))
    from telemetry import ServingProcess

    env = {**os.environ, "TRACEDRAY_TEMP_DIR": os.path.join(temp_root, engine)}
    env.pop("OTEL_SDK_DISABLED", None)
    return ServingProcess([python, __file__, "--serve", engine, "--tasks", str(tasks)], env,
                          engine)


def summarize(rounds: list[dict[str, dict[str, float]]],
              memory: dict[str, dict[str, float]]) -> dict[str, Any]:
    sys.path.insert(0, str(Path(__file__).parent))
    from telemetry import median_interval

    figures: dict[str, Any] = {}
    for key, higher in HIGHER_IS_BETTER.items():
        ours = [r["tracedray"][key] for r in rounds]
        theirs = [r["ray"][key] for r in rounds]
        ratios = [(o / t if higher else t / o) for o, t in zip(ours, theirs, strict=True)]
        figures[key] = {"tracedray": statistics.median(ours), "ray": statistics.median(theirs),
                        "ratio": statistics.median(ratios),
                        "interval": median_interval(ratios), "ratios": ratios}
    for key in ("raylet_rss_mb", "cluster_rss_mb"):
        ours_mb, theirs_mb = memory["tracedray"][key], memory["ray"][key]
        figures[key] = {"tracedray": ours_mb, "ray": theirs_mb, "ratio": theirs_mb / ours_mb}
    return figures


def pool(paths: list[Path]) -> None:
    """Each figure's per-round ratios of runs saved with ``--json``, taken together: their
    median and a bootstrap interval that resamples runs, then rounds within them."""
    sys.path.insert(0, str(Path(__file__).parent))
    from telemetry import pooled_interval

    saved = [json.loads(path.read_text()) for path in paths]
    for key in HIGHER_IS_BETTER:
        runs = [run["figures"][key]["ratios"] for run in saved]
        low, high = pooled_interval(runs)
        print(f"{key:20} ratio {statistics.median([r for run in runs for r in run]):.2f} "
              f"[{low:.2f}, {high:.2f}]  ({sum(map(len, runs))} rounds of {len(runs)} runs)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--tasks", type=int, default=5000)
    parser.add_argument("--ray-python", default="/tmp/rayvenv/bin/python")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--pool", type=Path, nargs="+", metavar="FILE",
                        help="run nothing: pool the rounds of runs saved with --json")
    parser.add_argument("--serve", choices=("tracedray", "ray"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.pool:
        pool(args.pool)
        return
    if args.serve:
        serve(args.serve, args.tasks)
        return
    with tempfile.TemporaryDirectory(prefix="submission-bench-") as temp_root:
        sides = [_side("tracedray", sys.executable, args.tasks, temp_root),
                 _side("ray", args.ray_python, args.tasks, temp_root)]
        try:
            memory = {side.label: side.answer() for side in sides}
            rounds = []
            for index in range(args.rounds):
                order = sides if index % 2 == 0 else sides[::-1]
                rounds.append({side.label: side.ask("go") for side in order})
                print(f"round {index + 1}: " + json.dumps(rounds[-1]), file=sys.stderr)
        finally:
            for side in sides:
                side.close()
    figures = summarize(rounds, memory)
    for key, figure in figures.items():
        interval = figure.get("interval")
        spread = f" [{interval[0]:.2f}, {interval[1]:.2f}]" if interval else ""
        print(f"{key:20} tracedray {figure['tracedray']:10.1f}  ray {figure['ray']:10.1f}  "
              f"ratio {figure['ratio']:.2f}{spread}")
    if args.json:
        args.json.write_text(json.dumps({"tasks": args.tasks, "rounds": rounds,
                                         "memory": memory, "figures": figures}, indent=1))


if __name__ == "__main__":
    main()
