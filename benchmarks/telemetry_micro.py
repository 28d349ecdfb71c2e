"""Per-event cost of tracedray telemetry: one span, one log line.

Prints the median of several runs, in microseconds, for:
- a span with 5 attributes recorded in the spool (the default pipeline),
- the same span with OTEL_SDK_DISABLED=true (the no-op path),
- record_span (a finished span in one call, as object.put/get record theirs),
- turning one span of the spool into its JSON line (what the telemetry agent does,
  off the hot path): 5000 ``record_span`` spans at once, and agent-like rounds of
  task spans (a task.submit, task.dispatch and task.execute per task, their real
  attributes, ``--tasks-per-round``), and a round that finds nothing new,
- one JSON log line to the log file (process and task context, no trace),
- one JSON log line inside a span and a task context (trace ids added).

Each configuration runs in a fresh interpreter because OTEL_SDK_DISABLED is read
once per process. Usage: python benchmarks/telemetry_micro.py [--events N] [--runs R]
[--tasks-per-round T]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

CHILD = r"""
import json, pathlib, sys, time
from tracedray import logs, telemetry
events, runs, session = int(sys.argv[1]), int(sys.argv[2]), pathlib.Path(sys.argv[3])
tasks_per_round = int(sys.argv[4])
telemetry.configure("bench", session_dir=session, node_id="n" * 28, session_id="s")
logs.configure("bench", session_dir=session, node_id="n" * 28, session_id="s")
attributes = {"tracedray.task.id": "ab" * 14, "tracedray.task.function": "module.fn",
              "tracedray.task.attempt": 0, "tracedray.node.id": "n" * 28,
              "tracedray.worker.id": "w" * 28}
log = logs.get_logger("bench")

def per_event(action):
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        for _ in range(events):
            action()
        samples.append((time.perf_counter() - start) / events * 1e6)
    return samples

def one_span():
    with telemetry.span("task.execute", attributes):
        pass

def one_log():
    log.info("task.finished", duration_s=0.001, result_size=12)

def log_in_task():
    with telemetry.span("task.execute"), logs.task_context(task_id="t", job_id="j"):
        pass
    with logs.task_context(task_id="t", job_id="j"):
        log.info("task.finished", duration_s=0.001, result_size=12)

def one_record():
    telemetry.record_span("object.put", attributes, start_ns=time.time_ns())

def convert_per_span():
    # What the node's telemetry agent spends per span, later, off the hot path.
    from tracedray.telemetry.spool_convert import sync_traces_dir
    samples = []
    for _ in range(runs):
        for _ in range(events):
            one_record()
        start = time.perf_counter()
        converted = sync_traces_dir(session / "traces").spans
        samples.append((time.perf_counter() - start) / max(converted, 1) * 1e6)
    return samples

def task_spans(number):
    task = "%028x" % number
    submit = telemetry.start_span("task.submit", {
        "tracedray.task.id": task, "tracedray.task.function": "__main__.noop",
        "tracedray.task.kind": "normal", "tracedray.task.call_site": "bench.py:12 in main",
        "tracedray.job.id": "01000000", "tracedray.task.max_retries": 3})
    submit.end()
    parent = submit.get_span_context()
    telemetry.start_span("task.dispatch", {
        "tracedray.task.id": task, "tracedray.task.attempt": 0,
        "tracedray.node.id": "n" * 56, "tracedray.node.ip": "127.0.0.1",
        "tracedray.worker.id": "w" * 56, "tracedray.worker.pid": 4242,
        "tracedray.lease.id": "l" * 16,
        "tracedray.scheduling.reason": "reused lease llllllll on node nnnnnnnnnnnn"},
        parent=parent).end()
    telemetry.start_span("task.execute", {
        "tracedray.task.id": task, "tracedray.task.function": "__main__.noop",
        "tracedray.task.attempt": 0, "tracedray.task.kind": "normal",
        "tracedray.node.id": "n" * 56, "tracedray.worker.id": "w" * 56},
        parent=parent).end()

def convert_task_rounds():
    # The spool already holds the records converted above, as a long-lived process's
    # spool does when the agent's rounds reach it.
    from tracedray.telemetry.spool_convert import sync_traces_dir
    samples, idle, number = [], [], 0
    for _ in range(runs):
        elapsed, converted = 0.0, 0
        for _ in range(max(events // (3 * tasks_per_round), 1)):
            for _ in range(tasks_per_round):
                task_spans(number)
                number += 1
            start = time.perf_counter()
            converted += sync_traces_dir(session / "traces").spans
            elapsed += time.perf_counter() - start
        samples.append(elapsed / max(converted, 1) * 1e6)
        start = time.perf_counter()
        for _ in range(100):
            sync_traces_dir(session / "traces")
        idle.append((time.perf_counter() - start) / 100 * 1e6)
    return samples, idle

per_event(one_span)  # warm up caches (resource prefix, structlog binding)
result = {"span": per_event(one_span), "record": per_event(one_record),
          "log": per_event(one_log), "log_in_task": per_event(log_in_task)}
if telemetry.enabled():
    result["convert"] = convert_per_span()
    result["convert_tasks"], result["convert_idle"] = convert_task_rounds()
print(json.dumps(result))
"""


def run(disabled: bool, events: int, runs: int, tasks_per_round: int,
        ) -> dict[str, list[float]]:
    env = dict(os.environ)
    env.pop("OTEL_EXPORTER_OTLP_ENDPOINT", None)
    env.pop("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", None)
    if disabled:
        env["OTEL_SDK_DISABLED"] = "true"
    else:
        env.pop("OTEL_SDK_DISABLED", None)
    with tempfile.TemporaryDirectory() as session:
        out = subprocess.run([sys.executable, "-c", CHILD, str(events), str(runs), session,
                              str(tasks_per_round)],
                             env=env, capture_output=True, text=True, check=True)
    parsed: dict[str, list[float]] = json.loads(out.stdout)
    return parsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=5000)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--tasks-per-round", type=int, default=50,
                        help="tasks (3 spans each) the agent-like rounds find")
    args = parser.parse_args()
    enabled = run(False, args.events, args.runs, args.tasks_per_round)
    disabled = run(True, args.events, args.runs, args.tasks_per_round)
    median = statistics.median
    print(f"{args.runs} runs x {args.events} events, median per event (us)")
    print(f"span, 5 attributes, to the spool     : {median(enabled['span']):7.2f}")
    print(f"span, OTEL_SDK_DISABLED=true         : {median(disabled['span']):7.2f}")
    print(f"record_span (a finished span)        : {median(enabled['record']):7.2f}")
    print(f"spool -> JSON line, per span (agent) : {median(enabled['convert']):7.2f}")
    print(f"  task spans, {args.tasks_per_round:4d} tasks a round   : "
          f"{median(enabled['convert_tasks']):7.2f}")
    print(f"  a round finding nothing, per spool : {median(enabled['convert_idle']):7.2f}")
    print(f"log line (JSON file)                 : {median(enabled['log']):7.2f}")
    print(f"log line, SDK disabled               : {median(disabled['log']):7.2f}")
    # log_in_task = one empty span + two context entries + one log line
    print(f"span + task context + log line       : {median(enabled['log_in_task']):7.2f}")


if __name__ == "__main__":
    main()
