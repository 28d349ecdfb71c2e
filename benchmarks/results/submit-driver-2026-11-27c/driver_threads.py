"""The driver's CPU per empty task by thread, during bursts of 5,000 ``empty.remote()``
gotten at once (the same burst as ``submitter-2026-11-27b/driver_cpu.py``), read from
``/proc/self/task/<tid>/stat`` (utime + stime) before and after the bursts; thread
names from ``threading.enumerate()`` (``native_id``). Threads that are not Python's
(grpc's, for example) are summed as ``<native>``.

Usage: python driver_threads.py [--py-spy OUT.txt]   (prints one JSON line;
         DRIVER_THREADS_GIL=1: py-spy samples only the thread holding the GIL)
       python driver_threads.py --ab BEFORE_SRC AFTER_SRC PAIRS OUT.json (appends; ABBA)
       python driver_threads.py --summary OUT.json
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve()
sys.path.insert(0, str(HERE.parents[2]))
from telemetry import median_interval  # noqa: E402

TASKS = 5_000
REPEAT = int(os.environ.get("DRIVER_THREADS_REPEAT", "3"))
TICK = os.sysconf("SC_CLK_TCK")


def _thread_cpu(system_only: bool = False) -> dict[int, float]:
    """CPU seconds per thread id (user + system, or system only)."""
    out = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        out[int(tid)] = ((0 if system_only else int(fields[11])) + int(fields[12])) / TICK
    return out


def _names() -> dict[int, str]:
    return {t.native_id: t.name for t in threading.enumerate() if t.native_id is not None}


# Threads that end during the bursts (a lease's stream, a background call) are gone from
# /proc by the end: each records its own CPU clock as it ends.
_ENDED: dict[int, tuple[str, float]] = {}


def _record_ends() -> None:
    run = threading.Thread.run

    def recorded(self: threading.Thread) -> None:
        try:
            run(self)
        finally:
            _ENDED[threading.get_native_id()] = (self.name, time.thread_time())

    threading.Thread.run = recorded  # type: ignore[method-assign]


def child(py_spy: str | None) -> None:
    _record_ends()
    import tracedray as ray

    ray.init(num_cpus=2)

    @ray.remote
    def empty() -> None:
        return None

    ray.get([empty.remote() for _ in range(TASKS)])  # warm: workers started, leases held
    spy = None
    if py_spy:
        spy = subprocess.Popen([str(Path(sys.executable).parent / "py-spy"), "record", "-p",
                                str(os.getpid()), "--rate", "500", "--format", "raw",
                                "-o", py_spy, "--threads", "--nonblocking",
                                # --gil: only the thread holding the GIL (its Python CPU)
                                *(["--gil"] if os.environ.get("DRIVER_THREADS_GIL") else [])],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(1.0)
    before, before_sys = _thread_cpu(), _thread_cpu(system_only=True)
    start = time.process_time()
    wall = time.perf_counter()
    submit_wall = submit_cpu = 0.0
    for _ in range(REPEAT):
        # The submission rate's measure (benchmarks/submission.py): up to the last
        # .remote() returning, the caller's thread CPU beside it.
        started, started_cpu = time.perf_counter(), time.thread_time()
        refs = [empty.remote() for _ in range(TASKS)]
        submit_wall += time.perf_counter() - started
        submit_cpu += time.thread_time() - started_cpu
        ray.get(refs)
        del refs
    wall = time.perf_counter() - wall
    total = time.process_time() - start
    after, after_sys = _thread_cpu(), _thread_cpu(system_only=True)
    names = _names()
    for tid, (name, cpu) in list(_ENDED.items()):
        if tid not in after:
            after[tid] = cpu
            names[tid] = name + " (ended)"
    names[threading.main_thread().native_id] = "main (caller)"
    per: dict[str, float] = {}
    per_sys: dict[str, float] = {}
    for tid, cpu in after.items():
        name = names.get(tid, "<native>")
        if name.startswith("tracedray-stream-writer"):
            name = "stream-writers"
        elif name.startswith("tracedray-stream"):
            name = "stream-readers"
        elif name.startswith("tracedray-bg"):
            name = "tracedray-bg"
        per[name] = per.get(name, 0.0) + (cpu - before.get(tid, 0.0))
        if tid in after_sys:
            per_sys[name] = per_sys.get(name, 0.0) + after_sys[tid] - before_sys.get(tid, 0.0)
    if spy is not None:
        spy.send_signal(signal.SIGINT)  # py-spy writes its file on SIGINT, not SIGTERM
        spy.wait()
    ray.shutdown()
    n = TASKS * REPEAT
    print(json.dumps({"total_us": total / n * 1e6, "wall_us": wall / n * 1e6,
                      "submit_wall_us": submit_wall / n * 1e6,
                      "submit_caller_cpu_us": submit_cpu / n * 1e6,
                      "threads_us": {k: round(v / n * 1e6, 2) for k, v in
                                     sorted(per.items(), key=lambda kv: -kv[1]) if v > 0},
                      "threads_system_us": {k: round(v / n * 1e6, 2) for k, v in
                                            sorted(per_sys.items(), key=lambda kv: -kv[1])
                                            if v > 0}}))


def side(src: str) -> dict:
    out = subprocess.run([sys.executable, str(HERE)], check=True, timeout=300,
                         env={**os.environ, "PYTHONPATH": src}, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    args = sys.argv[1:]
    if args[:1] == ["--summary"]:
        pairs = json.loads(Path(args[1]).read_text())
        ratios = [p["before"]["total_us"] / p["after"]["total_us"] for p in pairs]
        low, high = median_interval(ratios)
        before = statistics.median(p["before"]["total_us"] for p in pairs)
        after = statistics.median(p["after"]["total_us"] for p in pairs)
        print(f"{len(pairs)} pairs: before {before:.1f} µs, after {after:.1f} µs, "
              f"before/after {statistics.median(ratios):.3f} [{low:.3f}, {high:.3f}]")
        for side_name in ("before", "after"):
            names = {k for p in pairs for k in p[side_name]["threads_us"]}
            row = {k: statistics.median(p[side_name]["threads_us"].get(k, 0.0) for p in pairs)
                   for k in names}
            print(side_name, json.dumps({k: round(v, 1) for k, v in
                                         sorted(row.items(), key=lambda kv: -kv[1])}))
        return
    if args[:1] == ["--ab"]:
        before_src, after_src, count, out = args[1], args[2], int(args[3]), Path(args[4])
        pairs = json.loads(out.read_text()) if out.exists() else []
        for i in range(count):
            order = ("before", "after") if (len(pairs) + i) % 2 == 0 else ("after", "before")
            pair: dict = {"load": os.getloadavg()[0]}
            for name in order:
                pair[name] = side(before_src if name == "before" else after_src)
            pairs.append(pair)
            out.write_text(json.dumps(pairs, indent=1))
            print(f"pair {len(pairs)}: before {pair['before']['total_us']:.1f} "
                  f"after {pair['after']['total_us']:.1f} load {pair['load']:.1f}", flush=True)
        return
    child(args[1] if args[:1] == ["--py-spy"] else None)


if __name__ == "__main__":
    main()
