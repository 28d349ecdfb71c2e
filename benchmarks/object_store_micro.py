"""Micro-benchmark of the shared-memory object store's data path.

Measures, for 1 MB and 100 MB numpy arrays, on the real /dev/shm:

* ``write``: ``write_object`` (create, pwrite header + buffers), the writer's cost of a put;
* ``seal``: the raylet-side accounting of the written file (``ObjectStore.seal``);
* ``get``: ``map_object`` + ``unpack`` + ``pickle.loads`` (what ``get`` does locally);
* memcpy of the same bytes into fresh pages and into already-faulted pages,
  the bars ``write`` is compared with.

and checks that the 100 MB get is zero-copy: the array's data address lies inside
the mapping, and the process's RSS does not grow by the array's size.

Run: ``.venv/bin/python benchmarks/object_store_micro.py [--runs N]``
"""

from __future__ import annotations

import argparse
import os
import pickle
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import numpy as np
import psutil

from tracedray.core.object_store.client import map_object, write_object
from tracedray.core.object_store.layout import unpack
from tracedray.core.object_store.store import ObjectStore

MB = 1_000_000


def _median_seconds(runs: int, setup: Callable[[], object], action: Callable[[], object],
                    teardown: Callable[[], object]) -> float:
    samples = []
    for _ in range(runs):
        setup()
        start = time.perf_counter()
        action()
        samples.append(time.perf_counter() - start)
        teardown()
    return statistics.median(samples)


def _serialize(value: object) -> tuple[bytes, list[pickle.PickleBuffer]]:
    buffers: list[pickle.PickleBuffer] = []
    return pickle.dumps(value, protocol=5, buffer_callback=buffers.append), buffers


def _bench_size(store: ObjectStore, nbytes: int, runs: int) -> dict[str, float]:
    value = np.random.default_rng(0).integers(0, 255, nbytes, dtype=np.uint8)
    inband, buffers = _serialize(value)
    path = store.object_path("b0")
    size = 0

    def write() -> None:
        nonlocal size
        size = write_object(path, inband, buffers)

    def remove() -> None:
        path.unlink(missing_ok=True)

    write_s = _median_seconds(runs, lambda: None, write, remove)

    def seal() -> None:
        store.seal("b0", size, owner="bench")

    seal_s = _median_seconds(runs, write, seal, lambda: store.free(["b0"]))

    write()

    def get() -> None:
        inband_view, buffer_views = unpack(map_object(path))
        pickle.loads(inband_view, buffers=buffer_views)

    get_s = _median_seconds(runs, lambda: None, get, lambda: None)
    remove()

    # Two bars for ``write``: a copy into fresh pages (what any new object costs:
    # the kernel must allocate and zero every page) and a copy into memory that is
    # already faulted in (what a store with one pre-mapped arena, like Ray's
    # plasma, pays).  The file-per-object design can only approach the first.
    source = value.data.cast("B")
    fresh_s = _median_seconds(runs, lambda: None, lambda: bytearray(source), lambda: None)
    warm = np.empty_like(value)
    np.copyto(warm, value)
    warm_s = _median_seconds(runs, lambda: None, lambda: np.copyto(warm, value), lambda: None)
    return {"write": write_s, "seal": seal_s, "get": get_s, "fresh": fresh_s, "warm": warm_s}


def _zero_copy_check(store: ObjectStore, nbytes: int) -> tuple[bool, int]:
    """(array data inside the mapping, RSS growth in bytes) for one local get."""
    value = np.ones(nbytes, dtype=np.uint8)
    path = store.object_path("c0")
    write_object(path, *_serialize(value))
    del value
    process = psutil.Process()
    before = process.memory_info().rss
    view = map_object(path)
    inband_view, buffer_views = unpack(view)
    array = pickle.loads(inband_view, buffers=buffer_views)
    grown = process.memory_info().rss - before
    mapped = np.frombuffer(view, dtype=np.uint8).ctypes.data
    inside = mapped <= array.ctypes.data < mapped + view.nbytes and not array.flags.writeable
    path.unlink()
    return inside, grown


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=9, help="runs per figure (median)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as spill:
        store = ObjectStore(node_id="bench", capacity_bytes=1 << 30,
                            name_prefix=f"tdbench-{uuid.uuid4().hex[:8]}",
                            spill_dir=Path(spill), shm_dir=Path("/dev/shm"))
        try:
            print(f"{'size':>8} {'write GB/s':>11} {'memcpy fresh':>13} {'memcpy warm':>12} "
                  f"{'seal µs':>8} {'get µs':>8} {'get GB/s':>9}")
            for nbytes in (1 * MB, 100 * MB):
                result = _bench_size(store, nbytes, args.runs)
                print(f"{nbytes // MB:>6}MB {nbytes / result['write'] / 1e9:>11.2f} "
                      f"{nbytes / result['fresh'] / 1e9:>13.2f} "
                      f"{nbytes / result['warm'] / 1e9:>12.2f} {result['seal'] * 1e6:>8.1f} "
                      f"{result['get'] * 1e6:>8.1f} {nbytes / result['get'] / 1e9:>9.0f}")
            inside, grown = _zero_copy_check(store, 100 * MB)
            print(f"100MB get zero-copy: array inside the mapping={inside}, "
                  f"RSS grew by {grown / MB:.1f} MB (a copy would add 100 MB)")
            if not inside or grown > 10 * MB:
                raise SystemExit("100 MB get is NOT zero-copy")
        finally:
            store.shutdown()
    print(f"pid {os.getpid()} done")


if __name__ == "__main__":
    main()
