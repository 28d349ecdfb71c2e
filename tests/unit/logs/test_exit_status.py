"""process.exit carries the status Python exits with, or says it cannot know it."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tracedray.logs._exit_status import ExitStatus, ProgramEnd, exit_status, status_of_exit_code
from tracedray.telemetry.append_file import read_data


@pytest.mark.parametrize(("code", "status"), [
    (None, 0), (0, 0), (3, 3), (True, 1), (255, 255), (256, 0), (-1, 255), (2**40 + 7, 7),
    (2**70, 255), (-(2**70), 255), ("boom", 1), ((1, 2), 1), (3.0, 1),
])
def test_status_of_an_exit_code_is_what_cpython_exits_with(code: object, status: int) -> None:
    assert status_of_exit_code(code) == status


def test_a_program_that_ran_to_its_end_exits_0_whatever_it_caught_before() -> None:
    assert exit_status(ProgramEnd.RETURNED, None, None) == ExitStatus(0, "end")


def test_an_unhandled_exception_exits_1_and_keyboard_interrupt_dies_by_sigint() -> None:
    class Interrupted(KeyboardInterrupt):
        pass

    assert exit_status(ProgramEnd.RAISED, ValueError, SystemExit(3)) == \
        ExitStatus(1, "exception", error_type="ValueError")
    assert exit_status(ProgramEnd.RAISED, KeyboardInterrupt, None) == \
        ExitStatus(128 + signal.SIGINT, "exception", signal="SIGINT",
                   error_type="KeyboardInterrupt")
    # Only KeyboardInterrupt itself makes CPython kill itself; a subclass exits 1.
    assert exit_status(ProgramEnd.RAISED, Interrupted, None).code == 1


def test_a_system_exit_is_known_only_when_seen_raised() -> None:
    assert exit_status(ProgramEnd.RAISED, None, SystemExit("boom")) == ExitStatus(1, "sys.exit")
    assert exit_status(ProgramEnd.RAISED, None, SystemExit()) == ExitStatus(0, "sys.exit")
    assert exit_status(ProgramEnd.RAISED, None, None) == ExitStatus(None, "SystemExit")
    assert exit_status(ProgramEnd.NOT_FOLLOWED, ValueError, SystemExit(3)) == \
        ExitStatus(None, "unknown")


def test_fields_name_the_signal_and_error_only_when_there_is_one() -> None:
    assert ExitStatus(3, "sys.exit").fields() == {"exit_code": 3, "exit_code_source": "sys.exit"}
    assert ExitStatus(130, "exception", "SIGINT", "KeyboardInterrupt").fields() == {
        "exit_code": 130, "exit_code_source": "exception", "signal": "SIGINT",
        "error_type": "KeyboardInterrupt"}


# Each program ends one way, in a process of its own (the atexit path is the one tested).
ENDINGS = {
    # The try around the call is met by the SystemExit in the program's frame.
    "sys.exit inside main, try around it": ("""
        def main():
            sys.exit(4)
        try:
            main()
        except KeyboardInterrupt:
            sys.exit(130)
        """, 4, 4, "sys.exit"),
    "caught, then the program ran to its end": ("""
        def main():
            try:
                sys.exit(5)
            except SystemExit:
                pass
        main()
        """, 0, 0, "end"),
    "caught, then an exception": ("""
        try:
            sys.exit(5)
        except SystemExit:
            pass
        raise LookupError
        """, 1, 1, "exception"),
    "raise SystemExit, not seen": ("raise SystemExit(7)", 7, None, "SystemExit"),
    "exit() of site": ("exit(8)", 8, 8, "sys.exit"),
    "sys.exit in a thread ends the thread only": ("""
        import threading
        thread = threading.Thread(target=sys.exit, args=(9,))
        thread.start()
        thread.join()
        """, 0, 0, "end"),
    "sys.exit in a coroutine": ("""
        import asyncio
        async def main():
            sys.exit(11)
        asyncio.run(main())
        """, 11, 11, "sys.exit"),
}


@pytest.mark.parametrize("ending", sorted(ENDINGS))
def test_process_exit_says_how_the_program_ended(tmp_path: Path, ending: str) -> None:
    body, returncode, exit_code, source = ENDINGS[ending]
    program = ("import pathlib, sys\nfrom tracedray import logs\n"
               f"logs.configure('driver', session_dir=pathlib.Path({str(tmp_path)!r}))\n"
               + textwrap.dedent(body))
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == returncode, done.stderr[-2000:]
    (path,) = (tmp_path / "logs").glob("*.jsonl")
    last = json.loads(read_data(path).decode().splitlines()[-1])
    assert last["event"] == "process.exit"
    assert (last["exit_code"], last["exit_code_source"]) == (exit_code, source), last
