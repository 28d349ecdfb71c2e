"""Pool the runs of this folder: per engine (base: the raylet kills the worker of a
creation under way and the actor is placed again; adopt: the restarted GCS adopts it),
the median of each probe's figures over all kills, with a 95% bootstrap interval, and
the difference of the medians (adopt - base).

Run: python pool.py base-1.json base-2.json -- after-1.json after-2.json
"""

from __future__ import annotations

import json
import random
import statistics
import sys
from pathlib import Path

ROUNDS = 5000


def ci(values: list[float]) -> tuple[float, float, float]:
    rng = random.Random(1)
    medians = sorted(statistics.median(rng.choices(values, k=len(values)))
                     for _ in range(ROUNDS))
    return statistics.median(values), medians[int(0.025 * ROUNDS)], medians[int(0.975 * ROUNDS)]


def diff_ci(a: list[float], b: list[float]) -> tuple[float, float, float]:
    rng = random.Random(2)
    diffs = sorted(statistics.median(rng.choices(b, k=len(b)))
                   - statistics.median(rng.choices(a, k=len(a))) for _ in range(ROUNDS))
    return (statistics.median(b) - statistics.median(a), diffs[int(0.025 * ROUNDS)],
            diffs[int(0.975 * ROUNDS)])


def load(paths: list[str]) -> list[dict]:
    runs: list[dict] = []
    for path in paths:
        data = json.loads(Path(path).read_text())
        runs.extend(data if isinstance(data, list) else [data])
    return runs


def main() -> None:
    split = sys.argv.index("--")
    engines = {"base": load(sys.argv[1:split]), "adopt": load(sys.argv[split + 1:])}
    pooled: dict[str, dict[str, list[float]]] = {}
    for engine, runs in engines.items():
        figures: dict[str, list[float]] = {"restart_s": []}
        for run in runs:
            figures["restart_s"] += [k["restart_s"] for k in run["kills"]]
            for probe, data in run["probes"].items():
                figures.setdefault(f"{probe} pause-restart", []).extend(data["excess_s"])
                figures.setdefault(f"{probe} done after back", []).extend(data["resumed_after_s"])
                figures.setdefault(f"{probe} normal", []).append(data["normal_s"])
        workers = [run.get("actor_workers", {}) for run in runs]
        print(f"{engine}: {sum(len(r['kills']) for r in runs)} kills; hung: "
              f"{[r['hung'] for r in runs]}; creation workers at the kills: {workers}")
        pooled[engine] = figures
    print("\n| figure | base median [95% CI] | adopt median [95% CI] | adopt - base [95% CI] |")
    print("|---|---|---|---|")
    for name in pooled["base"]:
        a, b = pooled["base"][name], pooled["adopt"][name]
        ma, mb, d = ci(a), ci(b), diff_ci(a, b)
        print(f"| {name} | {ma[0]:+.2f} s [{ma[1]:+.2f}, {ma[2]:+.2f}] | "
              f"{mb[0]:+.2f} s [{mb[1]:+.2f}, {mb[2]:+.2f}] | "
              f"{d[0]:+.2f} s [{d[1]:+.2f}, {d[2]:+.2f}] |")


if __name__ == "__main__":
    main()
