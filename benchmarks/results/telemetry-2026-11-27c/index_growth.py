"""The trace index's CPU per task as a session grows: rounds of 10,000 tasks' spans
(the runtime's shapes, as benchmarks/telemetry_agent_cost.py records them) converted,
then indexed by one IndexWriter kept across rounds; prints each round's CPU µs per task.

Usage: PYTHONPATH=<tree>/src python index_growth.py WAL_AUTOCHECKPOINT ROUNDS
"""

import os
import pathlib
import statistics
import sys
import tempfile
import time

from tracedray import telemetry
from tracedray.telemetry import instruments, trace_index
from tracedray.telemetry._record import start_remote_child
from tracedray.telemetry.spool_convert import sync_traces_dir

session = pathlib.Path(tempfile.mkdtemp(prefix="tel-wal-", dir="/tmp/tel-run"))
telemetry.configure("driver", session_dir=session, node_id="ab" * 14, session_id="s")
trace_index.create_index(session)
dispatch = instruments.dispatch_shape({"tracedray.node.id": "cd" * 28,
                                       "tracedray.worker.id": "ef" * 28,
                                       "tracedray.lease.id": "0123456789abcdef"})
execute = instruments.execution_shape("__main__.empty", "normal", "cd" * 28, "ef" * 28)


def record(tasks: int) -> None:
    ids = [os.urandom(16) for _ in range(tasks)]
    submits = [instruments.task_submitted(t, "__main__.empty", "normal", "bench.py:12 in main",
                                          b"\x01\0\0\0", 3) for t in ids]
    for span in submits:
        span.end()
    dispatches = [instruments.task_dispatched(dispatch, t, 0, parent=p)
                  for t, p in zip(ids, submits, strict=True)]
    for first in range(0, tasks, 10):
        telemetry.finish_spans(dispatches[first:first + 10])  # type: ignore[arg-type]
    for task, parent in zip(ids, submits, strict=True):
        trace_id, span_id, _, _ = parent.ids  # type: ignore[union-attr]
        start_remote_child(execute, (task, 0), trace_id.to_bytes(16, "big"), span_id, 1,
                           "").end()
    sync_traces_dir(session / "traces")


writer = trace_index.IndexWriter(session)
writer.update()
writer._conn.execute(f"PRAGMA wal_autocheckpoint={int(sys.argv[1])}")  # type: ignore[union-attr]
out = []
for _ in range(int(sys.argv[2])):
    record(10000)
    start = time.process_time()
    while writer.update().pending:
        pass
    out.append((time.process_time() - start) / 10000 * 1e6)
print(sys.argv[1], [round(x, 1) for x in out], "median", round(statistics.median(out[1:]), 1))
