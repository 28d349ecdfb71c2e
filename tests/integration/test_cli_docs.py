"""Every `$ tracedray ...` example in docs/cli.md runs, in document order, against a real
cluster with a driver holding objects; the two long-running examples (`--block`,
`--follow`) have their own tests that wait for their output and stop them."""

from __future__ import annotations

import json
import queue
import re
import shlex
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest
from cli_support import Driver, isolated_root, run, run_json

DOC = Path(__file__).resolve().parents[2] / "docs" / "cli.md"
# Long-running examples, each exercised by a dedicated test named here.
RUN_ELSEWHERE = {
    "start --head --block": "test_cli_cluster.py::test_block_runs_in_foreground_until_sigterm",
    "logs --follow": "test_cli_docs.py::test_logs_follow_prints_new_lines",
}


def documented_examples() -> list[str]:
    examples = []
    in_console = False
    for line in DOC.read_text().splitlines():
        if line.startswith("```"):
            in_console = line.strip() == "```console"
            continue
        if in_console and line.startswith("$ tracedray "):
            examples.append(line.removeprefix("$ tracedray ").strip())
    return examples


def test_the_doc_has_examples_and_the_special_ones_exist() -> None:
    examples = documented_examples()
    assert len(examples) >= 30
    assert set(RUN_ELSEWHERE) <= set(examples)


def _fill(example: str, values: dict[str, str]) -> list[str]:
    for placeholder in re.findall(r"<[A-Z_]+>", example):
        assert placeholder in values, f"no value for {placeholder} in {example!r}"
        example = example.replace(placeholder, values[placeholder])
    return shlex.split(example)


def test_every_documented_example_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # timeline.json and store.png land here
    examples = [e for e in documented_examples() if e not in RUN_ELSEWHERE]
    starts = [e for e in examples if e.startswith("start ")]
    stops = [e for e in examples if e.startswith("stop")]
    inspect = [e for e in examples if e not in starts and e not in stops]
    with isolated_root(tmp_path / "root") as root:
        values: dict[str, str] = {}
        for example in starts:
            out = run(*_fill(example, values)).stdout
            if "--head" in example:
                values["<ADDRESS>"] = next(line.split()[1] for line in out.splitlines()
                                           if "address:" in line)
        driver = Driver(tmp_path)
        try:
            task = run_json("get", "task", driver.ids["task"])
            head = next(n for n in run_json("list", "nodes") if n["is_head"])
            values.update({"<TASK_ID>": driver.ids["task"], "<ACTOR_ID>": driver.ids["actor"],
                           "<OBJECT_ID>": driver.ids["put"], "<NODE_ID>": head["node_id"],
                           "<WORKER_PID>": str(task["worker_pid"]),
                           "<SESSION_DIR>": str((root / "session_latest").resolve())})
            for example in inspect:
                run(*_fill(example, values))
        finally:
            driver.stop()
        assert json.loads((tmp_path / "timeline.json").read_text())["traceEvents"]
        assert (tmp_path / "store.png").stat().st_size > 0
        for example in stops:
            run(*_fill(example, values))
        assert "no running tracedray nodes" in run("stop").stdout


def test_logs_follow_prints_new_lines(tmp_path: Path) -> None:
    with isolated_root(tmp_path / "root"):
        from cli_support import start_head

        start_head()
        follower = subprocess.Popen([sys.executable, "-m", "tracedray.cli.app", "logs",
                                     "--follow"], stdout=subprocess.PIPE, text=True)
        lines: queue.Queue[str] = queue.Queue()
        assert follower.stdout is not None
        threading.Thread(target=lambda: [lines.put(x) for x in follower.stdout],  # type: ignore[union-attr]
                         daemon=True).start()
        script = tmp_path / "printer.py"
        script.write_text(textwrap.dedent("""
            import tracedray as ray
            ray.init(address="auto")
            @ray.remote
            def hello():
                print("FOLLOW-MARKER")
            ray.get(hello.remote())
            ray.shutdown()
        """))
        try:
            subprocess.run([sys.executable, str(script)], check=True, timeout=120,
                           stdout=subprocess.DEVNULL)
            while "FOLLOW-MARKER" not in lines.get(timeout=30):
                pass
        finally:
            follower.send_signal(signal.SIGTERM)
            assert follower.wait(timeout=30) == 0
