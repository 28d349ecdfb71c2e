"""Exit meaning is true (issue 21, point 8), on real clusters.

- A worker killed by its cgroup's memory limit is reported as such, with the limit and
  its peak RSS, and without the node's memory figure (which said nothing true). Needs a
  cgroup this test can create (root, a writable memory controller, v1 or v2): skipped
  elsewhere, saying why.
- A SIGKILL that the OOM killer did not send is not blamed on it.
- Log lines carry the node's advertised IP (its raylet's, its workers').
- A SIGKILLed attempt's `tracedray trace` says when it started.
"""

from __future__ import annotations

import json
import os
import signal
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from multinode_support import log_events, started_nodes, wait_for
from typer.testing import CliRunner

from tracedray import exceptions
from tracedray.cli.app import app
from tracedray.core.raylet import memory_evidence

pytestmark = pytest.mark.integration
MIB = 1 << 20
LIMIT = 256 * MIB


@contextmanager
def limited_cgroup(limit: int) -> Iterator[Path]:
    """A new memory cgroup limited to ``limit`` bytes (v1: below this process's own; v2: at
    the top of the hierarchy, where the memory controller can be enabled), removed at
    the end once its processes are gone."""
    if os.geteuid() != 0:
        pytest.skip("creating a cgroup needs root")
    own = memory_evidence.memory_cgroup(os.getpid())
    if own is None:
        pytest.skip("no memory cgroup hierarchy is mounted")
    name = f"td-test-{uuid.uuid4().hex[:8]}"
    directory = (own.directory if own.version == 1 else own.top) / name
    try:
        directory.mkdir()
    except OSError as exc:
        pytest.skip(f"cannot create a cgroup at {directory}: {exc}")
    try:
        try:
            if own.version == 1:
                (directory / "memory.limit_in_bytes").write_text(str(limit))
                swap = directory / "memory.memsw.limit_in_bytes"
                if swap.exists():
                    swap.write_text(str(limit))  # no swapping out of the limit either
            else:
                (directory / "memory.max").write_text(str(limit))
                (directory / "memory.swap.max").write_text("0")
        except OSError as exc:
            pytest.skip(f"cannot limit the memory of cgroup {directory}: {exc}")
        yield directory
    finally:
        deadline = time.monotonic() + 30
        while True:
            try:
                directory.rmdir()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)


def test_a_cgroup_oom_kill_names_the_limit_not_the_node(
        monkeypatch: pytest.MonkeyPatch) -> None:
    with limited_cgroup(LIMIT) as cgroup, \
            started_nodes(monkeypatch, {"num_cpus": 1}, {}) as cluster:
        # A node without CPUs starts no worker before its first lease: moving its raylet
        # puts every worker it starts in the cgroup, as a container would.
        cluster.join("small", num_cpus=0, resources={"small": 1})
        (cgroup / "cgroup.procs").write_text(str(cluster.raylet_pid("small")))
        ray = cluster.ray
        ray.init(address=cluster.address)
        try:
            @ray.remote(num_cpus=0, resources={"small": 1}, max_retries=0)
            def hog() -> None:
                Path("/proc/self/oom_score_adj").write_text("1000")  # the victim: this one
                blocks = []
                while True:
                    blocks.append(b"\x01" * (16 * MIB))  # touched pages: charged

            with pytest.raises(exceptions.WorkerCrashedError) as info:
                ray.get(hog.remote(), timeout=120)
        finally:
            ray.shutdown()
    error = info.value
    assert error.signal_name == "SIGKILL"
    assert ("killed by the OOM killer: its cgroup (" in error.meaning
            and f"/{cgroup.name}) reached its memory limit of {LIMIT // MIB} MiB"
            in error.meaning), error.meaning
    assert "the worker's peak RSS was" in error.meaning
    assert "node memory" not in str(error), str(error)
    (death,) = [r for r in log_events(cluster.session_dir, "worker.exit")
                if r.get("signal") == "SIGKILL"]
    assert death["cause"] == "cgroup_oom" and death["memory_limit"] == LIMIT, death
    assert death["peak_rss"] > 100 * MIB and "node_memory_percent" not in death


def test_advertised_ip_and_a_sigkills_start_and_cause(monkeypatch: pytest.MonkeyPatch,
                                                      tmp_path: Path) -> None:
    advertised = "127.0.0.2"  # not the default route's address: only the flag can say it
    with started_nodes(monkeypatch, {"num_cpus": 1, "host": advertised}, {}) as cluster:
        ray = cluster.ray
        ray.init(address=cluster.address)
        try:
            marker = tmp_path / "started"

            @ray.remote(max_retries=0)
            def killed(path: str) -> None:
                Path(path).write_text(str(os.getpid()))
                time.sleep(120)  # the test SIGKILLs this process meanwhile

            ref = killed.remote(str(marker))
            pid = int(wait_for(lambda: marker.exists() and marker.read_text(), 60,
                               "the task to start"))
            os.kill(pid, signal.SIGKILL)
            with pytest.raises(exceptions.WorkerCrashedError) as info:
                ray.get(ref, timeout=60)
            ray.api.calls.global_worker().flush_background_work()
            shown = CliRunner().invoke(app, ["trace", ref.task_id().hex(), "--address",
                                             cluster.address, "--format", "json"])
        finally:
            ray.shutdown()
    # Not the OOM killer: the kernel recorded no kill (where it can tell at all).
    error = info.value
    counts = memory_evidence.counts_for(os.getpid())
    if counts.cgroup_oom_kills is not None or counts.node_oom_kills is not None:
        assert "not by the OOM killer" in error.meaning and "node memory" not in str(error)
    # The raylet's and the worker's lines carry the node's address.
    raylet_lines = log_events(cluster.session_dir, "worker.exit")
    worker_lines = [r for r in log_events(cluster.session_dir, "task.execute")
                    if r.get("pid") == pid]
    assert raylet_lines and worker_lines
    assert {r["ip"] for r in raylet_lines + worker_lines} == {advertised}
    # The attempt's story starts where it started, though its worker could not say so.
    assert shown.exit_code == 0, shown.output
    events = json.loads(shown.output)["events"]
    started = [e for e in events if e["kind"] == "started"]
    assert len(started) == 1 and started[0]["attempt"] == 0, events
    assert started[0]["details"]["worker_pid"] == pid
    ended = next(e for e in events if e["kind"] == "ended")
    assert started[0]["time_unix_nano"] < ended["time_unix_nano"]
