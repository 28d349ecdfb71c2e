"""CPU per operation of each process of a one-node cluster (driver, workers, GCS,
raylet, telemetry agent), telemetry on or off (OTEL_SDK_DISABLED from the environment).

Each run's CPU is read after the agent has converted and indexed it (it is told never
to defer, and its CPU is read until it stops growing). Prints one JSON line.

Usage: python roles.py empty|put OPS RUNS
"""

import json
import os
import statistics
import sys
import time

import psutil

# The agent converts and indexes each run in its settle time, not up to 10 s later.
os.environ["TRACEDRAY_TELEMETRY_AGENT_MAX_DEFER_S"] = "0"
import tracedray  # noqa: E402

ROLES = (("telemetry_agent", "agent"), ("worker_main", "worker"), ("raylet.main", "raylet"),
         ("gcs.main", "gcs"))


def role(process: psutil.Process) -> str:
    try:
        command = " ".join(process.cmdline())
    except psutil.Error:
        return "gone"
    return next((name for key, name in ROLES if key in command), command[:60])


def snapshot() -> dict[str, float]:
    me = psutil.Process()
    out = {"driver": sum(me.cpu_times()[:2])}
    for process in me.children(recursive=True):
        try:
            times = process.cpu_times()
        except psutil.Error:
            continue
        name = role(process)
        out[name] = out.get(name, 0.0) + times.user + times.system
    return out


def settle() -> None:
    """Until the agent's CPU stops growing for 3 s (it has done the run), at most 30 s."""
    last, still, deadline = -1.0, 0, time.time() + 30
    while time.time() < deadline and still < 6:
        time.sleep(0.5)
        now = snapshot().get("agent", 0.0)
        still = still + 1 if now == last else 0
        last = now


tracedray.init(num_cpus=2, object_store_memory=512 << 20)


@tracedray.remote
def empty() -> None:
    return None


small = {"key": "value", "numbers": list(range(16))}
work, ops, runs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])


def run() -> None:
    if work == "empty":
        tracedray.get([empty.remote() for _ in range(ops)])
    else:
        for _ in range(ops):
            tracedray.get(tracedray.put(small))


run()
settle()
results = []
for _ in range(runs):
    before = snapshot()
    run()
    settle()
    after = snapshot()
    results.append({k: (after.get(k, 0) - before.get(k, 0)) / ops * 1e6 for k in after})
print(json.dumps({"tree": os.environ.get("PYTHONPATH", ""),
                  "telemetry": "off" if os.environ.get("OTEL_SDK_DISABLED") else "on",
                  "work": work, "runs": results}))
medians = {k: round(statistics.median(r.get(k, 0) for r in results), 1)
           for k in sorted(results[0])}
print(os.environ.get("OTEL_SDK_DISABLED", "on"), work, medians, file=sys.stderr)
tracedray.shutdown()
