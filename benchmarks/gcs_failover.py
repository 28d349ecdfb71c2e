"""Client-observed pause across a GCS SIGKILL, per operation (issue 23, item 4).

For each storage — the default embedded SQLite and Redis (a real redis-server) — a fresh
2-CPU cluster runs four probes continuously, each on its own driver thread:

- ``task``: ``get(f.remote())`` of an empty task;
- ``actor_call``: ``get(a.ping.remote())`` on a named detached actor;
- ``get_actor``: ``get_actor(name)`` of that actor;
- ``new_actor``: create an actor, call it once, kill it;
- ``slow_init_actor``: the same with an actor whose ``__init__`` takes ``SLOW_INIT_S``
  (a kill then often finds a worker running ``__init__``, which the restarted GCS adopts).

The GCS is then SIGKILLed ``--kills`` times (the head raylet restarts it on the same port).
For each kill and probe, the *pause* is how much longer than normal (the median call before
the first kill) the slowest call overlapping the outage took, failed attempts counting
toward the call that followed them; the *restart time* is the supervisor's own
``downtime_s`` (death noticed -> new GCS answering, ``gcs.restarted`` in the raylet's log).
Reported per probe: pause minus restart time (median and range over the kills); how long
after the GCS answered again the calls that overlapped the outage were done (a call that
was slow before the kill inflates the pause but not this); the normal call time, errors,
and whether a call hung (no success for ``--hang-s`` after the GCS was
back). The issue's goal: pause <= restart time + 1 s.

Each storage runs in its own interpreter (``--child``) so that one run's threads or
memory never colour another's.

Run: ``.venv/bin/python benchmarks/gcs_failover.py [--kills 5] [--storages sqlite,redis]
[--json out.json]``
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

PROBES = ("task", "actor_call", "get_actor", "new_actor", "slow_init_actor")
SLOW_INIT_S = 1.0
OP_TIMEOUT_S = 60.0


# --- pure summaries -------------------------------------------------------------------------


def user_calls(calls: list[tuple[float, float, bool]]) -> list[tuple[float, float]]:
    """(start, end) of each call as its user lives it: failed attempts count toward the
    successful call that follows them (a user retries)."""
    merged: list[tuple[float, float]] = []
    first_failed: float | None = None
    for start, end, ok in sorted(calls):
        if not ok:
            first_failed = start if first_failed is None else first_failed
            continue
        merged.append((start if first_failed is None else first_failed, end))
        first_failed = None
    return merged


def normal_duration(calls: list[tuple[float, float]],
                    outages: list[tuple[float, float]]) -> float:
    """Median duration of the calls that overlapped no outage (kill .. back)."""
    durations = [end - start for start, end in calls
                 if not any(end > killed and start < back for killed, back in outages)]
    return statistics.median(durations) if durations else 0.0


def pause_over(calls: list[tuple[float, float]], killed_at: float, back_at: float,
               normal_s: float) -> float:
    """How much longer than normal the slowest call that overlapped the outage
    (``killed_at`` .. ``back_at``) took: the pause its caller saw (0: none)."""
    overlapping = [end - start for start, end in calls if end > killed_at and start < back_at]
    return max(0.0, max(overlapping, default=0.0) - normal_s)


def resumed_after(calls: list[tuple[float, float]], killed_at: float, back_at: float) -> float:
    """How long after the GCS answered again the last call that overlapped the outage
    ended (0: every such call ended before): the wait the outage left once it was over."""
    ends = [end for start, end in calls if end > killed_at and start < back_at]
    return max(0.0, max(ends, default=back_at) - back_at)


def spread(values: list[float]) -> dict[str, float]:
    if not values:
        return {"median": float("nan"), "min": float("nan"), "max": float("nan")}
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


# --- the child: one storage -----------------------------------------------------------------


class Probe:
    """Runs ``op`` in a loop on a thread; keeps completion times and errors."""

    def __init__(self, name: str, op: Callable[[], object], stop: threading.Event) -> None:
        self.name = name
        self.calls: list[tuple[float, float, bool]] = []  # (start, end, succeeded)
        self.errors: dict[str, int] = {}
        self.in_flight_since: float | None = None
        self._op = op
        self._stop = stop
        self.thread = threading.Thread(target=self._run, daemon=True, name=f"probe-{name}")

    def _run(self) -> None:
        while not self._stop.is_set():
            started = self.in_flight_since = time.monotonic()
            try:
                self._op()
            except Exception as exc:  # noqa: BLE001 - every failure is counted, by type
                key = type(exc).__name__
                self.errors[key] = self.errors.get(key, 0) + 1
                self.calls.append((started, time.monotonic(), False))
                time.sleep(0.05)
            else:
                self.calls.append((started, time.monotonic(), True))
            finally:
                self.in_flight_since = None


def gcs_pid(session_dir: str) -> int | None:
    import psutil

    for proc in psutil.Process().children(recursive=True):
        try:
            cmdline = proc.cmdline()
            if ("tracedray.core.gcs.main" in cmdline and session_dir in cmdline
                    and proc.status() != psutil.STATUS_ZOMBIE):
                return proc.pid
        except psutil.Error:
            continue
    return None


def restart_downtime(session_dir: str, new_pid: int) -> float | None:
    """The supervisor's ``downtime_s`` for the GCS with pid ``new_pid``."""
    from tracedray.telemetry.append_file import read_data

    for path in Path(session_dir, "logs").glob("raylet*.jsonl"):
        for line in read_data(path).decode(errors="replace").splitlines():
            if '"gcs.restarted"' in line:
                event = json.loads(line)
                if event.get("gcs_pid") == new_pid:
                    return float(event["downtime_s"])
    return None


def actor_workers_at_restarts(session_dir: str) -> dict[str, int]:
    """How the raylets dealt with the workers of creations under way at the kills: kept
    for the restarted GCS (``actor.worker_adopted``) or killed as unused
    (``actor.worker_discarded``; the new actor probe's kills are ``actor.dead`` discards)."""
    from tracedray.telemetry.append_file import read_data

    counts = {"adopted": 0, "discarded_unused": 0}
    for path in Path(session_dir, "logs").glob("raylet*.jsonl"):
        for line in read_data(path).decode(errors="replace").splitlines():
            if '"actor.worker_adopted"' in line:
                counts["adopted"] += 1
            elif '"actor.worker_discarded"' in line and "GCS restarted" in line:
                counts["discarded_unused"] += 1
    return counts


def run_child(storage: str, kills: int, warmup_s: float, settle_s: float,
              hang_s: float) -> None:
    if storage != "sqlite":
        os.environ["TRACEDRAY_GCS_STORAGE"] = storage
    os.environ.setdefault("TRACEDRAY_LOG_TO_DRIVER", "0")
    import tracedray

    info = tracedray.init(num_cpus=2, object_store_memory=128 << 20)
    session_dir = info["session_dir"]

    @tracedray.remote(num_cpus=0)
    def empty() -> int:
        return 1

    @tracedray.remote(num_cpus=0)
    class Pinger:
        def ping(self) -> int:
            return 1

    pinger: Any = Pinger
    named = pinger.options(name="failover-target", lifetime="detached").remote()
    tracedray.get(named.ping.remote(), timeout=OP_TIMEOUT_S)

    @tracedray.remote(num_cpus=0)
    class SlowInit:
        def __init__(self) -> None:
            time.sleep(SLOW_INIT_S)

        def ping(self) -> int:
            return 1

    def new_actor(cls: Any = pinger) -> None:
        actor = cls.remote()
        tracedray.get(actor.ping.remote(), timeout=OP_TIMEOUT_S)
        tracedray.kill(actor)

    ops: dict[str, Callable[[], object]] = {
        "task": lambda: tracedray.get(empty.remote(), timeout=OP_TIMEOUT_S),
        "actor_call": lambda: tracedray.get(named.ping.remote(), timeout=OP_TIMEOUT_S),
        "get_actor": lambda: tracedray.get_actor("failover-target"),
        "new_actor": new_actor,
        "slow_init_actor": lambda: new_actor(SlowInit),
    }
    stop = threading.Event()
    probes = {name: Probe(name, ops[name], stop) for name in PROBES}
    for probe in probes.values():
        probe.thread.start()
    time.sleep(warmup_s)

    outages: list[dict[str, Any]] = []
    hung: list[str] = []
    for _ in range(kills):
        old = gcs_pid(session_dir)
        assert old is not None, "no GCS to kill"
        killed_at = time.monotonic()
        os.kill(old, signal.SIGKILL)
        new = None
        while new is None or new == old:
            time.sleep(0.02)
            new = gcs_pid(session_dir)
            if time.monotonic() - killed_at > 60:
                raise SystemExit("no GCS came back within 60 s")
        downtime = None
        while downtime is None and time.monotonic() - killed_at < 60:
            time.sleep(0.05)
            downtime = restart_downtime(session_dir, new)
        assert downtime is not None, "the supervisor logged no gcs.restarted"
        back_at = killed_at + downtime
        # Every probe completes again after the restart, or it hung.
        for probe in probes.values():
            while not any(end > back_at and ok for _, end, ok in probe.calls):
                if time.monotonic() - back_at > hang_s:
                    hung.append(probe.name)
                    break
                time.sleep(0.05)
        time.sleep(settle_s)
        outages.append({"killed_at": killed_at, "restart_s": downtime, "old_pid": old,
                        "new_pid": new})

    stop.set()
    for probe in probes.values():
        probe.thread.join(timeout=OP_TIMEOUT_S + 5)
        if probe.thread.is_alive():
            hung.append(f"{probe.name} (still in a call at the end)")
    result: dict[str, Any] = {"storage": storage, "kills": outages, "hung": sorted(set(hung)),
                              "probes": {},
                              "actor_workers": actor_workers_at_restarts(session_dir)}
    windows = [(o["killed_at"], o["killed_at"] + o["restart_s"]) for o in outages]
    for name, probe in probes.items():
        calls = user_calls(probe.calls)
        normal = normal_duration(calls, windows)
        pauses = [pause_over(calls, killed, back, normal) for killed, back in windows]
        result["probes"][name] = {
            "pause_s": pauses,
            "excess_s": [p - o["restart_s"] for p, o in zip(pauses, outages, strict=True)],
            "resumed_after_s": [resumed_after(calls, killed, back) for killed, back in windows],
            "normal_s": normal,
            "calls": len(calls),
            "errors": probe.errors,
            # The slow calls that overlapped each outage, relative to the kill (s).
            "slow_calls_at_kills": [
                [(round(a - killed, 3), round(b - killed, 3)) for a, b in calls
                 if b > killed and a < back and b - a > 2 * normal + 0.05]
                for killed, back in windows],
        }
    try:
        tracedray.kill(named)
    finally:
        tracedray.shutdown()
    print(json.dumps(result))


# --- the parent -----------------------------------------------------------------------------


def run_storage(storage: str, args: argparse.Namespace) -> dict[str, Any]:
    from tracedray.testing.redis_server import RedisServer

    root = tempfile.mkdtemp(prefix="tracedray-bench-failover-")
    env = dict(os.environ, TRACEDRAY_TEMP_DIR=root)
    with contextlib.ExitStack() as stack:
        stack.callback(shutil.rmtree, root, ignore_errors=True)
        # A fresh redis-server per run (fsync always: the default a SIGKILL loses nothing with).
        target = stack.enter_context(RedisServer()).url if storage == "redis" else "sqlite"
        command = [sys.executable, __file__, "--child", target, str(args.kills),
                   str(args.warmup_s), str(args.settle_s), str(args.hang_s)]
        done = subprocess.run(command, env=env, capture_output=True, text=True, check=False,
                              timeout=args.kills * (args.hang_s + 120) + 120)
    if done.returncode != 0:
        raise SystemExit(f"{storage} failed:\n{done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    result["storage"] = storage
    return result


def print_result(result: dict[str, Any]) -> None:
    restarts = [o["restart_s"] for o in result["kills"]]
    r = spread(restarts)
    print(f"\n== {result['storage']}: {len(restarts)} kills, GCS restart "
          f"{r['median']:.2f} s ({r['min']:.2f}-{r['max']:.2f}); hung: "
          f"{', '.join(result['hung']) or 'none'}; workers of creations under way at the "
          f"kills: {result.get('actor_workers', {})}")
    print(f"{'probe':12} {'pause median (range)':>22} {'pause - restart (range)':>25} "
          f"{'done after GCS back':>22} {'normal call':>11}  errors")
    for name, probe in result["probes"].items():
        p, e = spread(probe["pause_s"]), spread(probe["excess_s"])
        a = spread(probe["resumed_after_s"])
        errors = ", ".join(f"{k} x{v}" for k, v in probe["errors"].items()) or "-"
        print(f"{name:12} {p['median']:7.2f}s ({p['min']:.2f}-{p['max']:.2f}) "
              f"{e['median']:+9.2f}s ({e['min']:+.2f}..{e['max']:+.2f}) "
              f"{a['median']:9.2f}s ({a['min']:.2f}-{a['max']:.2f}) "
              f"{probe['normal_s']:10.3f}s  {errors}")


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        storage, kills, warmup_s, settle_s, hang_s = sys.argv[2:7]
        run_child(storage, int(kills), float(warmup_s), float(settle_s), float(hang_s))
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kills", type=int, default=5)
    parser.add_argument("--storages", default="sqlite,redis")
    parser.add_argument("--warmup-s", type=float, default=6.0)
    parser.add_argument("--settle-s", type=float, default=2.0)
    parser.add_argument("--hang-s", type=float, default=45.0,
                        help="a probe with no completion this long after the restart hung")
    parser.add_argument("--json", default="")
    args = parser.parse_args()
    results = [run_storage(storage, args) for storage in args.storages.split(",")]
    for result in results:
        print_result(result)
    print("\ngoal: pause - GCS restart time <= +1 s for every probe, nothing hung "
          "(pause 0: the probe did not notice the outage)")
    if args.json:
        with open(args.json, "w") as out:
            json.dump(results, out, indent=1)


if __name__ == "__main__":
    main()
