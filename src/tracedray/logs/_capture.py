"""Turn what user code prints in a worker into log records attributed to its task.

``sys.stdout``/``sys.stderr`` are replaced by line splitters. Each complete line
becomes a ``task.output`` record carrying the current task context (and trace
ids), and is handed to ``on_output`` so the runtime can echo it to the driver.
Partial lines wait, per thread, for their newline or an explicit flush(): two
tasks printing on two threads never get their halves mixed.
"""

from __future__ import annotations

import contextlib
import io
import sys
import threading
from collections.abc import Callable, Mapping
from typing import TextIO

from tracedray.logs import _context
from tracedray.logs._setup import get_logger, sink

OnOutput = Callable[[str, str, Mapping[str, str]], None]

_log = get_logger("tracedray.output")


class LineCapture(io.TextIOBase):
    def __init__(self, stream_name: str, original: TextIO,
                 on_output: OnOutput | None) -> None:
        super().__init__()
        self.stream_name = stream_name
        self.original = original
        self._on_output = on_output
        self._lock = threading.Lock()
        self._pending: dict[int, str] = {}  # thread ident -> text without its newline yet
        self._emitting = threading.local()

    # --- io.TextIOBase surface that libraries probe
    @property
    def encoding(self) -> str:  # type: ignore[override]
        return "utf-8"

    @property
    def errors(self) -> str | None:  # type: ignore[override]
        return "replace"

    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:
        return False

    def fileno(self) -> int:
        # faulthandler and subprocess want a real descriptor; output written there
        # directly bypasses the capture, which is what those callers expect.
        return self.original.fileno()

    def write(self, text: str) -> int:
        try:
            if not isinstance(text, str):
                text = str(text)
            if not text:
                return 0
            ident = threading.get_ident()
            with self._lock:
                buffered = self._pending.pop(ident, "") + text
                *lines, rest = buffered.split("\n")
                if rest:
                    self._pending[ident] = rest
            for line in lines:
                self._emit(line)
            return len(text)
        except Exception:
            return len(text) if isinstance(text, str) else 0

    def flush(self) -> None:
        try:
            with self._lock:
                rest = self._pending.pop(threading.get_ident(), "")
            if rest:
                self._emit(rest)
        except Exception:
            pass

    def flush_all(self) -> None:
        with self._lock:
            pending, self._pending = self._pending, {}
        for rest in pending.values():
            self._emit(rest)

    def _emit(self, line: str) -> None:
        # A record written while emitting (e.g. on_output printing) goes to the
        # original stream instead of looping back into a new record.
        if getattr(self._emitting, "active", False):
            with contextlib.suppress(Exception):
                self.original.write(line + "\n")
            return
        self._emitting.active = True
        try:
            line = line.rstrip("\r")
            _log.info("task.output", stream=self.stream_name, line=line)
            sink.count_captured()
            if self._on_output is not None:
                with contextlib.suppress(Exception):
                    self._on_output(self.stream_name, line, _context.output_context())
        finally:
            self._emitting.active = False


_installed: tuple[LineCapture, LineCapture] | None = None
_install_lock = threading.Lock()


def install_output_capture(on_output: OnOutput | None = None) -> None:
    """Replace sys.stdout/sys.stderr with capturing writers (again: replaces the callback)."""
    global _installed
    with _install_lock:
        if _installed is not None:
            _restore_locked()
        out = LineCapture("stdout", sys.stdout, on_output)
        err = LineCapture("stderr", sys.stderr, on_output)
        sys.stdout, sys.stderr = out, err
        _installed = (out, err)


def _restore_locked() -> None:
    global _installed
    if _installed is None:
        return
    out, err = _installed
    out.flush_all()
    err.flush_all()
    if sys.stdout is out:
        sys.stdout = out.original
    if sys.stderr is err:
        sys.stderr = err.original
    _installed = None


def uninstall_output_capture() -> None:
    """Flush pending partial lines as records and restore the original streams."""
    with _install_lock:
        _restore_locked()
