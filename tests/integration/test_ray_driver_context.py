"""Behaviour that needs a cluster of its own: local mode, and a driver in a subprocess."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import cloudpickle
import pytest

import tracedray

cloudpickle.register_pickle_by_value(sys.modules[__name__])

pytestmark = pytest.mark.integration


@tracedray.remote
class Counter:
    def __init__(self) -> None:
        self.value = 0

    def add(self, n: int) -> int:
        self.value += n
        return self.value


def test_builtin_actor_methods_in_local_mode() -> None:
    tracedray.init(local_mode=True)
    try:
        actor = Counter.remote()
        assert tracedray.get(actor.__ray_ready__.remote()) is True
        assert tracedray.get(actor.__ray_call__.remote(lambda self: self.add(2))) == 2
    finally:
        tracedray.shutdown()


def test_a_module_beside_the_driver_script_imports_in_workers(tmp_path: Path,
                                                               no_leaks: None) -> None:
    (tmp_path / "helper_beside.py").write_text("def triple(x):\n    return 3 * x\n")
    script = tmp_path / "driver.py"
    script.write_text(textwrap.dedent("""
        import tracedray
        import helper_beside

        tracedray.init(num_cpus=1)
        f = tracedray.remote(helper_beside.triple)
        print("result", tracedray.get(f.remote(14), timeout=60))
        tracedray.shutdown()
    """))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in sys.path if p and "site-packages" not in p)}
    done = subprocess.run([sys.executable, str(script)], cwd="/", env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "result 42" in done.stdout


@tracedray.remote
def two() -> int:
    return 2


def test_refs_and_handles_of_an_earlier_cluster_fail_at_once(no_leaks: None) -> None:
    from tracedray import exceptions

    tracedray.init(num_cpus=1)
    try:
        actor = Counter.remote()
        assert tracedray.get(actor.add.remote(1)) == 1
        ref = two.remote()
        assert tracedray.get(ref) == 2
    finally:
        tracedray.shutdown()
    tracedray.init(num_cpus=1)
    try:
        with pytest.raises(exceptions.OwnerDiedError, match="from a different cluster"):
            tracedray.get(ref, timeout=30)
        with pytest.raises(exceptions.OwnerDiedError, match="from a different cluster"):
            tracedray.wait([ref], timeout=30)
        with pytest.raises(exceptions.RayActorError,
                           match="It might be dead or it's from a different cluster"):
            tracedray.get(actor.add.remote(1), timeout=30)
    finally:
        tracedray.shutdown()


@tracedray.remote
class Napper:
    async def nap(self) -> str:
        await asyncio.sleep(0.2)
        return "awake"


def test_async_actor_in_local_mode() -> None:
    tracedray.init(local_mode=True)
    try:
        actor = Napper.remote()
        started = time.monotonic()
        assert tracedray.get(actor.nap.remote()) == "awake"
        assert time.monotonic() - started >= 0.2  # it was awaited, not returned unrun
    finally:
        tracedray.shutdown()
