"""Before/after pairs of ``benchmarks/core.py --only tracedray --runs 1``, alternated
ABBA (before, after, after, before, ...), each side's source chosen with ``PYTHONPATH``.

Usage: python abba.py BEFORE_SRC AFTER_SRC PAIRS OUT.json (appends to OUT.json; run it
again to add pairs). ``python abba.py --summary OUT.json`` prints each figure's median
after/before ratio (higher is better: times are inverted) with a 95% bootstrap interval.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve()
BENCHMARKS = HERE.parents[2]
sys.path.insert(0, str(BENCHMARKS))
from telemetry import median_interval  # noqa: E402

FIGURES = {"tasks_per_s": True, "task_rtt_ms": False, "tree_ms": False,
           "actor_calls_per_s": True, "actor_rtt_ms": False}


def run_side(src: str) -> dict[str, float]:
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        env = {**os.environ, "PYTHONPATH": src}
        subprocess.run([sys.executable, str(BENCHMARKS / "core.py"), "--only", "tracedray",
                        "--runs", "1", "--json", out.name], env=env, check=True,
                       stdout=subprocess.DEVNULL, timeout=600)
        raw = json.loads(Path(out.name).read_text())
    figures = raw.get("tracedray", raw)
    return {key: float(statistics.median(v) if isinstance(v, list) else v)
            for key, v in figures.items() if key in FIGURES}


def main() -> None:
    if sys.argv[1] == "--summary":
        pairs = json.loads(Path(sys.argv[2]).read_text())
        print(f"{len(pairs)} pairs")
        for key, higher in FIGURES.items():
            ratios = [(p["after"][key] / p["before"][key]) if higher
                      else (p["before"][key] / p["after"][key]) for p in pairs]
            low, high = median_interval(ratios)
            before = statistics.median(p["before"][key] for p in pairs)
            after = statistics.median(p["after"][key] for p in pairs)
            print(f"{key}: before {before:.4g} after {after:.4g} after/before "
                  f"{statistics.median(ratios):.2f} [{low:.2f}, {high:.2f}]")
        return
    before_src, after_src = sys.argv[1], sys.argv[2]
    count, out = int(sys.argv[3]), Path(sys.argv[4])
    pairs = json.loads(out.read_text()) if out.exists() else []
    for i in range(count):
        order = ("before", "after") if (len(pairs) + i) % 2 == 0 else ("after", "before")
        pair: dict[str, object] = {"load": os.getloadavg()[0]}
        for side in order:
            pair[side] = run_side(before_src if side == "before" else after_src)
        pairs.append(pair)
        out.write_text(json.dumps(pairs, indent=1))
        print(f"pair {len(pairs)} done (load {pair['load']:.1f})", flush=True)


if __name__ == "__main__":
    main()
