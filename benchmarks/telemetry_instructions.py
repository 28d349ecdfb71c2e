"""What telemetry costs in instructions, counted by valgrind: a figure the machine's load
does not move.

On this shared 2-vCPU machine a throughput or CPU-time ratio moves by ±10–15% from run
to run (other processes, cache and hyper-thread contention). ``valgrind --tool=callgrind``
counts the instructions a process executes, which do not depend on that load, so
small changes to the hot paths can be compared here before they are confirmed in
``benchmarks/telemetry.py``.

Printed:
- instructions per span on the hot paths, in a tight loop in one process with telemetry
  configured (``task.submit``: open, stamp a task spec, end, with a span shape and
  the task id as bytes as the runtime records it (a PACKED record), and with an
  attribute dict; a ``task.dispatch`` span of a lease's shape ended in a batch of 2,
  about what a burst's results come back in, and of 10; ``record_span``, as
  object.put/get record theirs);
- a driver's instructions per empty task (5,000 submitted, then gotten) on a live
  cluster with telemetry on and off; only the driver runs under valgrind (the cluster
  runs normally), so this is the share of the workload's bottleneck that telemetry
  adds. Under valgrind the driver runs ~50x slower, so results come back in smaller
  batches than in a real burst: a slight overestimate of the per-task cost.

Each figure is the difference of two runs with different counts divided by the
difference of the counts, so start-up and shutdown cancel out. Needs valgrind (Debian's
``valgrind`` package). Takes about 8 minutes on this machine.

Usage: python benchmarks/telemetry_instructions.py [--ops N] [--tasks N] [--skip-driver]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

MICRO = r"""
import os, pathlib, sys, tempfile
from tracedray import telemetry
from tracedray.core import ids, trace_context
from tracedray.telemetry import instruments
from tracedray._proto.v1 import common_pb2
telemetry.configure("driver", session_dir=pathlib.Path(tempfile.mkdtemp()))
which, n = sys.argv[1], int(sys.argv[2])
attributes = {"tracedray.task.id": "ab" * 12, "tracedray.task.function": "empty",
              "tracedray.task.kind": "normal", "tracedray.task.call_site": "bench.py:3",
              "tracedray.job.id": "0100", "tracedray.task.max_retries": 3}
lease_shape = instruments.dispatch_shape(
    {"tracedray.node.id": "ab" * 14, "tracedray.node.ip": "127.0.0.1",
     "tracedray.worker.id": "cd" * 14, "tracedray.worker.pid": 4242,
     "tracedray.lease.id": "ef" * 8, "tracedray.scheduling.reason": "reused lease"})
task_id = ids.new_task_id()  # ids go into shaped spans as bytes, as the runtime passes them
job_id = ids.new_job_id()
if which == "task.submit (shape, as the runtime)":
    for _ in range(n):
        span = instruments.task_submitted(task_id, "empty", "normal", "bench.py:3", job_id, 3)
        trace_context.stamp(common_pb2.TaskSpec(), span)
        telemetry.finish_span(span)
elif which == "task.submit (attribute dict)":
    for _ in range(n):
        span = telemetry.open_span("task.submit", dict(attributes))
        trace_context.stamp(common_pb2.TaskSpec(), span)
        telemetry.finish_span(span)
elif which.startswith("task.dispatch (shape, batch of "):
    batch = int(which.rstrip(")").rsplit(" ", 1)[1])
    parent = telemetry.open_span("task.submit", {})  # a PendingSpan, as the runtime's
    for _ in range(n // batch):
        telemetry.finish_spans([
            instruments.task_dispatched(lease_shape, task_id, 0, parent=parent)
            for _ in range(batch)])
elif which == "record_span":
    for _ in range(n):
        telemetry.record_span("object.put", dict(attributes), start_ns=1)
elif which == "baseline (attributes + spec)":
    for _ in range(n):
        dict(attributes), common_pb2.TaskSpec()
os._exit(0)  # no shutdown conversion in the count
"""

DRIVER = r"""
import os, sys
import tracedray

@tracedray.remote
def empty():
    return None

tracedray.init(num_cpus=2)
tracedray.get([empty.remote() for _ in range(300)])  # workers started, code warm
tasks = int(sys.argv[1])
if tasks:
    tracedray.get([empty.remote() for _ in range(tasks)])
tracedray.shutdown()
os._exit(0)
"""


def instructions(code: str, args: list[str], env: dict[str, str]) -> int:
    """Instructions the Python process running ``code`` executed (callgrind's Ir)."""
    done = subprocess.run(
        ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null",
         sys.executable, "-c", code, *args],
        env=env, capture_output=True, text=True, timeout=3600, check=False)
    match = re.search(r"refs:\s*([\d,]+)", done.stderr)
    if match is None:
        raise SystemExit(f"valgrind gave no count:\n{done.stderr[-2000:]}")
    return int(match.group(1).replace(",", ""))


def per_op(code: str, first: list[str], low: int, high: int, env: dict[str, str]) -> float:
    return (instructions(code, [*first, str(high)], env)
            - instructions(code, [*first, str(low)], env)) / (high - low)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", type=int, default=10_000)
    parser.add_argument("--tasks", type=int, default=2_000)
    parser.add_argument("--skip-driver", action="store_true")
    args = parser.parse_args()
    if shutil.which("valgrind") is None:
        raise SystemExit("needs valgrind (apt-get install valgrind)")
    with tempfile.TemporaryDirectory(prefix="tracedray-ir-") as temp_root:
        env = {**os.environ, "TRACEDRAY_TEMP_DIR": temp_root}
        for key in ("OTEL_SDK_DISABLED", "OTEL_EXPORTER_OTLP_ENDPOINT",
                    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "TRACEDRAY_ADDRESS"):
            env.pop(key, None)
        print(f"{'hot path (tight loop)':40s} {'instructions/op':>16s}")
        for which in ("baseline (attributes + spec)", "task.submit (shape, as the runtime)",
                      "task.submit (attribute dict)", "task.dispatch (shape, batch of 2)",
                      "task.dispatch (shape, batch of 10)",
                      "record_span"):
            count = per_op(MICRO, [which], 1_000, 1_000 + args.ops, env)
            print(f"{which:40s} {count:16,.0f}", flush=True)
        if args.skip_driver:
            return
        print(f"\n{'driver, per empty task':40s} {'instructions/op':>16s}")
        counts = {}
        for label, extra in (("telemetry on", {}), ("off (OTEL_SDK_DISABLED=true)",
                                                    {"OTEL_SDK_DISABLED": "true"})):
            counts[label] = per_op(DRIVER, [], 0, args.tasks, {**env, **extra})
            print(f"{label:40s} {counts[label]:16,.0f}", flush=True)
        on, off = counts.values()
        print(f"{'on / off':40s} {on / off:16.3f}  (telemetry adds {on / off - 1:.1%} "
              f"to the driver's instructions per task)")


if __name__ == "__main__":
    main()
