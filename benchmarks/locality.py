"""Locality-aware placement, the Ray paper's Figure 8a, with two nodes on this machine.

Every task takes one input (100 KB, 1 MB, 10 MB or 100 MB) made by a task on node
b, one fresh object per task so no copy is reused. As in the paper, a task does no
work on its input: it reads the first and the last byte, which proves the whole
object is mapped on the node where it runs. ``--touch-pages`` makes every task read
one byte per 4 KiB page instead, which adds the cost of faulting in the mapping
(~15 ms for 100 MB here) to both modes alike. The driver sits on the head
node. Each task's latency is one ``get(consume.remote(x))`` round trip, measured
with locality-aware placement (the lease request goes to the node holding the
input, so the task runs next to its data) and with it switched off (the local
raylet places it on the head, which must pull the input from b first).

Also prints node-to-node transfer throughput: a driver ``get`` on the head of a
100 MB object living on b (a chunked pull into the head's store, then a zero-copy map).

Run: ``.venv/bin/python benchmarks/locality.py [--plot locality.png] [--quick]``
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from typing import Any

KB, MB = 1_000, 1_000_000
# (input size, tasks): fewer tasks for big inputs keeps the b store and the run time small.
SIZES = ((100 * KB, 1000), (1 * MB, 200), (10 * MB, 60), (100 * MB, 12))
QUICK = ((100 * KB, 40), (1 * MB, 30), (10 * MB, 15), (100 * MB, 4))


def _label(size: int) -> str:
    return f"{size // MB} MB" if size >= MB else f"{size // KB} KB"


def _start_cluster() -> tuple[Any, Any]:
    from tracedray.core.node import join_node, start_head
    from tracedray.core.session import create_session

    session = create_session()
    head = start_head(session, num_cpus=2, object_store_memory=3 << 30)
    node_b = join_node(session, head.gcs_address, num_cpus=2, resources={"b": 100},
                       object_store_memory=3 << 30, detach=False)
    return head, node_b


def measure(sizes: tuple[tuple[int, int], ...], touch_pages: bool
            ) -> tuple[dict[int, dict[str, float]], float]:
    import numpy as np

    import tracedray as ray
    from tracedray.api.calls import global_worker

    head, node_b = _start_cluster()
    try:
        ray.init(address=head.gcs_address)

        @ray.remote(resources={"b": 0.01})
        def make(size: int, seed: int) -> Any:
            return np.full(size, seed % 251, dtype=np.uint8)

        @ray.remote
        def consume(array: Any, touch_pages: bool) -> int:
            if touch_pages:  # the task's own work, the same in both modes
                return int(array[::4096].sum())
            return int(array[0]) + int(array[-1])  # the input is there, end to end

        submitter = global_worker().submitter
        results: dict[int, dict[str, float]] = {}
        for size, count in sizes:
            results[size] = {}
            for mode, aware in (("aware", True), ("unaware", False)):
                inputs = [make.remote(size, i) for i in range(count)]
                ray.wait(inputs, num_returns=count)
                _settle(submitter)
                submitter.set_locality_enabled(aware)
                ray.get(consume.remote(inputs[0], touch_pages))  # warm a lease for this shape
                latencies = []
                for ref in inputs[1:]:
                    started = time.perf_counter()
                    ray.get(consume.remote(ref, touch_pages))
                    latencies.append(time.perf_counter() - started)
                results[size][mode] = statistics.mean(latencies)
                del inputs
        submitter.set_locality_enabled(True)
        # Node-to-node throughput: the head pulls 100 MB objects from b for the driver.
        rates = []
        for i in range(5):
            ref = make.remote(100 * MB, i)
            ray.wait([ref])
            started = time.perf_counter()
            array = ray.get(ref)
            rates.append(100 * MB / (time.perf_counter() - started) / 1e9)
            del array, ref
        return results, statistics.median(rates)
    finally:
        ray.shutdown()
        node_b.stop()
        head.stop()


def _settle(submitter: Any) -> None:
    """Wait until the lease requests the burst of ``make`` tasks left behind are answered
    and returned: queued at b, they would look like a long queue there and (rightly)
    push the consumers away from their data."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        stats = submitter.statistics()
        if stats.pending_lease_requests == 0 and stats.leases == 0:
            return
        time.sleep(0.02)


def print_table(results: dict[int, dict[str, float]], gbps: float) -> None:
    print(f"{'input':>8} | {'locality-aware':>15} | {'unaware':>10} | ratio")
    for size, row in results.items():
        print(f"{_label(size):>8} | {row['aware'] * 1000:12.2f} ms | "
              f"{row['unaware'] * 1000:7.2f} ms | {row['unaware'] / row['aware']:5.1f}x")
    aware = [row["aware"] for row in results.values()]
    unaware = [row["unaware"] for row in results.values()]
    print(f"growth from smallest to largest input: aware {aware[-1] / aware[0]:.1f}x, "
          f"unaware {unaware[-1] / unaware[0]:.1f}x")
    print(f"node-to-node transfer, 100 MB objects: {gbps:.2f} GB/s")


def plot(results: dict[int, dict[str, float]], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [_label(size) for size in results]
    positions = range(len(labels))
    width = 0.38
    figure, axes = plt.subplots(figsize=(6, 4))
    axes.bar([p - width / 2 for p in positions], [r["aware"] * 1000 for r in results.values()],
             width, label="locality-aware")
    axes.bar([p + width / 2 for p in positions], [r["unaware"] * 1000 for r in results.values()],
             width, label="unaware")
    axes.set_xticks(list(positions), labels)
    axes.set_yscale("log")
    axes.set_xlabel("task input size")
    axes.set_ylabel("mean task latency (ms, log)")
    axes.set_title("tracedray: locality-aware placement (Ray paper Fig. 8a)")
    axes.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    print(f"plot saved to {path}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--plot", default="locality.png", help="where to save the plot")
    parser.add_argument("--quick", action="store_true", help="fewer tasks per size")
    parser.add_argument("--touch-pages", action="store_true",
                        help="every task reads one byte per page of its input")
    args = parser.parse_args()
    os.environ.setdefault("TRACEDRAY_TEMP_DIR", tempfile.mkdtemp(prefix="tracedray-bench-"))
    results, gbps = measure(QUICK if args.quick else SIZES, args.touch_pages)
    print_table(results, gbps)
    plot(results, args.plot)


if __name__ == "__main__":
    main()
