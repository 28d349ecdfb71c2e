"""GCS memory under an endless task stream, with and without flushing (the Ray paper's Fig. 10b).

For each configuration — storage ``memory`` (hot dict + SQLite cold tier) or ``redis``
(a real redis-server), flushing on or off — a fresh 2-CPU cluster runs a stream of
empty tasks (``--tasks``, 200,000 by default, or until ``--max-seconds`` per run) in
batches, while a thread samples the GCS process's RSS every ``--sample-s`` seconds.

Printed per configuration: the series (seconds, tasks done, RSS MiB) and a summary:
RSS growth after warm-up (the first ``--warmup`` fraction of the samples) and the
max/min spread after warm-up, which the issue wants within 10% with flushing on.
A plot of RSS against tasks completed is saved to ``--plot``.

Each configuration runs in its own interpreter (``--child``), so one run's memory or
threads never colour another's.

``--burst N`` measures the other shape (issue 23, item 5): N empty tasks submitted at
once, then waited for, with ``--busy K`` processes spinning on the CPUs meanwhile (a busy
machine). Printed per storage: the GCS's idle RSS (median over 2 s before the burst), its
peak during the burst and the difference, which the issue wants within +50 MB.

Run: ``.venv/bin/python benchmarks/gcs_flush.py [--tasks 200000] [--max-seconds 240]
[--configs memory:on,memory:off,redis:on,redis:off] [--plot gcs_flush.png] [--json out.json]``
or ``... gcs_flush.py --burst 100000 [--busy 2] [--configs memory:on,redis:on]``
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from typing import Any

BATCH = 2_000


@dataclass(frozen=True)
class Config:
    storage: str  # "memory" | "redis"
    flushing: bool

    @property
    def label(self) -> str:
        return f"{self.storage}, flushing {'on' if self.flushing else 'off'}"

    @classmethod
    def parse(cls, text: str) -> Config:
        storage, _, flush = text.partition(":")
        if storage not in ("memory", "redis") or flush not in ("on", "off"):
            raise SystemExit(f"bad config {text!r}: use memory|redis:on|off")
        return cls(storage, flush == "on")


def summarize(series: list[tuple[float, int, int]], warmup: float) -> dict[str, float]:
    """Growth and spread of RSS after warm-up; a pure function of the samples."""
    rss = [sample[2] for sample in series]
    if len(rss) < 3:
        return {"samples": len(rss), "growth_mib": float("nan"), "spread": float("nan")}
    start = max(1, int(len(rss) * warmup))
    settled = rss[start:]
    return {
        "samples": len(rss),
        "tasks": series[-1][1],
        "seconds": series[-1][0],
        "rss_start_mib": rss[start] / 2**20,
        "rss_end_mib": rss[-1] / 2**20,
        "growth_mib": (rss[-1] - rss[start]) / 2**20,
        # (max - min) / min after warm-up: "flat within 10%" means spread <= 0.10.
        "spread": (max(settled) - min(settled)) / min(settled),
    }


# --- the child: one configuration ---------------------------------------------------------


def run_child(storage: str, flushing: bool, tasks: int, max_seconds: float,
              sample_s: float) -> None:
    import psutil

    os.environ["TRACEDRAY_GCS_STORAGE"] = storage
    os.environ["TRACEDRAY_GCS_FLUSH_ENABLED"] = "1" if flushing else "0"
    os.environ.setdefault("TRACEDRAY_LOG_TO_DRIVER", "0")
    import tracedray
    from tracedray.core.gcs.client import GcsClient

    info = tracedray.init(num_cpus=2, object_store_memory=256 << 20)
    [gcs] = [p for p in psutil.Process().children(recursive=True)
             if "tracedray.core.gcs.main" in p.cmdline()]

    @tracedray.remote
    def noop() -> None:
        return None

    done = 0
    series: list[tuple[float, int, int]] = []
    stop = threading.Event()
    started = time.monotonic()

    def sample() -> None:
        while True:
            series.append((round(time.monotonic() - started, 2), done, gcs.memory_info().rss))
            if stop.wait(sample_s):
                return

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    while done < tasks and time.monotonic() - started < max_seconds:
        tracedray.get([noop.remote() for _ in range(BATCH)])
        done += BATCH
    stop.set()
    sampler.join()
    status = GcsClient(info["address"]).cluster_status()
    tracedray.shutdown()
    print(json.dumps({"series": series, "tasks": done, "recorded": status.num_tasks,
                      "storage": status.storage}))


def spin(seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        pass


def run_burst_child(storage: str, tasks: int, busy: int, sample_s: float) -> None:
    import multiprocessing

    import psutil

    os.environ["TRACEDRAY_GCS_STORAGE"] = storage
    os.environ.setdefault("TRACEDRAY_LOG_TO_DRIVER", "0")
    import tracedray

    tracedray.init(num_cpus=2, object_store_memory=256 << 20)
    [gcs] = [p for p in psutil.Process().children(recursive=True)
             if "tracedray.core.gcs.main" in p.cmdline()]

    @tracedray.remote
    def noop() -> None:
        return None

    tracedray.get([noop.remote() for _ in range(1000)])  # warm: workers up, function known
    time.sleep(3.0)  # the warm-up's records flushed
    idle = []
    for _ in range(10):
        idle.append(gcs.memory_info().rss)
        time.sleep(0.2)
    series: list[tuple[float, int]] = []
    stop = threading.Event()
    started = time.monotonic()

    def sample() -> None:
        while True:
            series.append((round(time.monotonic() - started, 2), gcs.memory_info().rss))
            if stop.wait(sample_s):
                return

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    spinners = [multiprocessing.Process(target=spin, args=(3600.0,), daemon=True)
                for _ in range(busy)]
    for spinner in spinners:
        spinner.start()
    try:
        refs = [noop.remote() for _ in range(tasks)]
        submitted_s = time.monotonic() - started
        tracedray.get(refs)
        done_s = time.monotonic() - started
        del refs
        time.sleep(3.0)  # the tail: what the GCS keeps after the burst
    finally:
        for spinner in spinners:
            spinner.kill()
        stop.set()
        sampler.join()
    tracedray.shutdown()
    idle_rss = sorted(idle)[len(idle) // 2]
    peak = max(rss for _, rss in series)
    print(json.dumps({"series": series, "tasks": tasks, "busy": busy,
                      "submitted_s": round(submitted_s, 2), "done_s": round(done_s, 2),
                      "idle_mib": idle_rss / 2**20, "peak_mib": peak / 2**20,
                      "growth_mib": (peak - idle_rss) / 2**20,
                      "end_mib": series[-1][1] / 2**20}))


def run_burst(storage: str, args: argparse.Namespace, redis_url: str) -> dict[str, Any]:
    root = tempfile.mkdtemp(prefix="tracedray-bench-burst-")
    env = dict(os.environ, TRACEDRAY_TEMP_DIR=root)
    command = [sys.executable, __file__, "--burst-child", redis_url or "memory",
               str(args.burst), str(args.busy), str(min(args.sample_s, 0.2))]
    try:
        done = subprocess.run(command, env=env, capture_output=True, text=True, check=False,
                              timeout=1800)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    if done.returncode != 0:
        raise SystemExit(f"burst on {storage} failed:\n{done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    result["storage"] = storage
    print(f"{storage:8} {result['tasks']} tasks (submitted in {result['submitted_s']} s, done "
          f"in {result['done_s']} s, {result['busy']} spinning): GCS RSS idle "
          f"{result['idle_mib']:.1f} MiB, peak {result['peak_mib']:.1f} MiB "
          f"({result['growth_mib']:+.1f} MiB), after {result['end_mib']:.1f} MiB")
    return result


# --- the parent -----------------------------------------------------------------------------


def run_config(config: Config, args: argparse.Namespace, redis_url: str) -> dict[str, Any]:
    root = tempfile.mkdtemp(prefix="tracedray-bench-gcs-")
    env = dict(os.environ, TRACEDRAY_TEMP_DIR=root)
    storage = redis_url if config.storage == "redis" else "memory"
    command = [sys.executable, __file__, "--child", storage, "1" if config.flushing else "0",
               str(args.tasks), str(args.max_seconds), str(args.sample_s)]
    try:
        done = subprocess.run(command, env=env, capture_output=True, text=True, check=False,
                              timeout=args.max_seconds + 300)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    if done.returncode != 0:
        raise SystemExit(f"{config.label} failed:\n{done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    result["summary"] = summarize([tuple(s) for s in result["series"]], args.warmup)
    return result


def print_result(config: Config, result: dict[str, Any]) -> None:
    print(f"\n== {config.label}: {result['tasks']} tasks, {result['recorded']} recorded "
          f"({result['storage']})")
    print(f"{'t (s)':>8} {'tasks':>9} {'RSS MiB':>9}")
    for seconds, tasks, rss in result["series"]:
        print(f"{seconds:8.1f} {tasks:9d} {rss / 2**20:9.1f}")
    s = result["summary"]
    print(f"after warm-up: RSS {s['rss_start_mib']:.1f} -> {s['rss_end_mib']:.1f} MiB "
          f"(growth {s['growth_mib']:+.1f} MiB), spread {s['spread']:.1%}")


def plot(results: dict[Config, dict[str, Any]], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(8, 5))
    for config, result in results.items():
        series = result["series"]
        axes.plot([s[1] for s in series], [s[2] / 2**20 for s in series], label=config.label,
                  linestyle="-" if config.flushing else "--")
    axes.set_xlabel("tasks completed")
    axes.set_ylabel("GCS RSS (MiB)")
    axes.set_title("GCS memory under a stream of empty tasks")
    axes.grid(alpha=0.3)
    axes.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    print(f"\nplot saved to {path}")


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--burst-child":
        storage, tasks, busy, sample_s = sys.argv[2:6]
        run_burst_child(storage, int(tasks), int(busy), float(sample_s))
        return
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        storage, flushing, tasks, max_seconds, sample_s = sys.argv[2:7]
        run_child(storage, flushing == "1", int(tasks), float(max_seconds), float(sample_s))
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=200_000)
    parser.add_argument("--max-seconds", type=float, default=240.0,
                        help="stop a configuration's stream after this long")
    parser.add_argument("--sample-s", type=float, default=1.0)
    parser.add_argument("--warmup", type=float, default=0.2,
                        help="fraction of the samples treated as warm-up")
    parser.add_argument("--configs", default="memory:on,memory:off,redis:on,redis:off")
    parser.add_argument("--plot", default="gcs_flush.png")
    parser.add_argument("--json", default="")
    parser.add_argument("--burst", type=int, default=0,
                        help="N tasks submitted at once instead of the stream (item 5)")
    parser.add_argument("--busy", type=int, default=2,
                        help="with --burst: processes spinning on the CPUs meanwhile")
    args = parser.parse_args()
    configs = [Config.parse(text) for text in args.configs.split(",")]

    from tracedray.testing.redis_server import RedisServer

    if args.burst:
        bursts = []
        for config in configs:
            if config.storage == "redis":
                with RedisServer(appendfsync="everysec") as server:
                    bursts.append(run_burst("redis", args, server.url))
            else:
                bursts.append(run_burst("memory", args, ""))
        print("goal: peak - idle <= +50 MB (47.7 MiB)")
        if args.json:
            with open(args.json, "w") as out:
                json.dump(bursts, out, indent=1)
        return

    results: dict[Config, dict[str, Any]] = {}
    for config in configs:
        if config.storage == "redis":
            # A fresh server per run: the "off" run must not start with the "on" run's data.
            with RedisServer(appendfsync="everysec") as server:
                results[config] = run_config(config, args, server.url)
        else:
            results[config] = run_config(config, args, "")
        print_result(config, results[config])
    print("\n== summary (goal: flushing on -> spread <= 10% after warm-up; off -> growing)")
    for config, result in results.items():
        s = result["summary"]
        print(f"{config.label:24} growth {s['growth_mib']:+7.1f} MiB  spread {s['spread']:6.1%}"
              f"  ({result['tasks']} tasks in {s['seconds']:.0f}s)")
    if args.plot:
        plot(results, args.plot)
    if args.json:
        with open(args.json, "w") as out:
            json.dump({c.label: r for c, r in results.items()}, out, indent=1)


if __name__ == "__main__":
    main()
