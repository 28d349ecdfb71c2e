"""Pool telemetry_agent_cost.py ABBA samples (one JSON object a line: side, load, samples):
per step, each side's median with a 95% bootstrap interval, and after/before with one.

Usage: python pool.py FILE.jsonl
"""

from __future__ import annotations

import json
import random
import statistics
import sys
from typing import Any

STEPS = ("submit", "dispatch", "execute", "convert", "index")
SUMS = {"agent": ("convert", "index"), "hot": ("submit", "dispatch", "execute")}


def _interval(values: list[float], draws: int = 4000) -> tuple[float, float]:
    medians = sorted(statistics.median(random.choices(values, k=len(values)))
                     for _ in range(draws))
    return medians[int(draws * 0.025)], medians[int(draws * 0.975)]


def _samples(rows: list[dict[str, Any]], side: str, step: str) -> list[float]:
    parts = SUMS.get(step, (step,))
    out: list[float] = []
    for row in rows:
        if row["side"] == side:
            out += [sum(values) for values in zip(*(row["samples"][p] for p in parts),
                                                  strict=True)]
    return out


def main() -> None:
    random.seed(1)
    with open(sys.argv[1]) as lines:
        rows = [json.loads(line) for line in lines]
    print("load averages (1, 5, 15 min) at each run:", sorted({row["load"] for row in rows}))
    print(f"{'step':10s} {'before':>22s} {'after':>22s}  after/before")
    for step in (*STEPS, *SUMS):
        before, after = _samples(rows, "before", step), _samples(rows, "after", step)
        (low_b, high_b), (low_a, high_a) = _interval(before), _interval(after)
        ratios = sorted(statistics.median(random.choices(after, k=len(after)))
                        / statistics.median(random.choices(before, k=len(before)))
                        for _ in range(4000))
        median_b, median_a = statistics.median(before), statistics.median(after)
        print(f"{step:10s} {median_b:7.1f} [{low_b:6.1f},{high_b:6.1f}] "
              f"{median_a:7.1f} [{low_a:6.1f},{high_a:6.1f}]  {median_a / median_b:.2f} "
              f"[{ratios[100]:.2f}, {ratios[3899]:.2f}]  n={len(before)},{len(after)}")


if __name__ == "__main__":
    main()
