"""Issue 21's acceptance, on one cluster: a driver that knows what it did (puts, task and
actor returns, a failing task), a second driver SIGKILLed with 2,000 tasks queued, and
OTLP export through a real collector. Afterwards every reader agrees with what happened:
files were whole JSON lines throughout, the store emptied when the owner left, the
timeline's peak is the bytes held, no task is left unfinished, the traceback names the
script, every span in the files reached the collector, and `memory` answers after
`tracedray stop`."""

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
from cli_support import isolated_root, run, run_json, start_head
from multinode_support import wait_for
from otlp_sink import otlp_sink, rotel_collector
from test_otlp_export import _wait_exported
from typer.testing import CliRunner

from tracedray.cli.app import app
from tracedray.core.gcs.client import GcsClient

pytestmark = pytest.mark.integration

MB = 1 << 20
HELD_MB = 4 * 10 + 3 * 8 + 2 * 6

DRIVER = textwrap.dedent("""
    import json, sys
    import numpy as np
    import tracedray as ray

    ray.init(address="auto")
    MB = 1 << 20

    @ray.remote
    def make(n):
        return np.ones(n * MB, dtype=np.uint8)

    @ray.remote
    class Maker:
        def make(self, n):
            return np.full(n * MB, 7, dtype=np.uint8)

    @ray.remote
    def fails():
        raise ValueError("the failure the record must name")  # FAILING LINE

    puts = [ray.put(np.zeros(10 * MB, dtype=np.uint8)) for _ in range(4)]
    returns = [make.remote(8) for _ in range(3)]
    maker = Maker.remote()
    actor_returns = [maker.make.remote(6) for _ in range(2)]
    ray.get(returns + actor_returns)
    try:
        ray.get(fails.remote())
    except ValueError as exc:
        error = str(exc)
    print(json.dumps({"error": error}), flush=True)
    sys.stdin.readline()
""")

QUEUES_AND_DIES = textwrap.dedent("""
    import time
    import tracedray as ray

    ray.init(address="auto")

    @ray.remote
    def nap(i):
        time.sleep(0.05)
        return i

    queued = [nap.remote(i) for i in range(2000)]
    print("QUEUED", flush=True)
    time.sleep(600)
""")

TERMINAL = {"FINISHED", "FAILED", "CANCELLED"}


class FileWatch:
    """Reads every log and trace file of a session, raw, again and again: each must be
    whole newline-terminated JSON lines at every moment."""

    def __init__(self, session: Path) -> None:
        self.session = session
        self.problems: list[str] = []
        self.reads = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            for path in [*self.session.glob("logs/*.jsonl"), *self.session.glob("traces/*.jsonl")]:
                try:
                    data = path.read_bytes()
                except OSError:
                    continue
                self.reads += 1
                if b"\0" in data:
                    self.problems.append(f"NUL byte in {path.name}")
                elif data and not data.endswith(b"\n") and not self._completed(path, len(data)):
                    self.problems.append(f"partial last line in {path.name}")
                else:
                    for line in data[:data.rfind(b"\n") + 1].splitlines():
                        try:
                            json.loads(line)
                        except ValueError:
                            self.problems.append(f"not JSON in {path.name}: {line[:80]!r}")
                            break

    @staticmethod
    def _completed(path: Path, seen: int) -> bool:
        """Whether the line a read saw cut at ``seen`` bytes is finished soon after.
        Linux does not make a read atomic against a write that crosses a page: a reader
        may see the first page of a line being written. A log shipper waits for the
        newline; a partial line that stays is the fault this watch looks for."""
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline:
            try:
                with path.open("rb") as file:
                    file.seek(seen)
                    if b"\n" in file.read():
                        return True
            except OSError:
                return True  # rotated away: its reader moved to the next file
            time.sleep(0.05)
        return False

    def stop(self) -> list[str]:
        self._stop.set()
        self._thread.join()
        return self.problems


def _store_empty() -> dict[str, Any] | None:
    (node,) = run_json("memory", "--stats-only")
    return node if node["objects"] == 0 and node["store_used"] == 0 else None


@pytest.mark.timeout(600)
def test_every_reader_agrees_with_what_happened(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    with otlp_sink() as sink, rotel_collector(sink.port, tmp_path) as rotel:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"http://127.0.0.1:{rotel.grpc_port}")
        with isolated_root(tmp_path / "root") as root:
            address = start_head()
            session = next(root.glob("session_2*"))
            watch = FileWatch(session)

            script = tmp_path / "knows_what_it_did.py"
            script.write_text(DRIVER)
            driver = subprocess.Popen([sys.executable, str(script)], stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, text=True, env=os.environ)
            assert driver.stdout is not None and driver.stdin is not None
            told = json.loads(driver.stdout.readline())
            # The traceback names the script, the line and its source.
            failing = next(i for i, line in enumerate(DRIVER.splitlines(), start=1)
                           if "FAILING LINE" in line)
            assert f'File "{script}", line {failing}, in fails' in told["error"], told
            assert "raise ValueError(" in told["error"]
            # The timeline's peak is what the driver holds: puts, task and actor returns.
            (series,) = run_json("memory", "--timeline").values()
            peak = series["peak"]["used"]
            assert abs(peak - HELD_MB * MB) <= 0.05 * HELD_MB * MB, (peak / MB, HELD_MB)

            driver.stdin.write("\n")
            driver.stdin.flush()
            assert driver.wait(timeout=60) == 0
            wait_for(_store_empty, 10, "the store to be empty after its owner left")

            second = subprocess.Popen([sys.executable, "-c", QUEUES_AND_DIES],
                                      stdout=subprocess.PIPE, text=True, env=os.environ)
            try:
                assert second.stdout is not None
                assert second.stdout.readline().strip() == "QUEUED"
                second.send_signal(signal.SIGKILL)
            finally:
                second.kill()
                second.wait()
            gcs = GcsClient(address)

            def unfinished() -> list[str]:
                return [t.state for t in gcs.get_tasks().tasks if t.state not in TERMINAL]

            wait_for(lambda: not unfinished(), 60, "every task to end")
            summary = {row["func_or_class_name"]: row for row in run_json("summary", "tasks")}
            assert summary, "summary tasks is empty"

            run("stop")
            after = CliRunner().invoke(app, ["memory", "--stats-only"])
            assert after.exit_code == 0, after.output
            assert "post-mortem view of session" in after.stderr
            problems = watch.stop()
            assert watch.reads > 0 and not problems, problems[:5]

        files, received = _wait_exported(session, sink)
        missing = set(files) - received
        assert not missing, f"{len(missing)} of {len(files)} file spans never reached OTLP"
