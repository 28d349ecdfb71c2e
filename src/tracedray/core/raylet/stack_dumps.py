"""A raylet's answer to ``tracedray stack``: the stacks of the processes on its node.

Every process is asked at once (CoreWorkerService.DumpStacks) with the same deadline,
so the answer comes within that deadline however many are stuck: a process that does
not answer in time (SIGSTOPped, or its threads holding the GIL in native code) is
reported as such, never waited for. Native frames come from py-spy, where it is
installed and allowed to read the process (the raylet starts its workers, but ptrace
rules may still refuse); a refusal is reported beside the Python stacks.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from tracedray import logs
from tracedray._proto.v1 import core_worker_pb2_grpc, debug_pb2
from tracedray.core import rpc
from tracedray.core.address import Address

log = logs.get_logger(__name__)
DEFAULT_TIMEOUT_S = 5.0
MAX_TIMEOUT_S = 60.0
MAX_PARALLEL = 64


@dataclass(frozen=True)
class Target:
    """One process of the node as the raylet knows it."""

    worker_id: str
    pid: int
    component: str  # worker | driver
    state: str
    address: Address | None  # None: it has not registered its port (still starting)
    actor_id: str = ""  # hex


def timeout_of(request: debug_pb2.DumpStacksRequest) -> float:
    """The per-process deadline the request asks for, within bounds (pure)."""
    asked = request.timeout_s
    return DEFAULT_TIMEOUT_S if asked <= 0 else min(asked, MAX_TIMEOUT_S)


def not_answering(timeout_s: float) -> str:
    return (f"not answering within {timeout_s:g}s (stopped, stuck, or holding the GIL in "
            f"native code)")


def ask(target: Target, timeout_s: float, native: bool,
        breakpoints_only: bool = False) -> debug_pb2.ProcessStackDump:
    row = debug_pb2.ProcessStackDump(worker_id=target.worker_id, pid=target.pid,
                                     component=target.component, state=target.state,
                                     actor_id=target.actor_id)
    if target.address is None:
        row.error = "starting: it has not registered yet"
        return row
    try:
        stub = core_worker_pb2_grpc.CoreWorkerServiceStub(rpc.channel(target.address.target))
        row.dump.CopyFrom(stub.DumpStacks(
            debug_pb2.DumpStacksRequest(breakpoints_only=breakpoints_only), timeout=timeout_s))
    except grpc.RpcError as exc:
        code = exc.code() if hasattr(exc, "code") else None
        row.error = (not_answering(timeout_s) if code == grpc.StatusCode.DEADLINE_EXCEEDED
                     else f"did not answer: {code.name if code else exc}")
        return row
    if native:
        _add_native(row, timeout_s)
    return row


def dump_node(node_id: str, ip: str, targets: list[Target],
              request: debug_pb2.DumpStacksRequest) -> debug_pb2.NodeStackDumps:
    timeout_s = timeout_of(request)
    reply = debug_pb2.NodeStackDumps(node_id=node_id, ip=ip)
    if not targets:
        return reply
    pool = ThreadPoolExecutor(max_workers=min(MAX_PARALLEL, len(targets)),
                              thread_name_prefix="tracedray-stacks")
    try:
        rows = list(pool.map(lambda t: ask(t, timeout_s, request.native,
                                           request.breakpoints_only), targets))
    finally:
        pool.shutdown(wait=False)
    reply.processes.extend(rows)
    if request.breakpoints_only:
        return reply
    log.info("node.stack_dump", processes=len(rows),
             not_answering=sum(1 for r in rows if r.error))
    return reply


def native_frames(py_spy_json: Any) -> dict[int, list[str]]:
    """Thread id -> its frames as text lines, outermost first, from ``py-spy dump --json``
    (pure)."""
    out: dict[int, list[str]] = {}
    for thread in py_spy_json if isinstance(py_spy_json, list) else []:
        if not isinstance(thread, dict):
            continue
        frames = [f"{f.get('name', '?')} ({f.get('filename', '?')}:{f.get('line', '?')})"
                  for f in thread.get("frames") or [] if isinstance(f, dict)]
        frames.reverse()  # py-spy lists the innermost frame first
        out[int(thread.get("thread_id") or 0)] = frames
    return out


def _add_native(row: debug_pb2.ProcessStackDump, timeout_s: float) -> None:
    beside = Path(sys.executable).parent / "py-spy"  # the extra's script, PATH or not
    exe = str(beside) if beside.exists() else shutil.which("py-spy")
    if exe is None:
        row.native_error = "py-spy is not installed here (pip install 'tracedray[native]')"
        return
    try:
        done = subprocess.run([exe, "dump", "--native", "--json", "--pid", str(row.pid)],
                              capture_output=True, timeout=timeout_s, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        row.native_error = f"py-spy failed: {exc}"
        return
    if done.returncode != 0:
        text = (done.stderr or done.stdout).decode(errors="replace").strip()
        row.native_error = f"py-spy could not read pid {row.pid}: {text[-500:]}"
        return
    try:
        by_thread = native_frames(json.loads(done.stdout))
    except ValueError as exc:
        row.native_error = f"py-spy's output was not JSON: {exc}"
        return
    for thread in row.dump.threads:
        thread.native_frames.extend(by_thread.get(thread.thread_id, []))
