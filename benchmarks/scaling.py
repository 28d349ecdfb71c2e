"""Aggregate empty-task throughput as the cluster grows: 1 to N nodes of 2 CPUs each.

Every node is a real raylet (the head also runs the GCS) on this machine, 2 CPUs each.
On every node one submitter actor (0 CPUs, pinned to its node by a custom resource)
submits ``--tasks`` empty tasks and gets them, as the Ray paper's throughput figure has
tasks created from many places; each actor's tasks are leased from its own node's
raylet (spilling to others when that one is busy). All submitters start at one agreed
wall-clock instant after a warm-up batch (worker processes started); the figure is
all tasks over the time from the first submission to the last result, in tasks/s.

A 2-core machine shows nothing here (every node shares two cores): this is the
figure for a larger machine (``run`` on a 16-core device). Ray is measured the same
way when it is installed in the interpreter given by ``--ray-python``.

Each configuration runs in a fresh child interpreter; configurations (and engines)
alternate within each round, the order changing every round. Reported per node count:
the median over rounds with its 95% bootstrap interval, and the speed-up over one node.

Run: ``python benchmarks/scaling.py --nodes 1,2,4,8 --rounds 3 [--tasks 4000]
[--ray-python PY] [--save FILE]``; ``--pool a.json b.json`` reports saved runs together.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from telemetry import median_interval  # noqa: E402

CPUS_PER_NODE = 2
STORE = 200 * 1024 * 1024
WARMUP_TASKS = 200


# --------------------------------------------------------------------------- child side
def _tracedray_cluster(nodes: int) -> tuple[Any, Any]:
    import tracedray
    from tracedray.core.node import join_node, start_head
    from tracedray.core.object_store.files import remove_orphans
    from tracedray.core.session import SessionPaths, create_session

    session = create_session()
    head = start_head(session, num_cpus=CPUS_PER_NODE, resources={"node0": 1},
                      object_store_memory=STORE)
    joined = [join_node(SessionPaths(session.root), head.gcs_address, num_cpus=CPUS_PER_NODE,
                        resources={f"node{k}": 1}, object_store_memory=STORE, detach=False)
              for k in range(1, nodes)]
    tracedray.init(address=head.gcs_address)

    def stop() -> None:
        tracedray.shutdown()
        for node in reversed(joined):
            node.stop()
        head.stop()
        remove_orphans(Path("/dev/shm"), f"tracedray-{session.root.name[-24:]}")

    return tracedray, stop


def _ray_cluster(nodes: int) -> tuple[Any, Any]:
    import ray
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={
        "num_cpus": CPUS_PER_NODE, "resources": {"node0": 1}, "object_store_memory": STORE})
    for k in range(1, nodes):
        cluster.add_node(num_cpus=CPUS_PER_NODE, resources={f"node{k}": 1},
                         object_store_memory=STORE)
    ray.init(address=cluster.address, logging_level="WARNING", log_to_driver=False)

    def stop() -> None:
        ray.shutdown()
        cluster.shutdown()

    return ray, stop


def run_child(engine: str, nodes: int, tasks: int) -> dict[str, Any]:
    ray, stop = (_ray_cluster if engine == "ray" else _tracedray_cluster)(nodes)
    try:
        @ray.remote
        def empty() -> None:
            return None

        @ray.remote(num_cpus=0)
        class Submitter:
            def run(self, count: int, start_at: float) -> tuple[float, float]:
                while time.time() < start_at:
                    time.sleep(0.001)
                started = time.time()
                ray.get([empty.remote() for _ in range(count)])
                return started, time.time()

        submitters = [Submitter.options(resources={f"node{k}": 0.01}).remote()
                      for k in range(nodes)]
        ray.get([s.run.remote(WARMUP_TASKS, 0.0) for s in submitters])  # workers started
        start_at = time.time() + 0.5
        spans = ray.get([s.run.remote(tasks, start_at) for s in submitters])
        elapsed = max(end for _, end in spans) - min(start for start, _ in spans)
        return {"engine": engine, "nodes": nodes, "tasks": tasks * nodes,
                "elapsed_s": elapsed, "tasks_per_s": tasks * nodes / elapsed}
    finally:
        stop()


# --------------------------------------------------------------------------- parent side
def _child(python: str, engine: str, nodes: int, tasks: int) -> dict[str, Any]:
    done = subprocess.run([python, __file__, "--child", engine, str(nodes), str(tasks)],
                          capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise RuntimeError(f"{engine} with {nodes} nodes failed:\n{done.stderr[-3000:]}")
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def measure(node_counts: Sequence[int], rounds: int, tasks: int,
            ray_python: str | None) -> list[dict[str, Any]]:
    engines = [("tracedray", sys.executable)] + ([("ray", ray_python)] if ray_python else [])
    samples = []
    for round_index in range(rounds):
        order = [(e, p, n) for n in node_counts for e, p in engines]
        if round_index % 2:
            order.reverse()
        for engine, python, nodes in order:
            sample = _child(python, engine, nodes, tasks)
            sample["round"] = round_index
            samples.append(sample)
            print(f"round {round_index} {engine:9} {nodes} nodes: "
                  f"{sample['tasks_per_s']:8.0f} tasks/s", flush=True)
    return samples


def report(samples: Sequence[dict[str, Any]]) -> str:
    lines = ["engine     nodes  CPUs  tasks/s median [95% interval]  speed-up vs 1 node"]
    for engine in sorted({s["engine"] for s in samples}, reverse=True):
        mine = [s for s in samples if s["engine"] == engine]
        base = None
        for nodes in sorted({s["nodes"] for s in mine}):
            rates = [s["tasks_per_s"] for s in mine if s["nodes"] == nodes]
            median = statistics.median(rates)
            low, high = median_interval(rates)
            base = base or median
            lines.append(f"{engine:9} {nodes:6} {nodes * CPUS_PER_NODE:5}  {median:8.0f} "
                         f"[{low:.0f}, {high:.0f}] (n={len(rates)})  {median / base:5.2f}x")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", default="1,2,4,8")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tasks", type=int, default=4000, help="per node")
    parser.add_argument("--ray-python", default=None)
    parser.add_argument("--save", default=None)
    parser.add_argument("--pool", nargs="+", default=None)
    parser.add_argument("--child", nargs=3, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        engine, nodes, tasks = args.child
        print(json.dumps(run_child(engine, int(nodes), int(tasks))))
        return
    if args.pool:
        samples = [s for path in args.pool for s in json.loads(Path(path).read_text())["samples"]]
        print(report(samples))
        return
    started = time.time()
    samples = measure([int(n) for n in args.nodes.split(",")], args.rounds, args.tasks,
                      args.ray_python)
    text = report(samples)
    print(text)
    if args.save:
        machine = {"cpus": os.cpu_count(), "platform": platform.platform(),
                   "python": platform.python_version(), "load_before": os.getloadavg(),
                   "started": started, "seconds": time.time() - started}
        Path(args.save).write_text(json.dumps({"machine": machine, "samples": samples},
                                              indent=1))


if __name__ == "__main__":
    main()
