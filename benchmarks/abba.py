"""Before and after: any benchmark run on two source trees in alternated pairs.

A shared machine's load drifts by the minute, so two trees are compared in pairs run
back to back, the order alternating (before, after, after, before, ...: ABBA), and each
pair gives one after/before ratio per figure. A figure's verdict is the median of its
ratios with a 95% bootstrap interval (``telemetry.median_interval``); > 1 means the
after tree is better, whichever way the figure goes.

The benchmark is any command that writes its figures as one JSON object: to the file
named where ``{json}`` stands in the command, or as the last line of its standard output.
Numbers are figures; a list of numbers counts as its median; nested objects are flattened
with dots (``tracedray.tasks_per_s``). A figure is better lower when its name ends in a
unit of time or size (``_ms``, ``_us``, ``_ns``, ``_s`` but not ``_per_s``, ``_mb``,
``_kb``, ``_bytes``) or is named with ``--lower``; better higher otherwise (``--higher``
overrides). Each side's tracedray comes from its ``src`` folder through ``PYTHONPATH``
(a checkout's or ``git archive REV src | tar -x -C DIR``'s).

Usage:
  python benchmarks/abba.py --before OLD/src --after NEW/src --pairs 10 --out pairs.json \\
      -- python benchmarks/core.py --only tracedray --runs 1 --json {json}
  python benchmarks/abba.py --summary pairs.json [--only KEY ...]

``--out`` accumulates: run again to add pairs. Each pair records the load average.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from telemetry import median_interval  # noqa: E402

SIDES = ("before", "after")
_LOWER_SUFFIXES = ("_ms", "_us", "_ns", "_s", "_mb", "_kb", "_bytes")


def figures_of(raw: Any, prefix: str = "") -> dict[str, float]:
    """The numeric figures of a benchmark's JSON output, flattened (pure)."""
    found: dict[str, float] = {}
    if isinstance(raw, Mapping):
        for key, value in raw.items():
            found.update(figures_of(value, f"{prefix}{key}."))
    elif isinstance(raw, bool):
        pass
    elif isinstance(raw, int | float):
        found[prefix.rstrip(".")] = float(raw)
    elif isinstance(raw, list) and raw and all(
            isinstance(v, int | float) and not isinstance(v, bool) for v in raw):
        found[prefix.rstrip(".")] = float(statistics.median(raw))
    return found


def higher_is_better(name: str, lower: Sequence[str] = (), higher: Sequence[str] = ()) -> bool:
    """Which way figure ``name`` gets better (pure); see the module's docstring."""
    if name in higher:
        return True
    if name in lower:
        return False
    leaf = name.rsplit(".", 1)[-1]
    return leaf.endswith("_per_s") or not leaf.endswith(_LOWER_SUFFIXES)


def order_of(index: int) -> tuple[str, str]:
    """The sides of pair ``index`` in the order they run: ABBA (pure)."""
    return SIDES if index % 2 == 0 else (SIDES[1], SIDES[0])


def run_side(command: Sequence[str], src: str) -> dict[str, float]:
    """One run of ``command`` with tracedray from ``src``: its figures."""
    with tempfile.TemporaryDirectory(prefix="abba-") as temp:
        out = Path(temp) / "figures.json"
        argv = [part.replace("{json}", str(out)) for part in command]
        env = {**os.environ, "PYTHONPATH": os.path.abspath(src)}
        done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=1800)
        if done.returncode != 0:
            sys.stderr.write(done.stderr[-4000:])
            raise SystemExit(f"abba: {argv[0]} exited with {done.returncode} on {src}")
        if out.exists():
            return figures_of(json.loads(out.read_text()))
        lines = done.stdout.strip().splitlines()
        if not lines:
            raise SystemExit("abba: the command wrote no figures: name a {json} file in it, "
                             "or have it print one JSON object as its last line")
        return figures_of(json.loads(lines[-1]))


def summarize(pairs: Sequence[Mapping[str, Any]], only: Sequence[str] = (),
              lower: Sequence[str] = (), higher: Sequence[str] = ()) -> list[str]:
    """One line per figure common to every pair: medians of each side and the median
    after/before ratio (> 1: after is better) with its 95% interval (pure)."""
    if not pairs:
        return ["no pairs"]
    names = sorted(set.intersection(*(set(p["before"]) & set(p["after"]) for p in pairs)))
    loads = [float(p.get("load", 0.0)) for p in pairs]
    lines = [f"{len(pairs)} pairs, load average (1 min) {min(loads):.1f}-{max(loads):.1f}"]
    for name in names:
        if only and name not in only:
            continue
        up = higher_is_better(name, lower, higher)
        ratios = [(p["after"][name] / p["before"][name]) if up
                  else (p["before"][name] / p["after"][name]) for p in pairs
                  if p["before"][name] and p["after"][name]]
        if not ratios:
            continue
        low, high = median_interval(ratios)
        better = sum(r > 1 for r in ratios)
        lines.append(f"{name}: before {statistics.median(p['before'][name] for p in pairs):.4g}"
                     f" after {statistics.median(p['after'][name] for p in pairs):.4g}"
                     f" after/before {statistics.median(ratios):.3f} [{low:.3f}, {high:.3f}]"
                     f" ({'higher' if up else 'lower'} is better; after better in "
                     f"{better} of {len(ratios)})")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", help="src folder of the tree before")
    parser.add_argument("--after", help="src folder of the tree after")
    parser.add_argument("--pairs", type=int, default=10)
    parser.add_argument("--out", type=Path, help="the pairs' JSON file (accumulates)")
    parser.add_argument("--summary", type=Path, help="run nothing: summarize this file")
    parser.add_argument("--only", nargs="+", default=[], help="summarize these figures")
    parser.add_argument("--lower", nargs="+", default=[], help="figures better lower")
    parser.add_argument("--higher", nargs="+", default=[], help="figures better higher")
    parser.add_argument("command", nargs=argparse.REMAINDER,
                        help="-- the benchmark command ({json}: its output file)")
    args = parser.parse_args()
    if args.summary:
        print("\n".join(summarize(json.loads(args.summary.read_text()), args.only,
                                  args.lower, args.higher)))
        return
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not (args.before and args.after and args.out and command):
        parser.error("--before, --after, --out and a command after -- are needed")
    pairs: list[dict[str, Any]] = (json.loads(args.out.read_text())
                                   if args.out.exists() else [])
    for _ in range(args.pairs):
        pair: dict[str, Any] = {"load": os.getloadavg()[0]}
        for side in order_of(len(pairs)):
            pair[side] = run_side(command, args.before if side == "before" else args.after)
        pairs.append(pair)
        args.out.write_text(json.dumps(pairs, indent=1))
        print(f"pair {len(pairs)} done (load {pair['load']:.1f})", flush=True)
    print("\n".join(summarize(pairs, args.only, args.lower, args.higher)))


if __name__ == "__main__":
    main()
