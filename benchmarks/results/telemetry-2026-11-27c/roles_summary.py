"""Summarise roles.jsonl: per tree and workload, each process's median CPU µs per op
with telemetry on and off (over every run), and what telemetry costs (on - off).

Usage: python roles_summary.py roles.jsonl
"""

import json
import statistics
import sys
from collections import defaultdict

PROCESSES = ("driver", "worker", "agent", "gcs", "raylet")
samples: dict[tuple[str, str, str], list[dict[str, float]]] = defaultdict(list)
with open(sys.argv[1]) as lines:
    for line in lines:
        run = json.loads(line)
        tree = "before" if "before" in run["tree"] else "after"
        samples[(tree, run["work"], run["telemetry"])].extend(run["runs"])


def medians(runs: list[dict[str, float]]) -> dict[str, float]:
    return {p: statistics.median(r.get(p, 0.0) for r in runs) for p in PROCESSES}


print("CPU µs per op, median of runs: on / off (on - off)")
print(f"{'tree':7s} {'work':6s} {'runs':>5s} " + " ".join(f"{p:>20s}" for p in PROCESSES)
      + f" {'total':>20s}")
for work in ("empty", "put"):
    for tree in ("before", "after"):
        on, off = samples[(tree, work, "on")], samples[(tree, work, "off")]
        if not on or not off:
            continue
        m_on, m_off = medians(on), medians(off)
        cells = [f"{m_on[p]:6.1f}/{m_off[p]:5.1f} ({m_on[p] - m_off[p]:+5.1f})"
                 for p in PROCESSES]
        total_on, total_off = sum(m_on.values()), sum(m_off.values())
        cells.append(f"{total_on:6.1f}/{total_off:5.1f} ({total_on - total_off:+5.1f})")
        print(f"{tree:7s} {work:6s} {len(on):>2d}/{len(off):<2d} " + " ".join(
            f"{c:>20s}" for c in cells))
