"""A command that takes a while shows a spinner on stderr when stderr is a terminal (a
real pty, through pexpect), after TRACEDRAY_CLI_PROGRESS_AFTER_S; never with --format
json, never when stderr is a pipe, never before the threshold (issue 24, item 4)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pexpect

from tracedray.cli.progress import Mode, mode

SPINNER_TEXT = "replaying the object store's events"


def _in_a_pty(*args: str, after_s: str) -> str:
    env = {**os.environ, "TRACEDRAY_CLI_PROGRESS_AFTER_S": after_s, "TERM": "xterm",
           "COLUMNS": "120"}
    child = pexpect.spawn(sys.executable, ["-m", "tracedray.cli.app", *args], env=env,
                          encoding="utf-8", timeout=60, dimensions=(40, 120))
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0, child.before
    return str(child.before)


def test_spinner_on_a_terminal_only(ray: Any) -> None:
    session: Path = ray.api.calls._require_cluster().session.root
    kept = [ray.put(np.zeros(1 << 20, dtype=np.uint8)) for _ in range(3)]
    ray.api.calls.global_worker().flush_background_work()
    args = ("memory", "--timeline", "--session", str(session))

    shown = _in_a_pty(*args, after_s="0")
    assert SPINNER_TEXT in shown
    assert "object store use" in shown  # the answer, after the spinner was erased

    assert SPINNER_TEXT not in _in_a_pty(*args, "--format", "json", after_s="0")
    assert SPINNER_TEXT not in _in_a_pty(*args, after_s="60")  # done before the threshold

    piped = subprocess.run([sys.executable, "-m", "tracedray.cli.app", *args],
                           env={**os.environ, "TRACEDRAY_CLI_PROGRESS_AFTER_S": "0"},
                           capture_output=True, text=True, timeout=60, check=True)
    assert SPINNER_TEXT not in piped.stderr + piped.stdout
    assert "object store use" in piped.stdout
    del kept


def test_mode_is_off_for_json_pipes_and_dumb_terminals() -> None:
    assert mode(stderr_is_terminal=True, json_output=False, environ={}) is Mode.DEFERRED
    assert mode(stderr_is_terminal=True, json_output=True, environ={}) is Mode.OFF
    assert mode(stderr_is_terminal=False, json_output=False, environ={}) is Mode.OFF
    assert mode(stderr_is_terminal=True, json_output=False,
                environ={"TERM": "dumb"}) is Mode.OFF
