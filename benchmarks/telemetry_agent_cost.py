"""What a task's spans cost, in CPU, where they are recorded and where the agent turns
them into files: the hot paths and the telemetry agent's conversion and indexing.

One process, telemetry configured as a driver's, records rounds of ``--tasks`` tasks'
spans with the runtime's own shapes and hooks (``instruments.task_submitted``, a lease's
``dispatch_shape`` ended in batches of 10 through ``finish_spans``, a worker's
``execution_shape`` started by ``start_remote_child``), then, in a process of its
own as the agent is, converts the spool (``sync_traces_dir``) and indexes the lines
(``IndexWriter.update`` with the index's own transaction budget), timing each step with
``time.process_time``: CPU, which this shared machine's load moves far less than
throughput. The index is kept across rounds, as a session's grows.

Printed per task (its three spans), median of ``--rounds``: the hot path's steps, the
conversion, and the index. Run it with ``PYTHONPATH=<another tree>/src`` to measure that
tree the same way (ABBA before/after).

Usage: python benchmarks/telemetry_agent_cost.py [--tasks 10000] [--rounds 5] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def measure(tasks: int, rounds: int) -> dict[str, list[float]]:
    from tracedray import telemetry
    from tracedray.telemetry import instruments, trace_index
    from tracedray.telemetry._record import start_remote_child

    session = Path(tempfile.mkdtemp(prefix="telemetry-agent-cost-"))
    telemetry.configure("driver", session_dir=session, node_id="ab" * 14, session_id="s")
    trace_index.create_index(session)
    # What one lease's dispatches and one worker's runs of one function share, as the
    # runtime fills them in (ids of their real lengths).
    dispatch = instruments.dispatch_shape({
        "tracedray.node.id": "cd" * 28, "tracedray.node.ip": "127.0.0.1",
        "tracedray.worker.id": "ef" * 28, "tracedray.worker.pid": 4242,
        "tracedray.lease.id": "0123456789abcdef",
        "tracedray.scheduling.reason": "reused lease 01234567 on node cdcdcdcdcdcd"})
    execute = instruments.execution_shape("__main__.empty", "normal", "cd" * 28, "ef" * 28)
    results: dict[str, list[float]] = {
        "submit": [], "dispatch": [], "execute": [], "convert": [], "index": []}
    clock = time.process_time
    for number in range(rounds + 1):  # the first round warms caches and the index
        ids = [os.urandom(16) for _ in range(tasks)]
        start = clock()
        submits = [instruments.task_submitted(task, "__main__.empty", "normal",
                                              "bench.py:12 in main", b"\x01\0\0\0", 3)
                   for task in ids]
        for span in submits:
            span.end()
        submitted = clock()
        dispatches = [instruments.task_dispatched(dispatch, task, 0, parent=parent)
                      for task, parent in zip(ids, submits, strict=True)]
        for first in range(0, tasks, 10):
            telemetry.finish_spans(dispatches[first:first + 10])  # type: ignore[arg-type]
        dispatched = clock()
        for task, parent in zip(ids, submits, strict=True):
            trace_id, span_id, _, _ = parent.ids  # type: ignore[union-attr]
            start_remote_child(execute, (task, 0), trace_id.to_bytes(16, "big"), span_id, 1,
                               "").end()
        executed = clock()
        agent = _agent_round(session)
        assert agent["spans"] == 3 * tasks, agent
        if number:
            for key, seconds in (("submit", submitted - start),
                                 ("dispatch", dispatched - submitted),
                                 ("execute", executed - dispatched),
                                 ("convert", agent["convert"]), ("index", agent["index"])):
                results[key].append(seconds / tasks * 1e6)
    telemetry.shutdown()
    return results


# The agent's round, in a process of its own as the agent is: converting in the
# recording process would leave its heap (and its collector's schedule) unlike a
# driver's, and that moved the hot path's figures by a fifth.
AGENT_ROUND = """
import json, pathlib, sys, time
from tracedray.telemetry import trace_index
from tracedray.telemetry.spool_convert import sync_traces_dir
session = pathlib.Path(sys.argv[1])
start = time.process_time()
spans = sync_traces_dir(session / "traces").spans
converted = time.process_time()
index = trace_index.IndexWriter(session)
while index.update().pending:
    pass
index.close()
print(json.dumps({"spans": spans, "convert": converted - start,
                  "index": time.process_time() - converted}))
"""


def _agent_round(session: Path) -> dict[str, float]:
    """Convert the spool and index the new lines, as the agent's round does; CPU seconds."""
    done = subprocess.run([sys.executable, "-c", AGENT_ROUND, str(session)], check=True,
                          capture_output=True, text=True, timeout=600)
    answer: dict[str, float] = json.loads(done.stdout.splitlines()[-1])
    return answer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=10000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", action="store_true", help="print the samples as JSON")
    args = parser.parse_args()
    results = measure(args.tasks, args.rounds)
    if args.json:
        print(json.dumps(results))
        return
    median = statistics.median
    print(f"CPU µs per task (3 spans), median of {args.rounds} rounds of {args.tasks} tasks")
    for key, label in (("submit", "task.submit: open, end (driver)"),
                       ("dispatch", "task.dispatch: open, batch end (driver)"),
                       ("execute", "task.execute: start, end (worker)"),
                       ("convert", "spool -> JSON lines (agent)"),
                       ("index", "JSON lines -> trace index (agent)")):
        print(f"  {label:42s} {median(results[key]):7.2f}")


if __name__ == "__main__":
    main()
