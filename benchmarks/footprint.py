"""Memory footprint of an idle cluster: tracedray next to Ray, a fresh cluster each run.

Each run starts one engine's cluster in a serving driver (this file with ``--serve``),
warms it (``WARM_TASKS`` empty tasks, an actor answering ``WARM_CALLS`` calls, ``WARM_PUTS``
puts of 1 MiB gotten back), leaves it idle for ``--idle`` seconds with the actor alive,
then reads the memory of every process of the cluster (the driver and all it started,
recursively) from /proc and shuts the cluster down. Engines alternate run by run (ABBA).

Figures per run: the raylet's RSS (VmRSS), its PSS and its private memory (USS:
pages no other process maps; shared-library pages that other Python processes map
too are left out), and the cluster's RSS, in total and by role (driver, GCS, raylet,
workers, others). The summary gives each figure's median per engine, with a 95%
bootstrap interval of the median, and Ray's/tracedray's ratio of the medians (> 1:
tracedray is smaller).

``--baseline-src DIR`` adds a third engine, tracedray with its package taken from
``DIR`` (a checkout's ``src``) through ``PYTHONPATH``: before and after in the same run.

Usage: python benchmarks/footprint.py [--runs 7] [--idle 3] [--json out.json]
                                      [--baseline-src DIR] [--ray-python PYTHON]
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

sys.path.insert(0, str(Path(__file__).parent))
from submission import _cmdline, _descendants  # noqa: E402
from telemetry import ServingProcess, median_interval  # noqa: E402

WARM_TASKS, WARM_CALLS, WARM_PUTS = 1_000, 200, 10
MB = 1 << 20
ROLES = ("driver", "gcs", "raylet", "workers", "agent", "others")
WORKER_MODULES = ("tracedray.api.worker_main", "tracedray.core.worker.main")
FIGURES = ("raylet_rss_mb", "raylet_pss_mb", "raylet_uss_mb", "cluster_rss_mb",
           *(f"{role}_rss_mb" for role in ROLES))


def _role(command: str) -> str:
    """The role of a process of the cluster (not the driver) by its command line."""
    program = command.split(" ", 1)[0]
    if "tracedray.core.raylet.main" in command or program.endswith("/raylet"):
        return "raylet"
    if "tracedray.core.gcs.main" in command or program.endswith("/gcs_server"):
        return "gcs"
    if any(module in command for module in WORKER_MODULES) or command.startswith("ray::") \
            or "default_worker.py" in command:
        return "workers"
    if "tracedray.core.raylet.telemetry_agent" in command:
        return "agent"
    return "others"


def _memory_kb(pid: int) -> dict[str, int]:
    """VmRSS, Pss and private (clean + dirty) memory of ``pid`` in kB; zeros if it is gone."""
    found = {"Rss": 0, "Pss": 0, "Private_Clean": 0, "Private_Dirty": 0}
    try:
        with open(f"/proc/{pid}/smaps_rollup") as rollup:
            for line in rollup:
                name, _, rest = line.partition(":")
                if name in found:
                    found[name] = int(rest.split()[0])
    except (OSError, ValueError):
        pass
    return {"rss": found["Rss"], "pss": found["Pss"],
            "uss": found["Private_Clean"] + found["Private_Dirty"]}


def measure(root: int) -> dict[str, Any]:
    """The memory figures of the process tree under ``root`` (MB) and its processes."""
    processes = []
    for pid in _descendants(root):
        memory = _memory_kb(pid)
        if memory["rss"]:
            command = _cmdline(pid)[:160]
            processes.append({"pid": pid, "role": "driver" if pid == root else _role(command),
                              "command": command, **memory})
    return {"figures": figures_of(processes), "processes": processes}


def figures_of(processes: list[dict[str, Any]]) -> dict[str, float]:
    figures: dict[str, float] = {f"{role}_rss_mb": 0.0 for role in ROLES}
    for process in processes:
        figures[f"{process['role']}_rss_mb"] += process["rss"] / 1024
    raylets = [p for p in processes if p["role"] == "raylet"]
    for kind in ("rss", "pss", "uss"):
        figures[f"raylet_{kind}_mb"] = sum(p[kind] for p in raylets) / 1024
    figures["cluster_rss_mb"] = sum(p["rss"] for p in processes) / 1024
    return figures


def _empty() -> None:
    return None


class _Pinger:
    def ping(self) -> None:
        return None


def serve(engine: str, idle_s: float) -> None:
    if engine == "ray":
        import ray as rt
    else:
        import tracedray as rt  # type: ignore[no-redef]

    rt.init(num_cpus=2, object_store_memory=256 << 20)
    try:
        empty, actor = rt.remote(_empty), rt.remote(_Pinger).remote()
        rt.get([empty.remote() for _ in range(WARM_TASKS)])  # type: ignore[attr-defined]
        rt.get([actor.ping.remote() for _ in range(WARM_CALLS)])
        for _ in range(WARM_PUTS):
            rt.get(rt.put(b"x" * MB))
        time.sleep(idle_s)
        print(json.dumps(measure(os.getpid())), flush=True)
        sys.stdin.readline()
    finally:
        rt.shutdown()


def _run(engine: str, python: str, idle_s: float, temp_root: str,
         source: str | None) -> dict[str, Any]:
    env = {**os.environ, "TRACEDRAY_TEMP_DIR": os.path.join(temp_root, engine)}
    env.pop("OTEL_SDK_DISABLED", None)
    if source is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [source, env.get("PYTHONPATH")]))
    kind = "ray" if engine == "ray" else "tracedray"
    side = ServingProcess([python, __file__, "--serve", kind, "--idle", str(idle_s)], env,
                          engine)
    try:
        return side.answer()
    finally:
        side.close()


def summarize(runs: list[dict[str, Any]], engines: list[str]) -> dict[str, Any]:
    summary: dict[str, Any] = {}
    for key in FIGURES:
        per_engine = {}
        for engine in engines:
            values = [run[engine]["figures"][key] for run in runs]
            low, high = median_interval(values)
            per_engine[engine] = {"median": statistics.median(values), "interval": [low, high],
                                  "values": values}
        if "ray" in per_engine and per_engine["tracedray"]["median"]:
            per_engine["ray_over_tracedray"] = (per_engine["ray"]["median"]
                                                / per_engine["tracedray"]["median"])
        summary[key] = per_engine
    return summary


def resummarized(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Saved runs with each process's role and the figures worked out again."""
    for run in runs:
        for measured in run.values():
            for process in measured["processes"]:
                if process["role"] != "driver":
                    process["role"] = _role(process["command"])
            measured["figures"] = figures_of(measured["processes"])
    return runs


def report(runs: list[dict[str, Any]], save: Path | None,
           load_average: list[float]) -> None:
    engines = list(runs[0])
    summary = summarize(runs, engines)
    for key, per_engine in summary.items():
        cells = "  ".join(f"{engine} {per_engine[engine]['median']:7.1f} "
                          f"[{per_engine[engine]['interval'][0]:.1f}, "
                          f"{per_engine[engine]['interval'][1]:.1f}]" for engine in engines)
        ratio = per_engine.get("ray_over_tracedray")
        print(f"{key:16} {cells}" + (f"  ray/tracedray {ratio:.2f}" if ratio else ""))
    if save:
        save.write_text(json.dumps({"load_average": load_average, "runs": runs,
                                    "summary": summary}, indent=1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--idle", type=float, default=3.0, help="seconds idle before reading")
    parser.add_argument("--ray-python", default="/tmp/rayvenv/bin/python")
    parser.add_argument("--no-ray", action="store_true")
    parser.add_argument("--baseline-src", help="a tracedray src folder to compare against")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--resummarize", type=Path,
                        help="summarize the runs of a saved --json file again")
    parser.add_argument("--serve", choices=("tracedray", "ray"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.serve, args.idle)
        return
    if args.resummarize:
        saved = json.loads(args.resummarize.read_text())
        report(resummarized(saved["runs"]), args.json, saved["load_average"])
        return
    engines = ["tracedray"] + (["baseline"] if args.baseline_src else []) \
        + ([] if args.no_ray else ["ray"])
    pythons = {"tracedray": sys.executable, "baseline": sys.executable, "ray": args.ray_python}
    sources = {"baseline": args.baseline_src}
    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="footprint-bench-") as temp_root:
        for index in range(args.runs):
            order = engines if index % 2 == 0 else engines[::-1]
            run = {engine: _run(engine, pythons[engine], args.idle, temp_root,
                                sources.get(engine)) for engine in order}
            runs.append(run)
            print(f"run {index + 1}: " + json.dumps(
                {engine: {k: round(v, 1) for k, v in run[engine]["figures"].items()
                          if k.startswith(("raylet", "cluster"))} for engine in engines}),
                file=sys.stderr)
    report(runs, args.json, list(os.getloadavg()))


if __name__ == "__main__":
    main()
