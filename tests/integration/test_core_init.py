"""init/shutdown: options, addresses, auto-init, detached actors across drivers, no leaks."""

from __future__ import annotations

import gc
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import cloudpickle
import pytest

import tracedray
from tracedray import exceptions

cloudpickle.register_pickle_by_value(sys.modules[__name__])

pytestmark = pytest.mark.integration


@tracedray.remote
def square(x: int) -> int:
    return x * x


@tracedray.remote(resources={"custom": 1})
def needs_custom() -> str:
    return "ran on custom"


@tracedray.remote
class Counter:
    def __init__(self, start: int = 0) -> None:
        self.value = start

    def increment(self) -> int:
        self.value += 1
        return self.value

    def read(self) -> int:
        return self.value


def test_auto_init_on_first_use_and_clean_shutdown(no_leaks: None) -> None:
    assert not tracedray.is_initialized()
    try:
        assert tracedray.get(square.remote(7)) == 49  # starts a local cluster, as Ray does
        assert tracedray.is_initialized()
        # What init left alive is out of the collector's later passes (process.py).
        assert gc.get_freeze_count() > 10_000
    finally:
        tracedray.shutdown()
    assert not tracedray.is_initialized()
    tracedray.shutdown()  # a second shutdown is a no-op


def test_init_options_and_ignored_ray_keywords(no_leaks: None) -> None:
    info = tracedray.init(num_cpus=3, resources={"custom": 2}, object_store_memory=96 << 20,
                          namespace="team", include_dashboard=False, dashboard_port=8265,
                          _system_config={"anything": 1}, log_to_driver=False)
    try:
        assert info["namespace"] == "team"
        resources = tracedray.cluster_resources()
        assert resources["CPU"] == 3.0 and resources["custom"] == 2.0
        assert tracedray.get(needs_custom.remote()) == "ran on custom"
        assert tracedray.get_runtime_context().namespace == "team"
        stats = tracedray.api.calls.global_worker().raylet.node_stats()
        assert stats.store_capacity == 96 << 20
        with pytest.raises(exceptions.RaySystemError, match="twice"):
            tracedray.init()
        assert tracedray.init(ignore_reinit_error=True)["namespace"] == "team"
    finally:
        tracedray.shutdown()


def test_unknown_keyword_is_an_error_before_anything_starts(no_leaks: None) -> None:
    with pytest.raises(exceptions.ConfigError, match="num_cpu"):
        tracedray.init(num_cpu=2)
    assert not tracedray.is_initialized()


def test_wrong_address_fails_fast_naming_it() -> None:
    started = time.monotonic()
    with pytest.raises(exceptions.ClusterConnectionError, match="127.0.0.1:9"):
        tracedray.init("127.0.0.1:9")
    assert time.monotonic() - started < 5.0
    assert not tracedray.is_initialized()
    with pytest.raises(exceptions.ConfigError, match="not-an-address"):
        tracedray.init("not-an-address")


def test_failed_init_leaves_no_trace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A wrong address makes no session folder and leaves ``session_latest`` where it was,
    so the running cluster's `tracedray status` still finds it."""
    from tracedray.core import session

    monkeypatch.setenv("TRACEDRAY_TEMP_DIR", str(tmp_path))
    running = session.create_session()
    before = sorted(p.name for p in tmp_path.iterdir())
    with pytest.raises(exceptions.ClusterConnectionError):
        tracedray.init("127.0.0.1:9")
    assert sorted(p.name for p in tmp_path.iterdir()) == before
    assert session.latest_session().root == running.root
    assert not tracedray.is_initialized()


@pytest.fixture
def head_node(no_leaks: None) -> Iterator[str]:
    """A head node started on its own (as `tracedray start --head`), so drivers come and go."""
    from tracedray.core import node, session

    paths = session.create_session()
    processes = node.start_head(paths, num_cpus=2, object_store_memory=64 << 20,
                                parent_pid=os.getpid())
    try:
        yield processes.gcs_address
    finally:
        processes.stop()


def test_detached_actor_outlives_its_driver(head_node: str) -> None:
    with pytest.raises(exceptions.ConfigError, match="num_cpus"):
        tracedray.init(head_node, num_cpus=1)  # resources belong to `tracedray start`
    tracedray.init(head_node, namespace="jobs")
    try:
        detached = Counter.options(name="keeper", lifetime="detached").remote(41)
        temporary = Counter.options(name="temporary").remote()
        assert tracedray.get(detached.increment.remote()) == 42
        assert tracedray.get(temporary.read.remote()) == 0
    finally:
        tracedray.shutdown()
    tracedray.init("auto", namespace="jobs")  # finds the latest session's address
    try:
        again = tracedray.get_actor("keeper")
        assert tracedray.get(again.read.remote()) == 42
        # the first driver's non-detached actor died with its job
        with pytest.raises(ValueError):
            tracedray.get_actor("temporary")
        tracedray.kill(again)
    finally:
        tracedray.shutdown()
