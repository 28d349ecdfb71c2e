"""What the API layer costs a call: ``f.remote()``, ``actor.m.remote()`` and a small ``put``,
submission only (the tasks' results are gotten outside the timed loop).

Compares source trees (``--src A --src B``, each a ``src`` folder), alternating them in
fresh interpreters on a warm 2-CPU cluster each, and prints the best µs per call of every
tree (the minimum: the least disturbed by other load on the machine) and its ratio to the
first tree's.

Run: ``.venv/bin/python benchmarks/api_dispatch.py --src /old/src --src src [--rounds 5]``
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from typing import Any

CALLS = 2_000
REPEATS = 5


def child() -> None:
    import tracedray

    @tracedray.remote
    def f() -> None:
        return None

    @tracedray.remote
    class A:
        def m(self) -> None:
            return None

    tracedray.init(num_cpus=2, object_store_memory=128 << 20)
    try:
        actor = A.remote()
        tracedray.get([f.remote() for _ in range(50)] + [actor.m.remote() for _ in range(50)])
        best: dict[str, float] = {}
        for _ in range(REPEATS):
            for key, call in (("task", f.remote), ("actor_call", actor.m.remote),
                              ("put", lambda: tracedray.put(1))):
                start = time.perf_counter()
                refs = [call() for _ in range(CALLS)]
                elapsed = time.perf_counter() - start
                tracedray.get(refs)
                del refs
                best[key] = min(best.get(key, float("inf")), elapsed / CALLS * 1e6)
        print(json.dumps(best))
    finally:
        tracedray.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--src", action="append", required=True)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--child", action="store_true")
    args = parser.parse_args()
    if args.child:
        child()
        return
    results: dict[str, dict[str, float]] = {src: {} for src in args.src}
    for _ in range(args.rounds):
        for src in args.src:
            env = {**os.environ, "PYTHONPATH": os.path.abspath(src)}
            out = subprocess.run([sys.executable, __file__, "--src", src, "--child"], env=env,
                                 check=True, capture_output=True, text=True).stdout
            for key, value in json.loads(out.strip().splitlines()[-1]).items():
                results[src][key] = min(results[src].get(key, float("inf")), value)
    base = results[args.src[0]]
    for src, found in results.items():
        row: dict[str, Any] = {k: f"{v:.1f} µs ({v / base[k]:.2f}x)" for k, v in found.items()}
        print(src, row)


if __name__ == "__main__":
    main()
