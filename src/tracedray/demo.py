"""``python -m tracedray.demo``: a small program on a local cluster, then where to look.

It runs parallel tasks, nested tasks, an actor, a large numpy put/get, a task
that prints and one that fails, then shows how to ask tracedray what happened.
"""

from __future__ import annotations

import sys
import time


def main() -> int:
    import numpy as np

    import tracedray as ray

    info = ray.init()

    @ray.remote
    def square(x: int) -> int:
        return x * x

    @ray.remote
    def total_of_squares(n: int) -> int:
        print(f"summing {n} squares in a nested fan-out")
        return sum(ray.get([square.remote(i) for i in range(n)]))

    @ray.remote
    class Counter:
        def __init__(self) -> None:
            self.count = 0

        def add(self, amount: int) -> int:
            self.count += amount
            return self.count

    @ray.remote(max_retries=0)
    def fails() -> None:
        raise ValueError("this task fails on purpose")

    started = time.time()
    squares = ray.get([square.remote(i) for i in range(100)])
    nested = ray.get(total_of_squares.remote(20))
    counter = Counter.remote()  # type: ignore[attr-defined]  # @remote made it an ActorClass
    counts = ray.get([counter.add.remote(1) for _ in range(10)])
    array_ref = ray.put(np.arange(5_000_000, dtype=np.float64))
    array = ray.get(array_ref)
    print(f"100 tasks: sum of squares = {sum(squares)}")
    print(f"nested tasks: {nested}")
    print(f"actor: counts go {counts[0]}..{counts[-1]}")
    print(f"40 MB array: zero-copy read-only view, writeable={array.flags.writeable}")
    failing = fails.remote()
    try:
        ray.get(failing)
    except ValueError as exc:
        print(f"a failing task raised {type(exc).__name__} on get(): {str(exc).splitlines()[0]}")
    print(f"done in {time.time() - started:.2f}s\n")
    task_id = failing.task_id().hex()
    session_dir = info["session_dir"]
    ray.shutdown()
    print(f"session files: {session_dir}")
    print("  logs/*.jsonl    one JSON object per line (every process)")
    print("  traces/*.jsonl  OTLP JSON spans (every process)")
    print("ask what happened:")
    print(f"  tracedray trace {task_id} --address {info['address']}")
    print(f"  tracedray timeline --address {info['address']} --output timeline.json"
          "   (open in https://ui.perfetto.dev)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
