"""The session's ``logs/*.jsonl`` and ``traces/*.jsonl`` are plain JSON lines at every
moment: while a cluster runs tasks, and after a worker and a driver were SIGKILLed,
read as a log shipper reads them (raw bytes, no tracedray reader, which would copy
and convert first): no NUL byte, every line newline-terminated JSON, and every line
the killed processes had logged is there.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tracedray.api.calls import current_session_dir

pytestmark = pytest.mark.integration

COPIED_WITHIN_S = 60.0  # the agent copies every 0.5 s; a busy machine defers it (≤10 s)
PUTS = 40

KILLED_DRIVER = textwrap.dedent("""
    import sys
    import tracedray

    tracedray.init(address="auto")
    refs = [tracedray.put(i) for i in range({puts})]
    print("READY", flush=True)
    sys.stdin.readline()
""")


class FileWatcher:
    """Reads every public file of the session over and over, as ``tail -f`` would."""

    def __init__(self, session_dir: Path) -> None:
        self.folders = (session_dir / "logs", session_dir / "traces")
        self.problems: list[str] = []
        self.looks = 0
        self.files_seen: set[str] = set()
        self._pending_tail: dict[Path, bytes] = {}  # unterminated data seen last look
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> FileWatcher:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.look()
            time.sleep(0.02)

    def look(self) -> None:
        for folder in self.folders:
            for path in sorted(folder.glob("*.jsonl")):
                try:
                    data = path.read_bytes()
                except FileNotFoundError:
                    continue
                self.files_seen.add(path.name)
                self.problems.extend(problems(path, data, self._pending_tail))
        self.looks += 1


def problems(path: Path, data: bytes, pending: dict[Path, bytes]) -> list[str]:
    """What is wrong with one read of ``path``. A last line without its newline may be
    one caught in the middle of its single ``write`` (a µs window): it is wrong only if
    the next look finds it still unfinished."""
    found = []
    nul = data.find(b"\0")
    if nul >= 0:
        found.append(f"{path.name}: NUL byte at {nul} of {len(data)}")
    end = data.rfind(b"\n") + 1
    tail = data[end:]
    if tail and pending.get(path) == tail:
        found.append(f"{path.name}: last line stays unterminated: {tail[:80]!r}")
    if tail:
        pending[path] = tail
    else:
        pending.pop(path, None)
    for number, line in enumerate(data[:end].split(b"\n")[:-1], start=1):
        try:
            if not isinstance(json.loads(line), dict):
                raise ValueError("not an object")
        except ValueError as exc:
            found.append(f"{path.name}: line {number} is not JSON ({exc}): {line[:80]!r}")
    return found


def _lines(path: Path) -> list[dict[str, Any]]:
    data = path.read_bytes()
    assert b"\0" not in data and (not data or data.endswith(b"\n")), path
    return [json.loads(line) for line in data.splitlines()]


def _wait_for(condition: Any, what: str) -> None:
    deadline = time.monotonic() + COPIED_WITHIN_S
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def _span_names(path: Path) -> list[str]:
    if not path.exists():
        return []
    return [span["name"] for line in _lines(path) for entry in line["resourceSpans"]
            for scope in entry["scopeSpans"] for span in scope["spans"]]


def test_files_are_plain_json_lines_while_tasks_run_and_after_sigkill(
        ray: Any, tmp_path: Path) -> None:
    session_dir = Path(current_session_dir())

    @ray.remote
    def chatty(number: int) -> int:
        print(f"line {number} " + "x" * (number * 37 % 500))
        return number

    @ray.remote(max_retries=0)
    def dies() -> None:
        print("about to die", flush=True)
        os.kill(os.getpid(), signal.SIGKILL)

    with FileWatcher(session_dir) as watcher:
        for _ in range(3):
            assert ray.get([chatty.remote(n) for n in range(60)]) == list(range(60))
            assert ray.get([ray.put(b"v" * n) for n in range(100)])[5] == b"v" * 5
        with pytest.raises(Exception):  # noqa: B017 -- a crashed worker, whatever its type
            ray.get(dies.remote(), timeout=60)
        script = tmp_path / "driver.py"
        script.write_text(KILLED_DRIVER.format(puts=PUTS))
        driver = subprocess.Popen([sys.executable, str(script)], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True)
        assert driver.stdout is not None and driver.stdin is not None
        try:
            assert driver.stdout.readline().startswith("READY")
        finally:
            driver.kill()
            driver.wait()
            driver.stdin.close()
            driver.stdout.close()
        # Left to the node's agent (the watcher never copies): the killed driver's lines
        # and spans reach its public files whole.
        log_file = session_dir / "logs" / f"driver-{driver.pid}.jsonl"
        trace_file = session_dir / "traces" / f"driver-{driver.pid}.jsonl"
        _wait_for(lambda: sum(line["event"] == "object.put" for line in _lines(log_file))
                  == PUTS, "the killed driver's object.put lines")
        _wait_for(lambda: _span_names(trace_file).count("object.put") == PUTS,
                  "the killed driver's object.put spans")
        _wait_for(lambda: any(line.get("line") == "about to die"
                              for path in (session_dir / "logs").glob("worker-*.jsonl")
                              for line in _lines(path)),
                  "the killed worker's last line")
        looks = watcher.looks
        _wait_for(lambda: watcher.looks > looks + 2, "the watcher's last looks")
    assert not watcher.problems, watcher.problems[:10]
    assert watcher.looks > 10
    assert {"driver", "worker", "raylet", "gcs"} <= {name.split("-")[0]
                                                   for name in watcher.files_seen}
    # The killed driver's log ends with its last put: nothing it logged was lost.
    events = [line["event"] for line in _lines(log_file)]
    assert events[0] == "process.start" and "process.exit" not in events
