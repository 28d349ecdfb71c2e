"""Tasks and actor calls go out through the caller's submit inbox: in the order of their
``.remote()``, and recorded whole when the driver shuts down right after them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

from tracedray.api.calls import global_runtime
from tracedray.telemetry.append_file import read_data

DRIVER = textwrap.dedent("""
    import os
    import tracedray as ray
    ray.init(num_cpus=1)

    @ray.remote
    def f(i):
        return i

    @ray.remote
    class Log:
        def __init__(self):
            self.seen = []
        def add(self, i):
            self.seen.append(i)
        def read(self):
            return self.seen

    log = Log.remote()
    for i in range(300):
        log.add.remote(i)
    assert ray.get(log.read.remote()) == list(range(300))
    [f.remote(i) for i in range(200)]  # never waited for: shutdown() submits them
    ray.shutdown()
    os._exit(0)
""")


def log_lines_of_run(code: str, tmp_path: Path, process_kind: str) -> list[dict[str, Any]]:
    """Run ``code`` as a driver with its sessions under ``tmp_path``; the JSON log lines
    its ``process_kind`` processes (driver, worker) wrote."""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "TRACEDRAY_TEMP_DIR": str(tmp_path)})
    assert done.returncode == 0, done.stderr
    return [json.loads(line)
            for path in tmp_path.glob(f"session_2*/logs/{process_kind}-*.jsonl")
            for line in read_data(path).decode().splitlines()]


def test_calls_keep_their_order_and_shutdown_records_every_submission(
        tmp_path: Path, no_leaks: None) -> None:
    lines = log_lines_of_run(DRIVER, tmp_path, "driver")
    submitted = {line["function"]: 0 for line in lines if line["event"] == "task.submit"}
    for line in lines:
        if line["event"] == "task.submit":
            submitted[line["function"]] += 1
    assert submitted == {"Log.__init__": 1, "Log.add": 300, "Log.read": 1, "__main__.f": 200}


def test_calls_to_an_actor_made_together_go_out_in_one_write(ray: Any) -> None:
    @ray.remote
    class Counter:
        def __init__(self) -> None:
            self.count = 0

        def add(self) -> int:
            self.count += 1
            return self.count

    counter = Counter.remote()
    assert ray.get(counter.add.remote()) == 1  # connected: later calls go straight out
    worker = global_runtime().worker  # type: ignore[attr-defined]
    before = worker.actor_submitter.statistics()
    with worker.inbox._handing:  # the inbox takes nothing meanwhile: one batch of 50
        refs = [counter.add.remote() for _ in range(50)]
    assert ray.get(refs) == list(range(2, 52))
    after = worker.actor_submitter.statistics()
    assert after["calls_sent"] - before["calls_sent"] == 50
    assert after["writes"] - before["writes"] == 1


def test_tasks_submitted_together_go_out_to_a_worker_in_one_write(ray: Any) -> None:
    @ray.remote
    def square(x: int) -> int:
        return x * x

    assert ray.get(square.remote(2)) == 4  # a lease now lingers: the next tasks pipeline
    worker = global_runtime().worker  # type: ignore[attr-defined]
    before = worker.submitter.statistics()
    with worker.inbox._handing:  # the inbox takes nothing meanwhile: one batch of 40
        refs = [square.remote(i) for i in range(40)]
    assert ray.get(refs) == [i * i for i in range(40)]
    after = worker.submitter.statistics()
    assert after.sent_total - before.sent_total >= 40
    # The lingering lease took its pipeline's worth in the batch's one write.
    assert after.writes_total - before.writes_total < after.sent_total - before.sent_total


EXITING = textwrap.dedent("""
    import sys
    import tracedray as ray
    ray.init(num_cpus=1)

    @ray.remote
    def child():
        return 1

    @ray.remote(max_retries=0)
    def spawn_and_exit():
        refs = [child.remote() for _ in range(30)]
        sys.exit(3)

    try:
        ray.get(spawn_and_exit.remote())
    except ray.exceptions.WorkerCrashedError:
        pass
""")


def test_a_task_that_exits_right_after_submitting_leaves_every_submission_recorded(
        tmp_path: Path, no_leaks: None) -> None:
    lines = log_lines_of_run(EXITING, tmp_path, "worker")
    assert sum(line["event"] == "task.submit" for line in lines) == 30
