"""How long the trace-store commands take as a session grows (issue 24), before and after.

Each size (default 1,000 and 20,000 tasks) gets a cluster of its own (``tracedray start
--head``, 2 CPUs), given that many tasks by a driver (each task prints a line, every
hundredth one also puts 200 KB into the object store). Timing starts once each node's
agent (nice 19) has converted and indexed the burst ("agent_caught_up_s"). Then, with
every cluster up, each command runs as a user runs it (a fresh ``tracedray`` process):
once per size to warm the page cache, then ``--repeat`` rounds, each round running it on
every size back to back, so the sizes compared see the same moment's load on a shared
machine:

    trace ID, logs --task ID, get task ID, list tasks --limit 10, memory --timeline,
    timeline --task ID, summary tasks, --version (the floor: Python and the CLI start)

Kept per size and command: the median wall and CPU time (of the command's process) with
the range of the runs; per command, the largest size's median CPU over the smallest's
and the range of that ratio over the rounds. On a loaded machine the wall time of the
same command moves by tens of percent, its CPU time much less.

"after" is this checkout. "before" is the same commands from another commit's code
(``--before REV``, default the commit before the index: its ``src`` from ``git archive``,
first on PYTHONPATH) against the same clusters, alternated with "after"; that code ignores
the index and reads every file, and its ``list``/``get`` pull every task from the GCS.

Also printed: each session's bytes on disk per task (spans, logs, GCS tables, index).

Usage: python benchmarks/trace_store.py [--sizes 1000 20000] [--repeat 3]
                                        [--before REV | --no-before] [--save DIR]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import resource
import statistics
import subprocess
import sys
import tarfile
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
BEFORE_REV = "c99fd07"  # the last commit before the trace index and server-side queries

DRIVER = textwrap.dedent("""
    import json, sys
    import tracedray as ray

    ray.init(address="auto")

    @ray.remote
    def step(i):
        print("step", i, "done")
        return i

    count = int(sys.argv[1])
    picked = None
    kept = []
    for start in range(0, count, 500):
        refs = [step.remote(i) for i in range(start, min(count, start + 500))]
        ray.get(refs)
        if picked is None:
            picked = refs[len(refs) // 2].task_id().hex()
        for i in range(start, min(count, start + 500), 100):
            kept.append(ray.put(b"x" * 200_000))
        del kept[:-5]
    print(json.dumps({"task": picked}), flush=True)
    ray.shutdown()
""")


def _cli(env: dict[str, str], *args: str, check: bool = True) -> tuple[float, float]:
    """Run one command; (its wall time, its process's CPU time) in seconds. The CPU time
    moves much less than the wall time on a shared, loaded machine."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", "from tracedray.cli.app import app; app()",
                           *args], env=env, capture_output=True, text=True, timeout=900)
    took = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if check and done.returncode != 0:
        raise SystemExit(f"tracedray {' '.join(args)} failed ({done.returncode}):\n"
                         f"{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return took, cpu


def _wait_quiet(session: Path, timeout_s: float = 600.0) -> float:
    """Wait until the node's agent has converted and indexed the burst (it competes for
    the CPU with the commands timed otherwise); returns how long that took."""
    import sqlite3

    started = time.monotonic()
    index = session / "trace_index.sqlite"
    while time.monotonic() - started < timeout_s:
        try:
            conn = sqlite3.connect(f"{index.as_uri()}?mode=ro", uri=True)
            done = dict(conn.execute("SELECT kind || '/' || name, indexed_to FROM files"))
            conn.close()
        except sqlite3.Error:
            done = {}
        sizes = {f"{p.parent.name}/{p.name}": p.stat().st_size
                 for kind in ("traces", "logs") for p in (session / kind).glob("*.jsonl")}
        # Live processes keep logging a little; what the agent had not converted yet a
        # command converts itself, as it does for a user.
        if sizes and all(done.get(name) == size for name, size in sizes.items()):
            break
        time.sleep(1.0)
    return time.monotonic() - started


def _before_tree(rev: str, folder: Path) -> Path:
    archive = folder / "before.tar"
    with open(archive, "wb") as out:
        subprocess.run(["git", "-C", str(ROOT), "archive", rev, "src"], stdout=out, check=True)
    with tarfile.open(archive) as tar:
        tar.extractall(folder / "before", filter="data")
    return folder / "before" / "src"


def _session(temp_root: Path) -> Path:
    return max(temp_root.glob("session_2*"), key=lambda p: p.stat().st_mtime)


def _disk(session: Path) -> dict[str, int]:
    def size(paths: list[Path]) -> int:
        return sum(p.stat().st_size for p in paths if p.is_file())

    return {"traces": size(list((session / "traces").glob("*"))),
            "logs": size(list((session / "logs").glob("*"))),
            "gcs": size(list(session.glob("gcs.sqlite3*"))),
            "index": size(list(session.glob("trace_index.sqlite*")))}


COMMANDS = {
    "trace": lambda task: ("trace", task, "--format", "json"),
    "logs --task": lambda task: ("logs", "--task", task),
    "get task": lambda task: ("get", "task", task, "--format", "json"),
    "list tasks --limit 10": lambda task: ("list", "tasks", "--limit", "10", "--format", "json"),
    "memory --timeline": lambda task: ("memory", "--timeline", "--format", "json"),
    "timeline --task": lambda task: ("timeline", "--task", task, "--output", "-"),
    "summary tasks": lambda task: ("summary", "tasks", "--format", "json"),
    # the floor: starting Python and the CLI, reading nothing
    "--version": lambda task: ("--version",),
}


def _run_once(env: dict[str, str], args: tuple[str, ...]) -> tuple[float, float]:
    return _cli(env, *args)


def _summary(runs: list[tuple[float, float]]) -> dict[str, Any]:
    return {"wall_s": round(statistics.median(r[0] for r in runs), 3),
            "cpu_s": round(statistics.median(r[1] for r in runs), 3),
            # the spread of the runs: on a shared machine a median alone hides it
            "wall_range_s": [round(min(r[0] for r in runs), 3), round(max(r[0] for r in runs), 3)],
            "cpu_range_s": [round(min(r[1] for r in runs), 3), round(max(r[1] for r in runs), 3)],
            "runs": len(runs)}


def _ratio_interval(small: list[float], large: list[float]) -> list[float]:
    """The range of large/small over the pairs run back to back (the same moment's load)."""
    ratios = sorted(b / a for a, b in zip(small, large, strict=True) if a > 0)
    return [round(ratios[0], 2), round(ratios[-1], 2)] if ratios else []


def _build(folder: Path, size: int, driver: Path) -> dict[str, Any]:
    """A cluster of its own (one head, 2 CPUs) given ``size`` tasks; returns its env, the
    task picked and what building it took."""
    temp_root = folder / f"root-{size}"
    env = {**os.environ, "TRACEDRAY_TEMP_DIR": str(temp_root)}
    env.pop("TRACEDRAY_ADDRESS", None)
    _cli(env, "start", "--head", "--port", "0", "--num-cpus", "2")
    started = time.perf_counter()
    out = subprocess.run([sys.executable, str(driver), str(size)], env=env,
                         capture_output=True, text=True, timeout=3600, check=True)
    made_s = time.perf_counter() - started
    task = json.loads(out.stdout.strip().splitlines()[-1])["task"]
    quiet_s = _wait_quiet(_session(temp_root))
    disk = _disk(_session(temp_root))
    print(f"{size:>7} tasks made in {made_s:.0f} s, agent caught up in {quiet_s:.0f} s, "
          f"{round(sum(disk.values()) / size)} B/task {disk}", flush=True)
    return {"env": env, "task": task, "row": {
        "tasks_made_s": round(made_s, 1), "agent_caught_up_s": round(quiet_s, 1),
        "disk_bytes": disk, "disk_bytes_per_task": round(sum(disk.values()) / size)}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 20000])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--before", default=BEFORE_REV)
    parser.add_argument("--save", type=Path, default=None)
    parser.add_argument("--no-before", action="store_true",
                        help="time this checkout only (the old code takes minutes at 200k)")
    args = parser.parse_args()
    results: dict[str, Any] = {"sizes": {}, "before_rev": args.before,
                               "commit": subprocess.run(
                                   ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                                   capture_output=True, text=True).stdout.strip(),
                               "date": datetime.datetime.now(datetime.timezone.utc).isoformat(),
                               "cpus": os.cpu_count(), "design": "paired"}
    sizes = sorted(args.sizes)
    with tempfile.TemporaryDirectory(prefix="td-bench-store-") as folder:
        driver = Path(folder) / "driver.py"
        driver.write_text(DRIVER)
        before_path = None if args.no_before else str(_before_tree(args.before, Path(folder)))
        clusters: dict[int, dict[str, Any]] = {}
        try:
            for size in sizes:
                clusters[size] = _build(Path(folder), size, driver)
                results["sizes"][str(size)] = clusters[size]["row"]
            # Every size's cluster is up: each command runs on each size in turn, so the
            # sizes compared see the same moment's load on this shared machine.
            engines = {"after": None} if before_path is None else {"after": None,
                                                                   "before": before_path}
            for name, command in COMMANDS.items():
                runs: dict[tuple[int, str], list[tuple[float, float]]] = {}
                for size in sizes:
                    for engine, path in engines.items():
                        env = clusters[size]["env"] if path is None else \
                            {**clusters[size]["env"], "PYTHONPATH": path}
                        _run_once(env, command(clusters[size]["task"]))  # warm: page cache
                        runs[(size, engine)] = []
                for _ in range(args.repeat):
                    for size in sizes:
                        for engine, path in engines.items():
                            env = clusters[size]["env"] if path is None else \
                                {**clusters[size]["env"], "PYTHONPATH": path}
                            runs[(size, engine)].append(
                                _run_once(env, command(clusters[size]["task"])))
                for size in sizes:
                    row = results["sizes"][str(size)]
                    row[name] = {engine: _summary(runs[(size, engine)]) for engine in engines}
                    after = row[name]["after"]
                    print(f"{size:>7} tasks  {name:<24} wall {after['wall_s']:7.3f} s "
                          f"{after['wall_range_s']}  cpu {after['cpu_s']:6.3f} s "
                          f"{after['cpu_range_s']}", flush=True)
                if len(sizes) > 1:
                    small, large = runs[(sizes[0], "after")], runs[(sizes[-1], "after")]
                    results.setdefault("growth_after", {})[name] = {
                        "cpu_s": round(statistics.median(r[1] for r in large)
                                       / statistics.median(r[1] for r in small), 2),
                        "cpu_pair_range": _ratio_interval([r[1] for r in small],
                                                          [r[1] for r in large]),
                        "wall_s": round(statistics.median(r[0] for r in large)
                                        / statistics.median(r[0] for r in small), 2)}
                    print(f"         {name}: cpu {sizes[-1]}/{sizes[0]} = "
                          f"{results['growth_after'][name]}", flush=True)
        finally:
            for cluster in clusters.values():
                _cli(cluster["env"], "stop", check=False)
    if args.save:
        args.save.mkdir(parents=True, exist_ok=True)
        name = "trace_store_after_only.json" if args.no_before else "trace_store.json"
        (args.save / name).write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
