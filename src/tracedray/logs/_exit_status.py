"""The status a process ends with when the interpreter ends it, for ``process.exit``.

CPython gives this status to nobody: when the main program ends by a SystemExit,
``_Py_HandleSystemExit`` reads its ``code`` and clears the exception, and only then
``Py_Exit`` runs the ``atexit`` handlers and calls ``exit(status)``. An unhandled
exception means 1, and an unhandled KeyboardInterrupt makes the process kill itself with
SIGINT once finalized (``exit_sigint``, so that its parent sees the interruption). So the
atexit handler that writes ``process.exit`` rebuilds the status from what it can still see:

- how the main program's frame ended (the outermost ``__main__`` frame of the main
  thread: the script, the ``-c`` code, the module run by ``-m``, a console script). Its
  last instruction is a return when it ran to its end; anything else means an exception
  left it;
- ``sys.last_value``: the interpreter keeps there the exception it reports as unhandled
  (never a SystemExit), whichever ``sys.excepthook`` prints it (rich, IPython...);
- the last SystemExit raised by ``sys.exit()``, ``exit()`` or ``quit()`` while the main
  program runs, kept by wrapping those functions (same arguments, same exception, one
  more frame in its traceback).

An exception counts only if it left the main program's frame: one caught inside the
program did not end it (pytest catches each test's SystemExit, argparse users catch
theirs). Its traceback says so; before Python 3.12 a traceback is only brought up to date
where a handler meets the exception, so there the program's frame still pointing at the
call that was running when ``sys.exit`` was called says so too.

What cannot be known is said so (``exit_code`` null, with ``exit_code_source``), never
guessed: a SystemExit not raised by those functions (``raise SystemExit(main())``, an
``exit`` bound by ``from sys import exit`` before logs were configured), and a session
without a main program to follow (an interactive prompt, ``python -i``). One case is
answered wrongly: a ``sys.exit`` caught in the program, after which a SystemExit raised
another way ends it, is reported with the first one's code, when the second leaves the
program's frame from the same call (before 3.12) or the first was caught in that frame.
Never written at all: ``os._exit`` and a death by a signal skip atexit (the runtime's own
``os._exit`` paths call ``record_process_exit`` first). Not reflected: a failed flush of
stdout at exit, which CPython turns into status 120 after atexit ran.
"""

from __future__ import annotations

import functools
import opcode
import signal
import struct
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from types import FrameType
from typing import Any, NoReturn

from tracedray.telemetry._errors import qualified_name


@dataclass(frozen=True)
class ExitStatus:
    """What ``process.exit`` says about the end: ``code`` is None when it cannot be known."""

    code: int | None
    source: str  # end | sys.exit | exception | SystemExit | unknown | explicit
    signal: str = ""  # the signal the process dies by once finalized, e.g. "SIGINT"
    error_type: str = ""  # the unhandled exception's qualified class name

    def fields(self) -> dict[str, Any]:
        found: dict[str, Any] = {"exit_code": self.code, "exit_code_source": self.source}
        if self.signal:
            found["signal"] = self.signal
        if self.error_type:
            found["error_type"] = self.error_type
        return found


class ProgramEnd(Enum):
    RETURNED = "returned"  # the main program ran to its end
    RAISED = "raised"  # an exception (maybe a SystemExit) left the main program
    NOT_FOLLOWED = "not followed"  # no main program frame to look at


# What C's ``long`` holds here: PyLong_AsLong fails beyond it and CPython then exits with -1.
_C_LONG_BITS = struct.calcsize("l") * 8
_C_LONG_MIN, _C_LONG_MAX = -(1 << (_C_LONG_BITS - 1)), (1 << (_C_LONG_BITS - 1)) - 1


def status_of_exit_code(code: object) -> int:
    """The status a parent sees for ``SystemExit(code)``, computed as CPython does:
    None is 0, an int is itself (its low 8 bits, as ``exit()`` keeps on POSIX: 256 is 0,
    -1 is 255), anything else is 1 (CPython prints it to stderr first)."""
    if code is None:
        return 0
    if isinstance(code, int):
        value = int(code)
        if not _C_LONG_MIN <= value <= _C_LONG_MAX:
            value = -1
        return value & 0xFF
    return 1


def exit_status(end: ProgramEnd, unhandled: type[BaseException] | None,
                exit_call: SystemExit | None) -> ExitStatus:
    """The status from the evidence left at interpreter exit. ``unhandled`` (the exception
    reported as unhandled) and ``exit_call`` (the SystemExit of a ``sys.exit`` call) are
    given only if they left the main program's frame."""
    if end is ProgramEnd.NOT_FOLLOWED:
        return ExitStatus(None, "unknown")
    if end is ProgramEnd.RETURNED:
        # A SystemExit or an exception seen before was caught: the program went on.
        return ExitStatus(0, "end")
    if unhandled is not None:
        if unhandled is KeyboardInterrupt:  # exactly: CPython does not kill itself for a subclass
            # Shell-style code with the signal, as the raylet records a worker killed by one.
            return ExitStatus(128 + signal.SIGINT, "exception", signal="SIGINT",
                              error_type="KeyboardInterrupt")
        return ExitStatus(1, "exception", error_type=qualified_name(unhandled))
    if exit_call is not None:
        return ExitStatus(status_of_exit_code(exit_call.code), "sys.exit")
    return ExitStatus(None, "SystemExit")


# --- the evidence, gathered in this process

@dataclass(frozen=True)
class _ExitCall:
    raised: SystemExit
    program_at: int  # the main program's instruction that was running (its f_lasti)


_main_program: FrameType | None = None
_last_exit_call: _ExitCall | None = None
_watching = False
_RETURNS = frozenset(opcode.opmap[name] for name in ("RETURN_VALUE", "RETURN_CONST")
                     if name in opcode.opmap)


def watch_exits() -> None:
    """Find the main program and wrap the exit functions; once per process."""
    global _main_program, _watching
    if _watching:
        return
    _watching = True
    _main_program = _main_program_frame()
    sys.exit = _noting_exit(sys.exit)
    # exit() and quit() (added by site, absent under -S) raise SystemExit themselves.
    quitter = getattr(sys.modules.get("_sitebuiltins"), "Quitter", None)
    if quitter is not None:
        quitter.__call__ = _noting_exit(quitter.__call__)


def interpreter_exit_status() -> ExitStatus:
    """The status this process is exiting with; call it from an atexit handler."""
    program = _main_program
    if program is None:
        return exit_status(ProgramEnd.NOT_FOLLOWED, None, None)
    end = ProgramEnd.RETURNED if _ran_to_its_end(program) else ProgramEnd.RAISED
    # sys.last_exc from 3.12 on; sys.last_value is still set there too.
    unhandled: BaseException | None = getattr(sys, "last_exc", None) or \
        getattr(sys, "last_value", None)
    if unhandled is not None and not _went_through(unhandled, program):
        unhandled = None  # set by someone else (pytest does, for a failed test)
    call = _last_exit_call
    return exit_status(end, type(unhandled) if unhandled is not None else None,
                       call.raised if call is not None and _left_program(call, program)
                       else None)


def _noting_exit(exit_function: Callable[..., NoReturn]) -> Callable[..., NoReturn]:
    @functools.wraps(exit_function)
    def exit_noted(*args: Any, **kwargs: Any) -> NoReturn:
        try:
            exit_function(*args, **kwargs)
        except SystemExit as raised:
            program = _main_program
            # Only a SystemExit raised while the main program runs can end it (in
            # another thread it ends that thread; an atexit handler's is ignored).
            if program is not None and _is_running(program):
                # Kept, with its traceback, until the next one or the exit, as CPython
                # keeps an unhandled exception's (sys.last_value).
                global _last_exit_call
                _last_exit_call = _ExitCall(raised, program.f_lasti)
            raise

    return exit_noted


def _main_program_frame() -> FrameType | None:
    if sys.flags.interactive or hasattr(sys, "ps1"):
        # At a prompt each statement is a program of its own, and under -i a SystemExit
        # out of the script leads to the prompt instead of exiting.
        return None
    main_ident = threading.main_thread().ident
    frame = sys._current_frames().get(main_ident) if main_ident is not None else None
    outermost = None
    while frame is not None:
        if frame.f_globals.get("__name__") == "__main__":
            outermost = frame
        frame = frame.f_back
    return outermost


def _is_running(program: FrameType) -> bool:
    frame: FrameType | None = sys._getframe(1)
    while frame is not None and frame is not program:
        frame = frame.f_back
    return frame is program


def _ran_to_its_end(frame: FrameType) -> bool:
    # A finished frame keeps its last instruction: a return, or where an exception left it
    # (never a return: a module returns only at its end).
    code = frame.f_code.co_code
    return 0 <= frame.f_lasti < len(code) and code[frame.f_lasti] in _RETURNS


def _left_program(call: _ExitCall, program: FrameType) -> bool:
    """Whether the SystemExit of this call is what left the main program's frame."""
    if _went_through(call.raised, program):
        return True
    # Before 3.12 the traceback an exception carries is brought up to date only where a
    # handler meets it: one that left the program without meeting a handler in its frame
    # (no try or with around the call there) lists the frames up to the last handler
    # only, ours in exit_noted. The program's frame then still points at the call that
    # was running when it was raised.
    return sys.version_info < (3, 12) and program.f_lasti == call.program_at


def _went_through(exc: BaseException, frame: FrameType) -> bool:
    traceback = exc.__traceback__
    while traceback is not None:
        if traceback.tb_frame is frame:
            return True
        traceback = traceback.tb_next
    return False
