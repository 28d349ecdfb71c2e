"""Shared fixtures: an isolated session root per test run, real clusters, leak checks."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

# pytester runs generated test files (tests of the pytest plugin, at suite scale).
pytest_plugins = ("pytester",)


@pytest.fixture(scope="session", autouse=True)
def _isolated_temp_root(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Sessions of this test run live under one temp folder, never the user's."""
    root = tmp_path_factory.mktemp("tracedray-root")
    previous = os.environ.get("TRACEDRAY_TEMP_DIR")
    os.environ["TRACEDRAY_TEMP_DIR"] = str(root)
    yield root
    if previous is None:
        os.environ.pop("TRACEDRAY_TEMP_DIR", None)
    else:
        os.environ["TRACEDRAY_TEMP_DIR"] = previous


def _tracedray_children() -> list[psutil.Process]:
    out = []
    for child in psutil.Process().children(recursive=True):
        try:
            if any("tracedray" in part for part in child.cmdline()):
                out.append(child)
        except psutil.Error:
            continue
    return out


_SHM_PREFIX = "tracedray-"
_FRAGMENT = 24  # a store's files are named tracedray-<last 24 chars of its session dir>-...


def _shm_files() -> set[str]:
    try:
        return {name for name in os.listdir("/dev/shm") if name.startswith(_SHM_PREFIX)}
    except OSError:
        return set()


def _session_fragments(base: Path) -> set[str]:
    """The name fragments of every session folder this test run created under ``base``
    (its sessions' store files carry them): other runs on the machine are not ours."""
    found = set()
    for _, dirnames, _ in os.walk(base):
        for name in list(dirnames):
            if name.startswith("session_2"):
                found.add(name[-_FRAGMENT:])
                dirnames.remove(name)  # nothing to look for inside a session
    return found


@pytest.fixture
def no_leaks(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Fail the test if it leaves tracedray processes or shared-memory files behind."""
    shm_before = _shm_files()
    yield
    leftovers = _tracedray_children()
    gone, alive = psutil.wait_procs(leftovers, timeout=10)
    for proc in alive:
        proc.kill()
    ours = _session_fragments(tmp_path_factory.getbasetemp())
    new_shm = {name for name in _shm_files() - shm_before
               if name[len(_SHM_PREFIX):len(_SHM_PREFIX) + _FRAGMENT] in ours}
    assert not alive, f"leaked processes: {[p.pid for p in alive]}"
    assert not new_shm, f"leaked shared memory: {sorted(new_shm)[:5]}"


@pytest.fixture
def ray(no_leaks: None) -> Iterator[object]:
    """A fresh local cluster (2 CPUs, 256 MiB store) as the `ray` module users know."""
    import tracedray

    tracedray.init(num_cpus=2, object_store_memory=256 << 20)
    try:
        yield tracedray
    finally:
        tracedray.shutdown()


@pytest.fixture(scope="module")
def shared_ray() -> Iterator[object]:
    """One cluster for a whole module of read-only API tests (faster than one per test)."""
    import tracedray

    tracedray.init(num_cpus=2, object_store_memory=256 << 20)
    try:
        yield tracedray
    finally:
        tracedray.shutdown()
