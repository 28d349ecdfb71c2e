"""What telemetry costs the runtime: throughput with it fully on versus off.

"On" is the default: every span written to the session's trace files, every log
line to the log files. "Off" is ``OTEL_SDK_DISABLED=true`` (spans become no-ops;
log lines stay, they are not part of the OTel switch).

The variable is read once per process, so the two cases are two drivers, each with
its own cluster, started side by side and kept alive for the whole benchmark. They
take turns: a workload runs once on one cluster while the other idles, then once on
the other, in ABBA order (on, off, off, on, ...), for every round. Each pair of
adjacent runs gives one on/off ratio. On this shared 2-core machine the speed of the
same run moves by ±30% within a minute; runs a few seconds apart see nearly the same
machine, and the median of many such pairs is the figure least moved by it.

Spans the telemetry agent put off converting while a run kept the machine busy are
converted (in a separate process) after the run and outside its timing, so that
backlog never lands in the other cluster's run; its CPU counts in the "cluster CPU
per op" figure, which says what a workload costs rather than how fast it went.

Printed per workload: the median on/off ratio of the pairs (1.0 = free; the goal
is >= 0.85, docs/telemetry.md "Cost"), a 95% bootstrap interval for that median, the spread of the
pairs, the median ops/s of each side, and the cluster's CPU per op. The verdict says
"meets" only when every workload's interval lies at or above the goal, "MISSES" when
one lies wholly below it, and "too close to call" otherwise.

``--control`` runs the same benchmark with telemetry on in both clusters (an A/A
run): its ratios would all be 1.00 on a quiet machine, so how far they stray is how
far this machine's noise alone moves the figure.

One run cannot place a figure that is within this machine's noise of the goal.
``--save FILE`` keeps a run's pairs (with the steal share and the commit), and
``--pool FILE...`` reads several saved runs (say, a day's) and gives the median of all
their pairs, with an interval that resamples whole runs as well as the pairs within
them, so it also holds how far one run differs from another.

Usage: python benchmarks/telemetry.py [--rounds N] [--tasks N] [--control] [--only TEXT]
                                      [--save FILE]
       python benchmarks/telemetry.py --pool FILE [FILE ...]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

GOAL = 0.85
EMPTY, ROUND_TRIPS = "empty tasks/s (submit all, get all)", "task round trips/s"
PUT_GET_SMALL, PUT_GET_1MB = "put+get small/s", "put+get 1 MiB/s"
WORKLOADS = (EMPTY, ROUND_TRIPS, PUT_GET_SMALL, PUT_GET_1MB)


# --------------------------------------------------------------------------- a side


def _cluster_cpu_s() -> float:
    """CPU seconds used so far by this driver and every process of its cluster."""
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


def _convert_backlog() -> float:
    """Turn every span spool of the session into JSON lines and copy every log spool's
    lines to its public file, now (what the telemetry agent does when the machine has
    room), in a separate process so the driver under test keeps its own heap; returns
    the CPU seconds the conversion took (the process's start-up left out)."""
    from tracedray.api.calls import current_session_dir

    done = subprocess.run(
        [sys.executable, "-c",
         "import pathlib, sys, time\n"
         "from tracedray.telemetry.line_spool import sync_lines_dir\n"
         "from tracedray.telemetry.spool_convert import sync_traces_dir\n"
         "start = time.process_time()\n"
         "session = pathlib.Path(sys.argv[1])\n"
         "sync_traces_dir(session / 'traces')\n"
         "sync_lines_dir(session / 'logs')\n"
         "print(time.process_time() - start)",
         str(current_session_dir())],
        check=True, timeout=600, capture_output=True, text=True)
    return float(done.stdout.strip().splitlines()[-1])


def _workloads(tasks: int) -> dict[str, tuple[int, Callable[[], Any]]]:
    """name -> (operations per run, one run)."""
    import numpy as np

    import tracedray

    @tracedray.remote
    def empty() -> None:
        return None

    def burst() -> None:
        tracedray.get([empty.remote() for _ in range(tasks)])

    def round_trips() -> None:
        for _ in range(500):
            tracedray.get(empty.remote())

    small = {"key": "value", "numbers": list(range(16))}

    def put_get_small() -> None:
        for _ in range(5000):
            tracedray.get(tracedray.put(small))

    array = np.ones(1 << 17)  # 1 MiB: goes through the shared-memory store

    def put_get_1mb() -> None:
        for _ in range(300):
            tracedray.get(tracedray.put(array))

    return {EMPTY: (tasks, burst), ROUND_TRIPS: (500, round_trips),
            PUT_GET_SMALL: (5000, put_get_small), PUT_GET_1MB: (300, put_get_1mb)}


def serve(tasks: int) -> None:
    """One side: start a cluster, then run what the coordinator asks for on stdin.

    Each request is a workload's name; the answer (one JSON line on stdout) is its
    ops/s and the cluster's CPU µs per op, the backlog's conversion included.
    """
    import tracedray

    tracedray.init(num_cpus=2, object_store_memory=512 << 20)
    try:
        workloads = _workloads(tasks)
        for _count, run in workloads.values():  # warm the worker pool and every path
            run()
        _convert_backlog()
        print(json.dumps({"ready": True}), flush=True)
        for line in sys.stdin:
            name = line.strip()
            if not name:
                break
            count, run = workloads[name]
            cpu_before = _cluster_cpu_s()
            start = time.perf_counter()
            run()
            elapsed = time.perf_counter() - start
            cpu = _cluster_cpu_s() - cpu_before + _convert_backlog()
            print(json.dumps({"rate": count / elapsed, "cpu_us": cpu / count * 1e6}),
                  flush=True)
    finally:
        tracedray.shutdown()


# --------------------------------------------------------------------------- coordinator


class ServingProcess:
    """A benchmark process that serves workloads: one request line on its stdin, one JSON
    answer line on its stdout; an empty line asks it to shut down."""

    def __init__(self, command: list[str], env: Mapping[str, str], label: str) -> None:
        self.label = label
        self.process = subprocess.Popen(command, env=dict(env), stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, text=True)

    def answer(self) -> dict[str, Any]:
        stdout: IO[str] | None = self.process.stdout
        assert stdout is not None
        line = stdout.readline()
        if not line:
            raise SystemExit(f"the {self.label} side ended early "
                             f"(exit code {self.process.wait()}); see its stderr above")
        answer: dict[str, Any] = json.loads(line)
        return answer

    def ask(self, request: str) -> dict[str, Any]:
        stdin = self.process.stdin
        assert stdin is not None
        stdin.write(request + "\n")
        stdin.flush()
        return self.answer()

    def close(self) -> None:
        if self.process.stdin is not None:
            try:
                self.process.stdin.write("\n")
                self.process.stdin.close()
            except OSError:
                pass
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


class Side(ServingProcess):
    """A serving driver process (telemetry on or off) and its cluster."""

    def __init__(self, telemetry_on: bool, tasks: int, temp_root: str,
                 label: str | None = None) -> None:
        label = label or ("on" if telemetry_on else "off")
        env = {**os.environ, "TRACEDRAY_TEMP_DIR": os.path.join(temp_root, label)}
        for key in ("OTEL_SDK_DISABLED", "OTEL_EXPORTER_OTLP_ENDPOINT",
                    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
            env.pop(key, None)  # "on" means the default pipeline, with no network exporter
        if not telemetry_on:
            env["OTEL_SDK_DISABLED"] = "true"
        super().__init__([sys.executable, __file__, "--serve", "--tasks", str(tasks)], env,
                         label)

    def wait_ready(self) -> None:
        self.answer()

    def run(self, workload: str) -> dict[str, float]:
        return self.ask(workload)


def cpu_ticks(stat_text: str) -> tuple[int, int] | None:
    """(all ticks, ticks stolen by the hypervisor) from the text of ``/proc/stat``; None
    when its first line has no steal column."""
    from tracedray.core.raylet.conversion_policy import machine_ticks

    ticks = machine_ticks(stat_text)
    if ticks is None or len(ticks) < 8:
        return None
    return sum(ticks), ticks[7]


def stolen_share(before: tuple[int, int] | None, after: tuple[int, int] | None) -> float | None:
    """The share of the machine's time the hypervisor gave to other guests in between."""
    if before is None or after is None or after[0] <= before[0]:
        return None
    return (after[1] - before[1]) / (after[0] - before[0])


def _read_ticks() -> tuple[int, int] | None:
    try:
        with open("/proc/stat") as stat:
            return cpu_ticks(stat.read())
    except OSError:
        return None


def _quartiles(values: list[float]) -> tuple[float, float]:
    if len(values) < 4:
        return min(values), max(values)
    q = statistics.quantiles(values, n=4)
    return q[0], q[2]


def median_interval(values: Sequence[float], confidence: float = 0.95,
                    resamples: int = 4000, seed: int = 12) -> tuple[float, float]:
    """A bootstrap interval for the median of ``values``: the middle ``confidence`` of
    the medians of ``resamples`` resamples drawn with replacement. Seeded, so the same
    values always give the same interval."""
    if not values:
        raise ValueError("no values")
    rng = random.Random(seed)
    return _middle(confidence, [statistics.median(rng.choices(values, k=len(values)))
                                for _ in range(resamples)])


def pooled_interval(runs: Sequence[Sequence[float]], confidence: float = 0.95,
                    resamples: int = 4000, seed: int = 12) -> tuple[float, float]:
    """A bootstrap interval for the median of the pairs of several runs taken together.

    Each resample draws as many runs as there are, with replacement, then within each
    drawn run as many pairs as it has, with replacement. Runs on different hours see
    different machines (steal, other guests), so pairs of one run are more alike than
    pairs of two; resampling only pairs would give an interval too narrow for that.
    Seeded, so the same runs always give the same interval."""
    runs = [list(run) for run in runs if run]
    if not runs:
        raise ValueError("no pairs")
    rng = random.Random(seed)
    medians = []
    for _ in range(resamples):
        pairs: list[float] = []
        for run in rng.choices(runs, k=len(runs)):
            pairs.extend(rng.choices(run, k=len(run)))
        medians.append(statistics.median(pairs))
    return _middle(confidence, medians)


def _middle(confidence: float, medians: list[float]) -> tuple[float, float]:
    """The bounds of the middle ``confidence`` of the resampled ``medians``."""
    medians.sort()
    tail = (1 - confidence) / 2
    return medians[int(tail * len(medians))], medians[min(len(medians) - 1,
                                                          int((1 - tail) * len(medians)))]


def goal_verdict(intervals: Mapping[str, tuple[float, float]], goal: float) -> str:
    """Whether every workload's median ratio reaches ``goal``, given each one's interval:
    "meets" when every interval lies at or above it, "MISSES" when some interval lies
    wholly below it, else "too close to call" (some interval straddles it: this run
    cannot tell, on this machine, which side the figure is on)."""
    if all(low >= goal for low, _ in intervals.values()):
        return "meets"
    if any(high < goal for _, high in intervals.values()):
        return "MISSES"
    return "too close to call"


SAVED_FORMAT = 1


class SavedRunError(ValueError):
    """A file given to --pool that is not a run saved by --save."""


def saved_run(*, control: bool, rounds: int, tasks: int, stolen: float | None,
              ratios: Mapping[str, Sequence[float]],
              runs: Mapping[str, Mapping[str, Sequence[Mapping[str, float]]]],
              commit: str) -> dict[str, Any]:
    """What --save writes: a run's pairs and the conditions it ran in."""
    return {"benchmark": "telemetry", "format": SAVED_FORMAT, "control": control,
            "rounds": rounds, "tasks": tasks, "commit": commit,
            "finished_at": datetime.datetime.now(datetime.UTC).isoformat(
                timespec="seconds").replace("+00:00", "Z"),
            "stolen_share": stolen,
            # What the clusters inherited that changes them (Side drops the OTLP
            # endpoints and sets OTEL_SDK_DISABLED itself).
            "environment": {key: value for key, value in sorted(os.environ.items())
                            if key.startswith(("TRACEDRAY_", "OTEL_"))},
            "ratios": {name: list(r) for name, r in ratios.items()},
            "runs": {name: {label: [dict(result) for result in results]
                            for label, results in sides.items()}
                     for name, sides in runs.items()}}


def load_saved_run(path: Path) -> dict[str, Any]:
    """A run that --save wrote, checked; SavedRunError says what is wrong with it."""
    try:
        saved = json.loads(path.read_text())
    except OSError as exc:
        raise SavedRunError(f"{path}: cannot be read ({exc.strerror or exc})") from exc
    except json.JSONDecodeError as exc:
        raise SavedRunError(f"{path}: not JSON ({exc.msg} at line {exc.lineno}); "
                            "give files that --save wrote") from exc
    if not isinstance(saved, dict) or saved.get("benchmark") != "telemetry":
        raise SavedRunError(f"{path}: not a run of benchmarks/telemetry.py saved with --save")
    if saved.get("format") != SAVED_FORMAT:
        raise SavedRunError(f"{path}: saved in format {saved.get('format')!r}; this script "
                            f"reads format {SAVED_FORMAT}")
    ratios = saved.get("ratios")
    if (not isinstance(ratios, dict) or not ratios or not all(
            isinstance(pairs, list) and pairs
            and all(isinstance(r, int | float) and r > 0 for r in pairs)
            for pairs in ratios.values())):
        raise SavedRunError(f"{path}: its \"ratios\" are not lists of positive numbers "
                            "per workload")
    return saved


def pool(paths: Sequence[Path]) -> None:
    """Print the median of every saved run's pairs together, per workload, with
    :func:`pooled_interval`, and the verdict on the goal from those intervals."""
    seen: set[Path] = set()
    for path in paths:  # a run given twice would count twice
        if path.resolve() in seen:
            raise SavedRunError(f"{path} is given twice: give each saved run once")
        seen.add(path.resolve())
    saved = [load_saved_run(path) for path in paths]
    kinds = {bool(run.get("control")) for run in saved}
    if len(kinds) > 1:
        raise SavedRunError("cannot pool --control runs with on/off runs: give one kind")
    control = kinds.pop()
    names = [name for name in WORKLOADS if any(name in run["ratios"] for run in saved)]
    names += sorted({name for run in saved for name in run["ratios"]} - set(names))
    width = max(len(name) for name in names)
    print(f"{len(saved)} saved {'control ' if control else ''}runs: "
          + ", ".join(f"{run.get('finished_at', '?')} ({run.get('commit', '?')[:8]}, "
                      f"{_share(run.get('stolen_share'))} stolen)" for run in saved))
    print(f"\n{'workload':<{width}}  {'runs':>4}  {'pairs':>5}  {'median':>6}  "
          f"{'95% interval':>12}  medians of the runs")
    intervals: dict[str, tuple[float, float]] = {}
    medians: dict[str, float] = {}
    for name in names:
        runs = [run["ratios"][name] for run in saved if name in run["ratios"]]
        pairs = [ratio for run in runs for ratio in run]
        medians[name] = statistics.median(pairs)
        intervals[name] = pooled_interval(runs)
        print(f"{name:<{width}}  {len(runs):>4}  {len(pairs):>5}  {medians[name]:>6.2f}  "
              f"{intervals[name][0]:>6.2f}-{intervals[name][1]:<5.2f}  "
              + " ".join(f"{statistics.median(run):.2f}" for run in runs))
    if control:
        print(f"\nCONTROL runs pooled: {conclusion(medians, intervals, control=True)}.")
    else:
        print(f"\npooled: {conclusion(medians, intervals, control=False)} (by each pooled "
              "median's 95% interval, resampling runs and the pairs within them).")


def conclusion(medians: Mapping[str, float], intervals: Mapping[str, tuple[float, float]],
               *, control: bool) -> str:
    """What the medians say: for an A/A run, how far the machine alone moved one from
    1.00; for an on/off run, the worst one and the verdict on the goal."""
    if control:
        furthest = max(medians, key=lambda name: abs(medians[name] - 1))
        return f"the median furthest from 1.00 is {medians[furthest]:.2f} ({furthest})"
    return (f"worst median on/off ratio {min(medians.values()):.2f}; the goal of >= {GOAL}: "
            f"{goal_verdict(intervals, GOAL)}")


def _share(share: Any) -> str:
    return f"{share:.0%}" if isinstance(share, int | float) else "?"


def _commit() -> str:
    try:
        done = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"],
                              cwd=Path(__file__).resolve().parent, capture_output=True,
                              text=True, timeout=10, check=False)
    except OSError:
        return "unknown"
    return done.stdout.strip() or "unknown"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=8,
                        help="runs of each workload per side (default 8)")
    parser.add_argument("--tasks", type=int, default=5000)
    parser.add_argument("--control", action="store_true",
                        help="A/A: telemetry on in both clusters, to see the noise alone")
    parser.add_argument("--only", metavar="TEXT",
                        help="run only the workloads whose name contains TEXT")
    parser.add_argument("--save", metavar="FILE", type=Path,
                        help="also write this run's pairs to FILE (JSON), for --pool")
    parser.add_argument("--pool", metavar="FILE", type=Path, nargs="+",
                        help="run nothing: pool the pairs of runs saved with --save")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.tasks)
        return
    if args.pool:
        if args.save or args.control or args.only:
            parser.error("--pool runs nothing: --save, --control and --only go with a run")
        try:
            pool(args.pool)
        except SavedRunError as exc:
            parser.error(str(exc))
        return
    names = [name for name in WORKLOADS if args.only is None or args.only in name]
    if not names:
        parser.error(f"no workload's name contains {args.only!r}; they are: "
                     + ", ".join(WORKLOADS))
    if args.save is not None and not args.save.parent.is_dir():
        parser.error(f"--save {args.save}: there is no folder {args.save.parent}")
    runs: dict[str, dict[str, list[dict[str, float]]]] = {
        name: {"on": [], "off": []} for name in names}
    ratios: dict[str, list[float]] = {name: [] for name in names}
    ticks_before = _read_ticks()
    # A process of a cluster may still be ending (its agent converting spans) as the
    # folder goes: what it writes then is not worth failing the report for.
    with tempfile.TemporaryDirectory(prefix="tracedray-bench-",
                                     ignore_cleanup_errors=True) as temp_root:
        # In a control run the "off" side is a second telemetry-on cluster.
        on = Side(True, args.tasks, temp_root)
        off = Side(args.control, args.tasks, temp_root, label="off")
        try:
            on.wait_ready()
            off.wait_ready()
            for round_index in range(args.rounds):
                for name in names:
                    # ABBA: whichever side runs second in a pair gets the warmer (or
                    # more disturbed) machine equally often.
                    order = (on, off) if round_index % 2 == 0 else (off, on)
                    results = {side.label: side.run(name) for side in order}
                    for label, result in results.items():
                        runs[name][label].append(result)
                    ratios[name].append(results["on"]["rate"] / results["off"]["rate"])
        finally:
            on.close()
            off.close()
    stolen = stolen_share(ticks_before, _read_ticks())
    _report(names, runs, ratios, stolen, control=args.control, rounds=args.rounds)
    if args.save is not None:
        args.save.write_text(json.dumps(saved_run(
            control=args.control, rounds=args.rounds, tasks=args.tasks, stolen=stolen,
            ratios=ratios, runs=runs, commit=_commit()), indent=1) + "\n")
        print(f"\nsaved this run's pairs to {args.save} (pool runs with --pool FILE...)")


def _report(names: Sequence[str], runs: Mapping[str, Mapping[str, list[dict[str, float]]]],
            ratios: Mapping[str, list[float]], stolen: float | None, *, control: bool,
            rounds: int) -> None:
    width = max(len(name) for name in names)
    intervals = {name: median_interval(ratios[name]) for name in names}
    print(f"{'workload':<{width}}  {'median on/off':>13}  {'95% interval':>12}  "
          f"{'pairs IQR':>11}  {'ops/s on':>10}  {'ops/s off':>10}")
    for name in names:
        low, high = _quartiles(ratios[name])
        rate_on = statistics.median(r["rate"] for r in runs[name]["on"])
        rate_off = statistics.median(r["rate"] for r in runs[name]["off"])
        print(f"{name:<{width}}  {statistics.median(ratios[name]):>13.2f}  "
              f"{intervals[name][0]:>6.2f}-{intervals[name][1]:<5.2f}  "
              f"{low:>5.2f}-{high:<5.2f}  {rate_on:>10,.0f}  {rate_off:>10,.0f}")
    medians = {name: statistics.median(ratios[name]) for name in names}
    if control:
        print(f"\nCONTROL run: telemetry on in both clusters (\"off\" is the second one); "
              f"{conclusion(medians, intervals, control=True)}: the machine alone moves an "
              "on/off figure that much.")
    else:
        print(f"\n{conclusion(medians, intervals, control=False)} (by each median's 95% "
              "bootstrap interval). "
              f"{rounds} runs of each workload per side, the two clusters taking "
              f"turns (ABBA), one ratio per adjacent pair.")
    print(f"\n{'cluster CPU per op (µs, median)':<{width}}  {'on':>13}  {'off':>11}  "
          f"{'off/on':>10}")
    for name in names:
        cpu_on = statistics.median(r["cpu_us"] for r in runs[name]["on"])
        cpu_off = statistics.median(r["cpu_us"] for r in runs[name]["off"])
        print(f"{name:<{width}}  {cpu_on:>13,.1f}  {cpu_off:>11,.1f}  {cpu_off / cpu_on:>10.2f}")
    if not control:
        print("on = spans to the session's trace files + JSON logs (the default); "
              "off = OTEL_SDK_DISABLED=true (spans are no-ops; JSON logs stay on).")
    if stolen is not None:
        # Time the hypervisor gave other guests: on a host busy enough to take a tenth,
        # even the --control run's medians stray by ~0.1
        # (benchmarks/results/history/telemetry-notebook.md).
        print(f"CPU stolen by the hypervisor during the benchmark: {stolen:.0%} of the "
              f"machine's time.")
    print("CPU includes converting the workload's spans to JSON lines (by the node's agent "
          "during the run, or after it, outside the timing, when the agent put it off).")


if __name__ == "__main__":
    main()
