"""Why a worker was SIGKILLed (issue 21, point 8): the pure verdict over the kernel's OOM
kill counts, limit and peak RSS, and the reading of those from /proc and cgroup files
(fake ones here: v1 and v2 layouts)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tracedray.core.raylet import memory_evidence as me
from tracedray.core.raylet.exit_meaning import (
    CGROUP_OOM,
    NODE_OOM,
    NOT_OOM,
    UNKNOWN,
    MemoryEvidence,
    explain_sigkill,
    new_oom_kills,
)
from tracedray.core.raylet.worker_exits import exit_memory_fields
from tracedray.core.raylet.worker_pool import WorkerProcess
from tracedray.telemetry import attributes as A
from tracedray.telemetry.cluster_events import attempt_start_attributes, exit_memory_attributes

MIB = 1 << 20


def test_an_oom_kill_in_a_limited_cgroup_is_the_limit_not_the_node() -> None:
    verdict = explain_sigkill(MemoryEvidence("/jobs/etl", 1, 512 * MIB, 1, 498 * MIB, 4.0))
    assert verdict.cause == CGROUP_OOM
    assert verdict.meaning == ("killed by the OOM killer: its cgroup (/jobs/etl) reached its "
                               "memory limit of 512 MiB; the worker's peak RSS was 498 MiB")
    assert verdict.node_memory_percent is None  # 4% of the node said nothing true


def test_an_oom_kill_without_a_limit_is_the_node_running_out() -> None:
    verdict = explain_sigkill(MemoryEvidence("/", 2, None, 2, 20_000 * MIB, 97.0))
    assert verdict.cause == NODE_OOM and verdict.node_memory_percent == 97.0
    assert verdict.meaning.startswith("killed by the OOM killer: the node ran out of memory")


def test_no_oom_kill_in_its_cgroup_means_someone_else_sent_it() -> None:
    verdict = explain_sigkill(MemoryEvidence("/jobs/etl", 0, 512 * MIB, 3, None, 91.0))
    assert verdict.cause == NOT_OOM and verdict.node_memory_percent is None
    assert "not by the OOM killer" in verdict.meaning and "kill -9" in verdict.meaning


def test_only_the_node_count_known() -> None:
    likely = explain_sigkill(MemoryEvidence(node_oom_kills=1, node_memory_percent=88.0))
    assert likely.cause == NODE_OOM and likely.node_memory_percent == 88.0
    assert likely.meaning.startswith("probably killed by the OOM killer: the node recorded "
                                     "1 OOM kill while it ran")
    limited = explain_sigkill(MemoryEvidence("/jobs/etl", None, 256 * MIB, 2, None, 30.0))
    assert limited.cause == CGROUP_OOM and limited.node_memory_percent is None
    assert "2 OOM kills" in limited.meaning and "256 MiB" in limited.meaning
    none = explain_sigkill(MemoryEvidence(node_oom_kills=0, node_memory_percent=50.0))
    assert none.cause == NOT_OOM and none.node_memory_percent is None


def test_without_evidence_the_old_hint_and_the_node_figure_stay() -> None:
    verdict = explain_sigkill(MemoryEvidence(node_memory_percent=12.0))
    assert verdict.cause == UNKNOWN and verdict.node_memory_percent == 12.0
    assert "often the OOM killer" in verdict.meaning


def test_a_kill_is_blamed_on_one_death_only() -> None:
    # Two workers started when the cgroup had counted 3 kills; one more kill happens.
    first, blamed = new_oom_kills(3, 4, None)
    assert (first, blamed) == (1, 4)
    second, blamed = new_oom_kills(3, 4, blamed)  # the other worker dies later: not it
    assert (second, blamed) == (0, 4)
    assert new_oom_kills(5, 7, 4) == (2, 7)  # started after that: counts from its start
    assert new_oom_kills(None, 7, 4) == (None, 4)
    assert new_oom_kills(9, 2, None) == (0, 2)  # a recreated cgroup starts over


# --- reading the kernel's records (fake /proc and cgroup trees)

def _proc(tmp_path: Path, pid: int, cgroup_lines: str, mountinfo: str, vmstat: str) -> Path:
    proc = tmp_path / "proc"
    (proc / str(pid)).mkdir(parents=True)
    (proc / str(pid) / "cgroup").write_text(cgroup_lines)
    (proc / "self").mkdir()
    (proc / "self" / "mountinfo").write_text(mountinfo)
    (proc / "vmstat").write_text(vmstat)
    return proc


def _write(directory: Path, **files: str) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (directory / name.replace("__", ".")).write_text(text)


def test_cgroup_v2_counts_and_the_lowest_limit_up_the_tree(tmp_path: Path) -> None:
    top = tmp_path / "unified"
    _write(top / "jobs", memory__max="1073741824\n", memory__events="oom 0\noom_kill 0\n")
    _write(top / "jobs" / "etl", memory__max="max\n",
           memory__events="low 0\nhigh 0\nmax 12\noom 2\noom_kill 2\noom_group_kill 0\n")
    mountinfo = (f"30 25 0:26 / {top} rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n"
                 "22 1 8:1 / / rw - ext4 /dev/sda1 rw\n")
    proc = _proc(tmp_path, 42, "0::/jobs/etl\n", mountinfo, "nr_free_pages 1\noom_kill 7\n")
    counts = me.counts_for(42, proc)
    assert counts.cgroup == me.Cgroup("/jobs/etl", top / "jobs" / "etl", top, 2)
    assert (counts.cgroup_oom_kills, counts.node_oom_kills) == (2, 7)
    assert me.memory_limit(counts.cgroup) == 1 << 30  # the parent's
    _write(top / "jobs" / "etl", memory__events="oom 3\noom_kill 3\n")
    again = me.counts_again(counts, proc)
    assert again.cgroup == counts.cgroup and again.cgroup_oom_kills == 3


def test_cgroup_v1_memory_hierarchy_in_a_hybrid_setup(tmp_path: Path) -> None:
    memory = tmp_path / "memory"
    unlimited = "9223372036854771712\n"
    _write(memory / "batch", memory__limit_in_bytes=unlimited)
    _write(memory / "batch" / "w1", memory__limit_in_bytes=str(300 * MIB),
           memory__oom_control="oom_kill_disable 0\nunder_oom 0\noom_kill 1\n")
    # The v2 hierarchy has no memory controller here (no memory.events): v1 is used.
    mountinfo = (f"31 25 0:27 / {tmp_path / 'unified'} rw - cgroup2 cgroup2 rw\n"
                 f"35 25 0:31 / {memory} rw,nosuid - cgroup cgroup rw,memory\n"
                 f"36 25 0:32 / {tmp_path / 'cpu'} rw - cgroup cgroup rw,cpu,cpuacct\n")
    proc = _proc(tmp_path, 7, "4:memory:/batch/w1\n3:cpu,cpuacct:/\n0::/\n", mountinfo,
                 "oom_kill 0\n")
    counts = me.counts_for(7, proc)
    assert counts.cgroup == me.Cgroup("/batch/w1", memory / "batch" / "w1", memory, 1)
    assert counts.cgroup_oom_kills == 1
    assert me.memory_limit(counts.cgroup) == 300 * MIB


def test_a_container_mount_of_part_of_the_tree(tmp_path: Path) -> None:
    # Docker (no cgroup namespace) mounts its own subtree: /proc names the full path.
    top = tmp_path / "cg"
    _write(top / "sub", memory__events="oom_kill 4\n", memory__max="max\n")
    _write(top, memory__max=str(2 << 30))
    mountinfo = f"40 30 0:40 /docker/abc {top} ro - cgroup2 cgroup rw\n"
    proc = _proc(tmp_path, 9, "0::/docker/abc/sub\n", mountinfo, "")
    counts = me.counts_for(9, proc)
    assert counts.cgroup is not None and counts.cgroup.directory == top / "sub"
    assert counts.cgroup_oom_kills == 4 and counts.node_oom_kills is None
    assert me.memory_limit(counts.cgroup) == 2 << 30
    outside = _proc(tmp_path / "other", 9, "0::/system.slice/x\n", mountinfo, "")
    assert me.counts_for(9, outside).cgroup is None


def test_the_v1_root_and_a_missing_process_are_unknown(tmp_path: Path) -> None:
    memory = tmp_path / "memory"
    _write(memory, memory__oom_control="oom_kill 12\n")
    mountinfo = f"35 25 0:31 / {memory} rw - cgroup cgroup rw,memory\n"
    proc = _proc(tmp_path, 3, "4:memory:/\n", mountinfo, "oom_kill 12\n")
    counts = me.counts_for(3, proc)
    assert counts.cgroup is not None and counts.cgroup_oom_kills is None
    assert counts.node_oom_kills == 12
    gone = me.counts_for(999, proc)
    assert gone.cgroup is None and gone.cgroup_oom_kills is None


def test_the_reaper_learns_the_peak_rss_with_the_exit_status() -> None:
    child = subprocess.Popen([sys.executable, "-c",
                              "b = bytearray(64 << 20); import os; os.kill(os.getpid(), 9)"])
    returncode, peak = me.wait_with_peak_rss(child)
    assert returncode == -9 and child.returncode == -9 and child.poll() == -9
    assert peak is not None and peak >= 64 << 20


def test_exit_facts_for_the_span_and_the_log() -> None:
    worker = WorkerProcess("w1", subprocess.Popen([sys.executable, "-c", "pass"]))
    worker.process.wait()
    worker.memory = MemoryEvidence("/jobs/etl", 1, 512 * MIB, 1, 498 * MIB, 4.0)
    worker.exit_cause = CGROUP_OOM
    assert exit_memory_fields(worker) == {"cause": CGROUP_OOM, "cgroup": "/jobs/etl",
                                          "memory_limit": 512 * MIB, "peak_rss": 498 * MIB}
    assert exit_memory_attributes(exit_memory_fields(worker)) == {
        A.EXIT_CAUSE: CGROUP_OOM, A.EXIT_CGROUP: "/jobs/etl", A.EXIT_MEMORY_LIMIT: 512 * MIB,
        A.EXIT_PEAK_RSS: 498 * MIB}
    worker.node_memory_percent = 97.0
    assert exit_memory_attributes(exit_memory_fields(worker))[A.NODE_MEMORY_PERCENT] == 97.0
    assert attempt_start_attributes({"started_at": 1767225600.5}) == {
        A.TASK_STARTED: 1_767_225_600_500_000_000}
    assert attempt_start_attributes({}) == attempt_start_attributes({"started_at": "x"}) == {}
