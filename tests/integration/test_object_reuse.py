"""Puts that reuse freed objects' files (object_store/pool.py) on a real cluster: every
value read back is the one put, in the driver and in workers, while files go round."""

from __future__ import annotations

import gc
import sys
import time
from typing import Any

import cloudpickle
import numpy as np
import pytest

import tracedray

cloudpickle.register_pickle_by_value(sys.modules[__name__])

pytestmark = pytest.mark.integration
KB = 1000


@tracedray.remote
def checksum(array: np.ndarray) -> tuple[int, int, int]:
    return int(array.size), int(array[0]), int(array.astype(np.int64).sum())


def _value(seed: int) -> np.ndarray:
    # Sizes within a few size classes, so that freed files are taken again.
    size = (200 + 97 * (seed % 7)) * KB + seed
    return np.full(size, seed % 251, dtype=np.uint8)


def _node_stats() -> Any:
    return tracedray.api.calls.global_worker().raylet.node_stats()


def test_many_puts_through_reused_files_read_back_their_own_bytes(ray: Any) -> None:
    kept: dict[int, Any] = {}
    for seed in range(120):
        ref = ray.put(_value(seed))
        if seed % 3 == 0:
            kept[seed] = ref  # lives on while later puts reuse other files
        else:
            np.testing.assert_array_equal(ray.get(ref), _value(seed))
        del ref
        gc.collect()
        if seed % 10 == 9:  # let the frees reach the raylet, so the pool fills
            time.sleep(0.05)
    for seed, ref in kept.items():
        value = _value(seed)
        np.testing.assert_array_equal(ray.get(ref), value)
        assert ray.get(checksum.remote(ref)) == (value.size, seed % 251,
                                                   (seed % 251) * value.size)
    stats = _node_stats()
    assert stats.store_pool_reused > 0, stats
    assert stats.store_used + stats.store_pool_bytes <= stats.store_capacity
    io = tracedray.api.calls.global_worker().objects.statistics()
    # Files came back to the driver that wrote them, and were written through its
    # mappings; most seals did not wait; the frees went behind them on the same socket.
    assert io.mappings.hits_total > 0 and io.seals_sent > io.seals_waited >= 1, io
    assert io.frees_sent > 0, io


def test_a_value_held_by_the_driver_survives_its_object_being_freed(ray: Any) -> None:
    """A mapped value keeps its bytes: its file is not reused while the driver reads it."""
    ref = ray.put(_value(1))
    held = ray.get(ref)
    del ref
    gc.collect()
    deadline = time.monotonic() + 30
    while _node_stats().store_used and time.monotonic() < deadline:
        time.sleep(0.05)
    for seed in range(2, 30):
        np.testing.assert_array_equal(ray.get(ray.put(_value(seed))), _value(seed))
    np.testing.assert_array_equal(held, _value(1))


def test_a_raylet_killed_at_its_stop_leaves_no_files_behind(no_leaks: None) -> None:
    """A raylet that does not stop within its grace is killed before it can clean its
    store: whoever stops it removes the store's object files and pool folders."""
    import os
    import signal

    from tracedray.core import node, session
    from tracedray.core.object_store.files import store_name_prefix

    paths = session.create_session()
    processes = node.start_head(paths, num_cpus=1, object_store_memory=64 << 20,
                                parent_pid=os.getpid())
    prefix = store_name_prefix(paths.root, processes.node_id)
    try:
        tracedray.init(processes.gcs_address)
        try:
            kept = tracedray.put(_value(1))
            for seed in range(2, 6):  # freed at once: their files go to the pool
                tracedray.get(tracedray.put(_value(seed)))
            gc.collect()
            deadline = time.monotonic() + 30
            while not _node_stats().store_pool_bytes and time.monotonic() < deadline:
                time.sleep(0.05)
            assert _node_stats().store_pool_bytes > 0
            assert tracedray.get(kept)[0] == 1
        finally:
            tracedray.shutdown()
        ours = [name for name in os.listdir("/dev/shm") if name.startswith(prefix)]
        assert any("-pool-" in name for name in ours), ours
        raylet = processes.processes[-1]
        os.kill(raylet.pid, signal.SIGSTOP)  # it cannot answer its SIGTERM
    finally:
        processes.stop(timeout_s=0.5)
    assert raylet.returncode == -signal.SIGKILL
    assert not [name for name in os.listdir("/dev/shm") if name.startswith(prefix)]
