"""Objects between nodes and puts: tracedray next to Ray, two nodes on one machine.

Figures, in GB/s (higher is better), each sample one fresh object:

* ``transfer_100mb``: a task on node b returns 100 MB; once it is done, the driver
  (on the head) gets it: the time of that ``get`` (the pull and the mapping);
* ``transfer_1gb``: the driver puts 1 GB; a task on node b consumes it: the time
  from submission to the task's (tiny) result, the pull included;
* ``put_1mb`` and ``put_100mb``: ``put`` of a numpy array of that size, on the
  driver (the serialization, the copy into shared memory and the seal); each put's
  object is released before the next, as a loop that puts and drops does;
* ``memcpy_100mb``: this machine's copy limit, the reference for ``put_100mb``: a
  ``memcpy`` of 100 MB into an already-touched buffer (malloc'd, so no huge pages),
  measured in each engine's child process between its puts.

Each round starts a fresh two-node cluster per engine, in its own interpreter, and
the engines take turns (their order rotates round by round), so that the load of a
shared machine falls on both. Medians come with the pooled bootstrap interval of
``benchmarks/telemetry.py`` (rounds resampled, then samples within them), and the
tracedray / Ray ratio with the interval of the ratio of resampled medians.

Run: ``python benchmarks/transfer.py --rounds 3 --ray-python /tmp/rayvenv/bin/python
[--telemetry off] [--save benchmarks/results/perf-2026-11-26/transfer-X.json]``;
``--pool a.json b.json`` reports saved runs together.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

MB = 1_000_000
GB = 1_000_000_000
STORE = 2_500 * MB
ENGINES = ("before", "tracedray", "ray")
# workload -> (bytes, samples per round)
WORKLOADS = {"transfer_100mb": (100 * MB, 5), "transfer_1gb": (GB, 3),
             "put_1mb": (MB, 40), "put_100mb": (100 * MB, 5), "memcpy_100mb": (100 * MB, 5)}


# --------------------------------------------------------------------------- child side
def _cluster(engine: str) -> tuple[Any, Any]:
    """(the runtime module, a stop function) with a driver on the head (resource "a")
    and a second node (resource "b")."""
    if engine == "ray":
        import ray
        from ray.cluster_utils import Cluster

        cluster = Cluster(initialize_head=True, head_node_args={
            "num_cpus": 1, "resources": {"a": 1}, "object_store_memory": STORE})
        cluster.add_node(num_cpus=1, resources={"b": 1}, object_store_memory=STORE)
        ray.init(address=cluster.address, logging_level="WARNING", log_to_driver=False)

        def stop_ray() -> None:
            ray.shutdown()
            cluster.shutdown()

        return ray, stop_ray
    import tracedray
    from tracedray.core.node import join_node, start_head
    from tracedray.core.object_store.files import remove_orphans
    from tracedray.core.session import SessionPaths, create_session

    session = create_session()
    head = start_head(session, num_cpus=1, resources={"a": 1}, object_store_memory=STORE)
    node = join_node(SessionPaths(session.root), head.gcs_address, num_cpus=1,
                     resources={"b": 1}, object_store_memory=STORE, detach=False)
    tracedray.init(address=head.gcs_address)

    def stop_tracedray() -> None:
        tracedray.shutdown()
        node.stop()
        head.stop()
        remove_orphans(Path("/dev/shm"), f"tracedray-{session.root.name[-24:]}")

    return tracedray, stop_tracedray


def _run_child(engine: str, only: Sequence[str]) -> dict[str, list[float]]:
    import numpy as np

    ray, stop = _cluster(engine)
    try:
        @ray.remote(resources={"b": 1})
        def produce(size: int, seed: int) -> Any:
            return np.full(size, seed % 251, dtype=np.uint8)

        @ray.remote(resources={"b": 1})
        def consume(array: Any) -> int:
            return int(array[0]) + int(array[-1])

        def transfer_100mb(size: int, seed: int) -> float:
            ref = produce.remote(size, seed)
            ray.wait([ref], timeout=600, fetch_local=False)  # Ray's default pulls it
            start = time.perf_counter()
            value = ray.get(ref)
            elapsed = time.perf_counter() - start
            assert value.nbytes == size and value[-1] == seed % 251
            del value, ref
            return size / elapsed / 1e9

        def transfer_1gb(size: int, seed: int) -> float:
            ref = ray.put(np.full(size, seed % 251, dtype=np.uint8))
            start = time.perf_counter()
            total = ray.get(consume.remote(ref))
            elapsed = time.perf_counter() - start
            assert total == 2 * (seed % 251), total
            del ref
            return size / elapsed / 1e9

        def put(size: int, seed: int) -> float:
            array = np.full(size, seed % 251, dtype=np.uint8)
            start = time.perf_counter()
            ref = ray.put(array)
            elapsed = time.perf_counter() - start
            del ref
            return size / elapsed / 1e9

        def memcpy(size: int, seed: int) -> float:
            source = np.full(size, seed % 251, dtype=np.uint8)
            target = bytearray(size)  # touched: every page is there before the copy
            view = memoryview(target)
            start = time.perf_counter()
            view[:] = source.data
            elapsed = time.perf_counter() - start
            assert target[-1] == seed % 251
            return size / elapsed / 1e9

        measures = {"transfer_100mb": transfer_100mb, "transfer_1gb": transfer_1gb,
                    "put_1mb": put, "put_100mb": put, "memcpy_100mb": memcpy}
        ray.get(consume.remote(ray.put(np.ones(10 * MB, dtype=np.uint8))))  # warm up
        samples: dict[str, list[float]] = {}
        for name in only:
            size, count = WORKLOADS[name]
            measures[name](size, 0)  # warm this path
            samples[name] = [measures[name](size, seed) for seed in range(1, count + 1)]
        return samples
    finally:
        stop()


# --------------------------------------------------------------------------- parent side
def _measure(engine: str, python: str, only: Sequence[str], telemetry: bool,
             baseline_src: str | None = None, ray_path: str | None = None) -> dict[str, Any]:
    """One engine's samples from a fresh cluster. ``before`` is tracedray from
    ``baseline_src`` (a checkout of the commit to compare with)."""
    env = dict(os.environ)
    if engine == "before" and baseline_src:
        env["PYTHONPATH"] = baseline_src
    temp_dir = tempfile.mkdtemp(prefix=f"bench-transfer-{engine}-")
    env["TRACEDRAY_TEMP_DIR"] = temp_dir
    if not telemetry:
        env["OTEL_SDK_DISABLED"] = "true"
    if engine == "ray":
        env.pop("PYTHONPATH", None)
        if ray_path:
            env["PYTHONPATH"] = ray_path
    child = "ray" if engine == "ray" else "tracedray"
    out = subprocess.run([python, __file__, "--child", child, "--only", *only], env=env,
                         capture_output=True, text=True, timeout=1800)
    subprocess.run(["rm", "-rf", temp_dir], check=False)
    if out.returncode != 0:
        sys.stderr.write(out.stderr[-4000:])
        raise SystemExit(f"{engine} failed with exit code {out.returncode}")
    parsed: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return parsed


def _load_1m() -> float:
    return os.getloadavg()[0]


def ratio_interval(ours: Sequence[Sequence[float]], theirs: Sequence[Sequence[float]],
                   confidence: float = 0.95, resamples: int = 2000,
                   seed: int = 12) -> tuple[float, float]:
    """Bootstrap interval of median(ours) / median(theirs), each side resampled as
    ``telemetry.pooled_interval`` does (rounds, then samples within them)."""
    rng = random.Random(seed)

    def resampled_median(runs: Sequence[Sequence[float]]) -> float:
        pairs: list[float] = []
        for run in rng.choices(list(runs), k=len(runs)):
            pairs.extend(rng.choices(list(run), k=len(run)))
        return statistics.median(pairs)

    ratios = sorted(resampled_median(ours) / resampled_median(theirs)
                    for _ in range(resamples))
    tail = (1 - confidence) / 2
    return ratios[int(tail * resamples)], ratios[min(resamples - 1,
                                                     int((1 - tail) * resamples))]


def report(saved: Sequence[dict[str, Any]]) -> str:
    sys.path.insert(0, str(Path(__file__).parent))
    from telemetry import pooled_interval

    rounds: dict[str, dict[str, list[list[float]]]] = {}
    loads: list[float] = []
    cpus = sorted({str(run.get("cpus", "?")) for run in saved})  # runs saved before: unknown
    for run in saved:
        loads.extend(run["loads"])
        for entry in run["rounds"]:
            for engine, samples in entry.items():
                for name, values in samples.items():
                    rounds.setdefault(name, {}).setdefault(engine, []).append(values)
    engines = [e for e in ENGINES if any(e in r for run in saved for r in run["rounds"])]
    lines = [f"{'figure (GB/s)':16}" + "".join(f"{e:>28}" for e in engines)
             + f"{'td / ray':>24}"]
    for name in WORKLOADS:
        per_engine = rounds.get(name, {})
        row = f"{name:16}"
        for engine in engines:
            runs = per_engine.get(engine)
            if not runs:
                row += f"{'-':>28}"
                continue
            low, high = pooled_interval(runs)
            median = statistics.median([v for run in runs for v in run])
            row += f"{median:>10.3f} [{low:.3f}, {high:.3f}] n={sum(map(len, runs)):<3}"
        if "tracedray" in per_engine and "ray" in per_engine:
            ours = statistics.median([v for r in per_engine["tracedray"] for v in r])
            theirs = statistics.median([v for r in per_engine["ray"] for v in r])
            low, high = ratio_interval(per_engine["tracedray"], per_engine["ray"])
            row += f"{ours / theirs:>8.2f} [{low:.2f}, {high:.2f}]"
        lines.append(row)
    lines.extend(_put_to_memcpy(rounds, engines))
    runs_count = sum(len(run["rounds"]) for run in saved)
    lines.append(f"{len(saved)} saved run(s), {runs_count} rounds; load average (1 min) "
                 f"{min(loads):.1f}-{max(loads):.1f} on {'/'.join(cpus)} CPUs: a shared, busy "
                 "machine skews every figure; intervals are 95% bootstrap")
    return "\n".join(lines)


def _put_to_memcpy(rounds: dict[str, dict[str, list[list[float]]]],
                   engines: Sequence[str]) -> list[str]:
    """Each engine's 100 MB put as a share of this machine's memcpy (its own children's
    memcpy samples), with the bootstrap interval of that ratio."""
    puts, copies = rounds.get("put_100mb", {}), rounds.get("memcpy_100mb", {})
    lines = []
    for engine in engines:
        if puts.get(engine) and copies.get(engine):
            ours = statistics.median([v for r in puts[engine] for v in r])
            limit = statistics.median([v for r in copies[engine] for v in r])
            low, high = ratio_interval(puts[engine], copies[engine])
            lines.append(f"put 100 MB / memcpy, {engine}: {ours / limit:.2f} [{low:.2f}, "
                         f"{high:.2f}] ({ours:.2f} of {limit:.2f} GB/s)")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--only", nargs="+", choices=list(WORKLOADS), default=list(WORKLOADS))
    parser.add_argument("--engines", nargs="+", choices=ENGINES,
                        default=["tracedray", "ray"])
    parser.add_argument("--baseline-src", help="the src folder of tracedray for 'before'")
    parser.add_argument("--ray-python", default=sys.executable,
                        help="an interpreter where ray is installed")
    parser.add_argument("--ray-pythonpath",
                        help="PYTHONPATH for the Ray interpreter (a folder with numpy, where "
                        "its environment lacks it)")
    parser.add_argument("--telemetry", choices=("on", "off"), default="on")
    parser.add_argument("--save", help="write the samples to this JSON file")
    parser.add_argument("--pool", nargs="+", help="report these saved runs together")
    parser.add_argument("--child", choices=("tracedray", "ray"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(_run_child(args.child, args.only)))
        return
    if args.pool:
        print(report([json.loads(Path(p).read_text()) for p in args.pool]))
        return
    pythons = {"tracedray": sys.executable, "before": sys.executable, "ray": args.ray_python}
    saved: dict[str, Any] = {"telemetry": args.telemetry, "loads": [], "rounds": [],
                             "cpus": os.cpu_count(),
                             "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    for index in range(args.rounds):
        # Rotated, so that with three engines each takes every place in turn (reversing
        # alone left the middle one always second, after another cluster's teardown).
        shift = index % len(args.engines)
        order = args.engines[shift:] + args.engines[:shift]
        entry = {}
        for engine in order:
            saved["loads"].append(_load_1m())
            entry[engine] = _measure(engine, pythons[engine], args.only, args.telemetry == "on",
                                     args.baseline_src, args.ray_pythonpath)
            print(f"round {index + 1} {engine}: " + ", ".join(
                f"{k} {statistics.median(v):.3f}" for k, v in entry[engine].items()),
                flush=True)
        saved["rounds"].append(entry)
    if args.save:
        Path(args.save).parent.mkdir(parents=True, exist_ok=True)
        Path(args.save).write_text(json.dumps(saved, indent=1))
    print(report([saved]))


if __name__ == "__main__":
    main()
