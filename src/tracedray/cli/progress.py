"""A spinner on stderr for a command that takes a while.

A command that is still working after ``TRACEDRAY_CLI_PROGRESS_AFTER_S`` (default 1 s)
shows a Rich spinner with what it is doing on stderr, erased when it ends. Never when
stderr is not a terminal (a pipe, a file, CI) or the terminal cannot draw it
(``TERM=dumb``), and never with ``--format json``: those read stderr as text, or read
stdout alone and expect it clean. The data on stdout is never touched.

    with working("reading the session's trace index", json_output=json_wanted) as spin:
        ...  # gather
        spin.stop()  # before the answer goes to stdout (the same terminal)
        ...  # print
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from enum import Enum
from typing import Any


class Mode(Enum):
    OFF = "off"  # no spinner: not a terminal, a dumb one, or JSON wanted
    DEFERRED = "deferred"  # a spinner once the command has worked for the threshold


def mode(*, stderr_is_terminal: bool, json_output: bool,
         environ: Mapping[str, str]) -> Mode:
    """Whether a command may show a spinner at all (a pure decision)."""
    if json_output or not stderr_is_terminal:
        return Mode.OFF
    if environ.get("TERM", "") == "dumb":
        return Mode.OFF
    return Mode.DEFERRED


class Spinner:
    """A spinner that starts after ``after_s`` unless stopped before; ``update`` changes
    its text. Thread-safe: a timer thread starts it, the command stops it."""

    def __init__(self, text: str, after_s: float) -> None:
        self._text = text
        self._lock = threading.Lock()
        self._live: Any = None
        self._spinner: Any = None
        self._stopped = False
        self._timer = threading.Timer(after_s, self._start)
        self._timer.daemon = True
        self.shown = False

    def begin(self) -> None:
        self._timer.start()

    def _start(self) -> None:
        from rich.console import Console
        from rich.live import Live
        from rich.spinner import Spinner as RichSpinner

        with self._lock:
            if self._stopped:
                return
            self._spinner = RichSpinner("dots", text=self._text)
            # stdout is left alone (the answer goes there); a warning printed to stderr
            # meanwhile goes above the spinner.
            self._live = Live(self._spinner, console=Console(stderr=True, highlight=False),
                              transient=True, redirect_stdout=False, redirect_stderr=True,
                              refresh_per_second=12.5)
            self._live.start(refresh=True)
            self.shown = True

    def update(self, text: str) -> None:
        with self._lock:
            self._text = text
            if self._spinner is not None:
                self._spinner.update(text=text)

    def stop(self) -> None:
        """Erase the spinner (or never show it); again: nothing."""
        self._timer.cancel()
        with self._lock:
            self._stopped = True
            if self._live is not None:
                self._live.stop()
                self._live = None


class _Quiet:
    shown = False

    def update(self, text: str) -> None:
        pass

    def stop(self) -> None:
        pass


Progress = Spinner | _Quiet


@contextmanager
def working(text: str, *, json_output: bool = False) -> Iterator[Progress]:
    """Show ``text`` with a spinner on stderr if the block takes longer than the
    threshold (and stderr is a terminal, and no JSON is wanted)."""
    from tracedray import config

    chosen = mode(stderr_is_terminal=sys.stderr.isatty(), json_output=json_output,
                  environ=os.environ)
    if chosen is Mode.OFF:
        yield _Quiet()
        return
    spinner = Spinner(text, config.CLI_PROGRESS_AFTER_S.get())
    spinner.begin()
    try:
        yield spinner
    finally:
        spinner.stop()
