"""CPU per actor call, per process of the cluster, and actor calls/s.

On a 2-core machine every process of the cluster (driver, actor worker, GCS, raylet,
telemetry agent) competes for the same CPUs, so the total CPU an actor call costs
bounds actor calls/s. This measures it: a warm cluster (2 CPUs), an actor, then
``--bursts`` bursts of ``--calls`` ``a.ping.remote()`` followed by one ``get`` of them
all (as ``benchmarks/submission.py``'s actor calls/s), each burst bracketed by the
utime+stime of every process of the cluster (``/proc/<pid>/stat``); after each burst a
``--settle`` pause during which the CPU is counted too (work a burst leaves behind: task
events, spans, the GCS's flush), less the same pause's CPU measured idle first.

Prints per process kind the mean µs of CPU per call (ticks are 10 ms: a mean over
the bursts resolves what one burst cannot) (during the burst, and with what
followed it) and the median calls/s; ``--json`` saves the bursts. Select the tree with
``PYTHONPATH=<tree>/src``.

Usage: python benchmarks/actor_cpu.py [--bursts 9] [--calls 2000] [--settle 3] [--json F]
       python benchmarks/actor_cpu.py --compare DIR   (DIR/before-*.json, DIR/after-*.json:
       each side's bursts pooled: median calls/s with a 95% bootstrap interval, mean µs
       of CPU per call per process)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from submission import _descendants  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")


def _cpu_s(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / TICK


def _kind(pid: int) -> str:
    if pid == os.getpid():
        return "driver"
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
            text = cmdline.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return "gone"
    for module, kind in (("gcs.main", "gcs"), ("raylet.main", "raylet"),
                         ("telemetry_agent", "agent"), ("worker_main", "worker")):
        if module in text:
            return kind
    return "other"


def _sample() -> dict[int, float]:
    return {pid: _cpu_s(pid) for pid in _descendants(os.getpid())}


def _by_kind(before: dict[int, float], after: dict[int, float],
             actor_pid: int) -> dict[str, float]:
    spent: dict[str, float] = {}
    for pid, cpu in after.items():
        kind = "actor" if pid == actor_pid else _kind(pid)
        if kind == "worker":
            kind = "other workers"
        spent[kind] = spent.get(kind, 0.0) + cpu - before.get(pid, cpu)
    return spent


def compare(folder: Path) -> None:
    import sys

    sys.path.insert(0, str(Path(__file__).parent))
    from telemetry import median_interval

    sides = {side: [burst for path in sorted(folder.glob(f"{side}-*.json"))
                    for burst in json.loads(path.read_text())["bursts"]]
             for side in ("before", "after")}
    calls = json.loads(next(folder.glob("before-*.json")).read_text())["calls"]
    print(f"{'':22} {'before':>22} {'after':>22}")
    rates = {side: [b["calls_per_s"] for b in bursts] for side, bursts in sides.items()}
    cells = []
    for side in ("before", "after"):
        low, high = median_interval(rates[side])
        cells.append(f"{statistics.median(rates[side]):,.0f} [{low:,.0f}, {high:,.0f}]")
    print(f"{'calls/s (median)':22} {cells[0]:>22} {cells[1]:>22}")
    kinds = sorted({k for bursts in sides.values() for b in bursts for k in b["during"]})
    for key, label in (("during", "in burst"), ("with_after", "with after")):
        for kind in [*kinds, "total"]:
            row = []
            for side in ("before", "after"):
                values = [(sum(b[key].values()) if kind == "total" else b[key].get(kind, 0.0))
                          / calls * 1e6 for b in sides[side]]
                row.append(f"{statistics.mean(values):.1f}")
            print(f"{kind + ' µs ' + label:22} {row[0]:>22} {row[1]:>22}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bursts", type=int, default=9)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--settle", type=float, default=3.0)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--compare", type=Path, metavar="DIR")
    args = parser.parse_args()
    if args.compare:
        compare(args.compare)
        return

    import tracedray as rt

    rt.init(num_cpus=2, object_store_memory=256 << 20)

    @rt.remote
    class Pinger:
        def ping(self) -> None:
            return None

        def pid(self) -> int:
            return os.getpid()

    actor = Pinger.remote()  # type: ignore[attr-defined]
    actor_pid = rt.get(actor.pid.remote())
    try:
        for _ in range(3):  # warm every path
            rt.get([actor.ping.remote() for _ in range(args.calls)])
        time.sleep(2 * args.settle)  # the warm-up's own after-work done
        before = _sample()
        time.sleep(args.settle)
        idle = _by_kind(before, _sample(), actor_pid)
        bursts = []
        for _ in range(args.bursts):
            before = _sample()
            start = time.perf_counter()
            rt.get([actor.ping.remote() for _ in range(args.calls)])
            elapsed = time.perf_counter() - start
            during = _by_kind(before, _sample(), actor_pid)
            time.sleep(args.settle)
            total = _by_kind(before, _sample(), actor_pid)
            bursts.append({"calls_per_s": args.calls / elapsed, "during": during,
                           "with_after": {kind: total[kind] - idle.get(kind, 0.0)
                                          for kind in total}})
    finally:
        rt.shutdown()
    kinds = sorted({kind for burst in bursts for kind in burst["during"]})
    print(f"calls/s median {statistics.median(b['calls_per_s'] for b in bursts):,.0f} "
          f"({', '.join(format(b['calls_per_s'], ',.0f') for b in bursts)})")
    print(f"{'process':14} {'µs/call in burst':>17} {'µs/call with after':>19}")
    for kind in [*kinds, "total"]:
        def per_call(key: str, kind: str = kind) -> float:
            values = [(sum(b[key].values()) if kind == "total" else b[key].get(kind, 0.0))
                      / args.calls * 1e6 for b in bursts]
            return statistics.mean(values)
        print(f"{kind:14} {per_call('during'):17.1f} {per_call('with_after'):19.1f}")
    if args.json:
        args.json.write_text(json.dumps({"calls": args.calls, "idle": idle,
                                         "bursts": bursts}, indent=1))


if __name__ == "__main__":
    main()
