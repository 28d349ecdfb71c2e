"""A driver's last log line, ``process.exit``, carries the status the process really ended
with: drivers (processes of their own) that ran a task on one cluster started with
`tracedray start --head`, then ended each in its own way."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cli_support import isolated_root, start_head

from tracedray.telemetry.append_file import read_data

pytestmark = pytest.mark.integration

DRIVER = textwrap.dedent("""
    import os, signal, sys
    import tracedray as ray

    ray.init(address="auto")

    @ray.remote
    def square(x):
        return x * x

    assert ray.get(square.remote(3)) == 9
    print("PID", os.getpid(), flush=True)
""")

# The driver's last lines -> (its returncode, process.exit's fields but run_time_s).
ENDINGS: dict[str, tuple[str, int, dict[str, Any]]] = {
    "end": ("print('done')", 0, {"exit_code": 0, "exit_code_source": "end"}),
    "sys.exit(3)": ("sys.exit(3)", 3, {"exit_code": 3, "exit_code_source": "sys.exit"}),
    # CPython prints the message and exits 1.
    "sys.exit(message)": ("sys.exit('boom')", 1,
                          {"exit_code": 1, "exit_code_source": "sys.exit"}),
    "exception": ("raise LookupError('lost')", 1,
                  {"exit_code": 1, "exit_code_source": "exception", "error_type": "LookupError"}),
    # CPython kills itself with SIGINT after an unhandled KeyboardInterrupt (Ctrl-C).
    # Python's Ctrl-C handler set first: a driver started from a background job inherits
    # SIGINT ignored, and Python then leaves it so. raise_signal, not os.kill(getpid): a
    # process-directed signal may land on one of the driver's other threads.
    "KeyboardInterrupt": ("signal.signal(signal.SIGINT, signal.default_int_handler); "
                          "signal.raise_signal(signal.SIGINT)", -signal.SIGINT,
                          {"exit_code": 128 + signal.SIGINT, "exit_code_source": "exception",
                           "signal": "SIGINT", "error_type": "KeyboardInterrupt"}),
}


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    root = tmp_path_factory.mktemp("driver-exit")
    with isolated_root(root):
        start_head()
        (session_dir,) = root.glob("session_2*")
        yield session_dir


Ended = tuple[subprocess.CompletedProcess[str], list[dict[str, Any]]]


def _run_driver(session_dir: Path, name: str, ending: str) -> Ended:
    """Run DRIVER then ``ending``; its result and its log lines."""
    script = session_dir.parent / f"{name}.py"
    script.write_text(DRIVER + ending + "\n")
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=120, check=False)
    pid = int(done.stdout.split("PID ")[1].split()[0])
    log = session_dir / "logs" / f"driver-{pid}.jsonl"
    return done, [json.loads(line) for line in read_data(log).decode().splitlines()]


@pytest.mark.parametrize("name", sorted(ENDINGS))
def test_process_exit_agrees_with_the_real_exit_status(session: Path, name: str) -> None:
    ending, returncode, fields = ENDINGS[name]
    done, lines = _run_driver(session, "driver", ending)
    assert done.returncode == returncode, done.stderr[-3000:]
    last = lines[-1]
    assert last["event"] == "process.exit", last
    assert {key: last.get(key) for key in fields} == fields
    assert not set(last) & {"signal", "error_type"} - set(fields), last
    assert last["run_time_s"] > 0


def test_a_driver_killed_by_sigterm_claims_no_exit_code(session: Path) -> None:
    # SIGTERM's default action ends the process before any Python code runs again:
    # no process.exit line at all, rather than one saying 0.
    done, lines = _run_driver(session, "driver", "os.kill(os.getpid(), signal.SIGTERM)")
    assert done.returncode == -signal.SIGTERM, done.stderr[-3000:]
    assert lines[0]["event"] == "process.start"
    assert [line for line in lines if line["event"] == "process.exit"] == []
