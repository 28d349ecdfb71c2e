"""Shared pieces of the CLI integration tests: an isolated session root, the CLI, a driver.

Each test module gets its own TRACEDRAY_TEMP_DIR, so `tracedray stop` in a test can
only ever stop that module's nodes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psutil
from typer.testing import CliRunner, Result

from tracedray.cli.app import app

# Holds a put (2 MB, shared memory), a task result made by a task that prints, and an
# actor; prints their ids as one JSON line, then waits for a line on stdin.
DRIVER = textwrap.dedent("""
    import json, sys
    import numpy as np
    import tracedray as ray

    ray.init(address="auto")

    @ray.remote
    def make(n):
        print("making", n, "bytes")
        return np.ones(n, dtype=np.uint8)

    @ray.remote
    class Counter:
        def __init__(self):
            self.n = 0
        def inc(self):
            self.n += 1
            print("counter at", self.n)
            return self.n

    big = ray.put(np.zeros(2_000_000, dtype=np.uint8))  # PUT_LINE
    result = make.remote(300_000)  # REMOTE_LINE
    ray.get(result)
    counter = Counter.remote()
    ray.get(counter.inc.remote())
    print(json.dumps({"put": big.hex(), "result": result.hex(),
                      "task": result.task_id().hex(), "actor": counter._actor_id.hex()}),
          flush=True)
    sys.stdin.readline()
    ray.shutdown()
""")


# A driver that calls the detached actor named "kept" in the namespace given as its
# argument (one an earlier driver left behind), and prints "PING pong".
PINGS_KEPT = textwrap.dedent("""
    import sys
    import tracedray as ray

    ray.init(address="auto", namespace=sys.argv[1])
    try:
        print("PING", ray.get(ray.get_actor("kept").ping.remote(), timeout=20), flush=True)
    finally:
        ray.shutdown()
""")


def line_of(marker: str) -> int:
    return next(i for i, line in enumerate(DRIVER.splitlines(), start=1) if marker in line)


def run(*args: str, code: int = 0) -> Result:
    result = CliRunner().invoke(app, list(args), catch_exceptions=False)
    assert result.exit_code == code, (
        f"tracedray {' '.join(args)} exited {result.exit_code}, expected {code}\n"
        f"stdout:\n{result.stdout}\nstderr:\n{result.stderr}")
    return result


def run_json(*args: str) -> Any:
    return json.loads(run(*args, "--format", "json").stdout)


def workers_by_pid() -> dict[int, dict[str, Any]]:
    """``tracedray list workers``, keyed by pid."""
    return {w["pid"]: w for w in run_json("list", "workers")}


def _node_processes(root: Path) -> list[psutil.Process]:
    from tracedray.cli import local_nodes

    return [psutil.Process(p.pid) for p in local_nodes.scan()
            if p.session_dir.resolve().is_relative_to(root.resolve())]


def _shm_files(root: Path) -> set[str]:
    names = {f"tracedray-{d.name[-24:]}" for d in root.glob("session_2*")}
    return {f for f in os.listdir("/dev/shm") if any(f.startswith(n + "-") for n in names)}


@contextmanager
def isolated_root(root: Path) -> Iterator[Path]:
    """TRACEDRAY_TEMP_DIR=root for the block; at the end every node under it is stopped
    and the block fails if any process or shared-memory file outlived `tracedray stop`."""
    previous = os.environ.get("TRACEDRAY_TEMP_DIR")
    os.environ["TRACEDRAY_TEMP_DIR"] = str(root)
    try:
        yield root
    finally:
        try:
            CliRunner().invoke(app, ["stop", "--grace-period", "10"], catch_exceptions=False)
            leftovers = _node_processes(root)
            shm = _shm_files(root)
        finally:
            if previous is None:
                os.environ.pop("TRACEDRAY_TEMP_DIR", None)
            else:
                os.environ["TRACEDRAY_TEMP_DIR"] = previous
        assert not leftovers, f"processes left after tracedray stop: {leftovers}"
        assert not shm, f"shared memory left after tracedray stop: {sorted(shm)[:5]}"


def start_head(*extra: str, num_cpus: int = 2) -> str:
    """`tracedray start --head` on a free port; returns the GCS address it printed."""
    out = run("start", "--head", "--port", "0", "--num-cpus", str(num_cpus),
              "--object-store-memory", str(200 << 20), *extra).stdout
    return next(line.split()[1] for line in out.splitlines() if line.strip().startswith("address:"))


class Driver:
    """A driver process connected with init(address="auto") that holds objects."""

    def __init__(self, folder: Path) -> None:
        script = folder / "cli_driver.py"
        script.write_text(DRIVER)
        self.process = subprocess.Popen([sys.executable, str(script)], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, text=True, cwd=folder)
        assert self.process.stdout is not None
        line = self.process.stdout.readline()  # blocks until the driver is ready (or died)
        assert line, f"driver exited with {self.process.wait()} before it was ready"
        # Echoed task output may precede the ids line.
        while not line.startswith("{"):
            line = self.process.stdout.readline()
            assert line, "driver exited before printing its object ids"
        self.ids: dict[str, str] = json.loads(line)
        self.pid = self.process.pid
        # The record lags the program by a flush of task events (0.1 s, later on a busy
        # machine): wait for the task's end to be in it, as the tests read it.
        deadline = time.monotonic() + 20
        while [row["state"] for row in run_json(
                "list", "tasks", "--filter", f"task_id={self.ids['task']}")] != ["FINISHED"]:
            assert time.monotonic() < deadline, "the driver's task never showed FINISHED"
            time.sleep(0.05)

    def stop(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write("\n")
        self.process.stdin.flush()
        self.process.wait(timeout=60)
