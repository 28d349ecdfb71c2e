"""Pool ABBA pairs of `benchmarks/core.py --only tracedray --runs 1`: per pair, the
after/before ratio of each figure (times inverted, so higher is better), then the
median ratio with a 95% bootstrap interval. Usage: pool.py RUNS_DIR OUT_JSON"""

from __future__ import annotations

import json
import random
import statistics
import sys
from pathlib import Path

FIGURES = {"tasks_per_s": False, "task_rtt_ms": True, "tree_ms": True,
           "actor_calls_per_s": False, "actor_rtt_ms": True, "put_1mb_gbps": False,
           "get_1mb_gbps": False, "put_100mb_gbps": False}  # True: a time (lower is better)


def bootstrap(values: list[float], rounds: int = 10_000) -> tuple[float, float]:
    rng = random.Random(29)
    medians = sorted(statistics.median(rng.choices(values, k=len(values)))
                     for _ in range(rounds))
    return medians[int(0.025 * rounds)], medians[int(0.975 * rounds) - 1]


def main() -> None:
    runs, out = Path(sys.argv[1]), Path(sys.argv[2])
    pairs = []
    for before in sorted(runs.glob("before-*.json")):
        after = runs / before.name.replace("before", "after")
        if after.exists():
            pairs.append((json.loads(before.read_text())["tracedray"],
                          json.loads(after.read_text())["tracedray"]))
    result = {}
    for name, is_time in FIGURES.items():
        ratios = [(b[name] / a[name]) if is_time else (a[name] / b[name]) for b, a in pairs]
        low, high = bootstrap(ratios)
        result[name] = {"after_over_before_median": round(statistics.median(ratios), 3),
                        "ci95": [round(low, 3), round(high, 3)],
                        "before_median": round(statistics.median(b[name] for b, _ in pairs), 3),
                        "after_median": round(statistics.median(a[name] for _, a in pairs), 3),
                        "pairs": len(pairs), "ratios": [round(r, 3) for r in ratios]}
        print(f"{name:20} before {result[name]['before_median']:>10} after "
              f"{result[name]['after_median']:>10} ratio {result[name]['after_over_before_median']}"
              f" [{low:.3f}, {high:.3f}]")
    out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
