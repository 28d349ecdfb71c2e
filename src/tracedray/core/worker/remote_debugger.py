"""``breakpoint()`` in remote code: pdb over a TCP socket that ``tracedray debug`` attaches to.

A worker installs ``breakpoint_hook`` as ``sys.breakpointhook`` (unless the user chose
one with ``PYTHONBREAKPOINT``). A ``breakpoint()`` in a task or actor method then
listens on a free port of the worker's address, registers the breakpoint (this
module's table, which the worker's DumpStacks answer carries, so ``tracedray debug``
finds it through the raylets), logs ``debugger.waiting`` and adds that event to the
task's span, and waits. A client must send the breakpoint's token as its first line
(the token travels only in the raylet's answer). Its session is a pdb reading and
writing the socket; ``continue``, ``quit`` or a closed connection resume the task.
With ``TRACEDRAY_DEBUG_POST_MORTEM=1`` a task's uncaught exception waits the same way
in a post-mortem pdb before the error goes back to the caller. ``local_mode`` runs
tasks in the driver, where the plain pdb works.
"""

from __future__ import annotations

import contextlib
import os
import pdb
import secrets
import socket
import sys
import threading
import time
from types import FrameType, TracebackType
from typing import TYPE_CHECKING, Any

from tracedray import config, logs
from tracedray._proto.v1 import debug_pb2
from tracedray.exceptions import ConfigError

if TYPE_CHECKING:
    from tracedray.core.address import Address
    from tracedray.core.worker.task_executor import TaskExecutor

log = logs.get_logger(__name__)
PROMPT = "(tracedray-pdb) "

def _parse_switch(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"expected 1 or 0, got {text!r}")


POST_MORTEM: config.Variable[bool] = config.Variable(
    "TRACEDRAY_DEBUG_POST_MORTEM", _parse_switch, lambda: False,
    "A task's uncaught exception stops it in a post-mortem pdb that `tracedray debug` "
    "attaches to, before the error goes back to its caller.")

_lock = threading.Lock()
_waiting: dict[str, debug_pb2.Breakpoint] = {}
_installed: tuple[Address, TaskExecutor] | None = None  # this worker's address, executor


_post_mortem = False


def install(address: Address, executor: TaskExecutor) -> None:
    """Make ``breakpoint()`` in this worker's tasks wait for ``tracedray debug``."""
    global _installed, _post_mortem
    _installed = (address, executor)
    if not os.environ.get("PYTHONBREAKPOINT"):
        sys.breakpointhook = breakpoint_hook
    try:
        _post_mortem = POST_MORTEM.get()
    except ConfigError as exc:  # a typo must not stop every worker from starting
        log.warning("debugger.config_error", error=str(exc))


def post_mortem_enabled() -> bool:
    return _post_mortem


def waiting() -> list[debug_pb2.Breakpoint]:
    with _lock:
        return list(_waiting.values())


class RemotePdb(pdb.Pdb):
    """A pdb whose terminal is a socket; leaving it in any way resumes the program."""

    def __init__(self, conn: socket.socket) -> None:
        self._conn = conn
        self._file = conn.makefile("rw", buffering=1, encoding="utf-8", errors="replace",
                                   newline="\n")
        super().__init__(stdin=self._file, stdout=self._file, nosigint=True)
        self.use_rawinput = False
        self.prompt = PROMPT

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._file.close()
        with contextlib.suppress(OSError):
            self._conn.close()

    def do_continue(self, arg: str) -> bool | None:
        result = super().do_continue(arg)
        self.close()
        return result

    do_c = do_cont = do_continue

    def do_quit(self, arg: str) -> bool | None:
        """Detach: the task goes on (a remote task cannot be quit from here)."""
        return self.do_continue(arg)

    do_q = do_exit = do_EOF = do_quit  # a closed connection reads as EOF


def breakpoint_hook(*args: Any, **kwargs: Any) -> None:
    """``sys.breakpointhook``: wait for a debugger, then debug the caller's frame."""
    frame = sys._getframe(1)
    conn = _wait_for_client(frame, post_mortem=False, error="")
    if conn is None:
        return
    debugger = RemotePdb(conn)
    try:
        debugger.set_trace(frame)
    except OSError:
        debugger.close()


def post_mortem(exc: BaseException) -> None:
    """With TRACEDRAY_DEBUG_POST_MORTEM: a pdb at the exception's frame, before the task
    fails; returns when the debugger detaches."""
    tb: TracebackType | None = exc.__traceback__
    if tb is None:
        return
    inner = tb
    while inner.tb_next is not None:
        inner = inner.tb_next
    conn = _wait_for_client(inner.tb_frame, post_mortem=True,
                            error=f"{type(exc).__qualname__}: {exc}"[:2000])
    if conn is None:
        return
    debugger = RemotePdb(conn)
    try:
        debugger.reset()
        debugger.interaction(None, tb)
    except OSError:
        pass
    finally:
        debugger.close()


def _wait_for_client(frame: FrameType, *, post_mortem: bool,
                     error: str) -> socket.socket | None:
    """Register a breakpoint for this thread's task, wait for an authenticated client."""
    installed = _installed
    if installed is None:
        return None
    address, executor = installed
    host = address.ip
    try:
        listener = socket.create_server((host, 0))
    except OSError as exc:
        log.warning("debugger.listen_failed", host=host, error=str(exc))
        return None
    entry = _entry(address, executor, frame, listener.getsockname()[1], post_mortem, error)
    with _lock:
        _waiting[entry.breakpoint_id] = entry
    _announce(executor, entry)
    try:
        while True:
            conn, _ = listener.accept()
            if _authenticated(conn, entry.token):
                log.info("debugger.attached", breakpoint_id=entry.breakpoint_id,
                         task_id=entry.task_id)
                return conn
            conn.close()
    except OSError as exc:
        log.warning("debugger.accept_failed", error=str(exc))
        return None
    finally:
        with _lock:
            _waiting.pop(entry.breakpoint_id, None)
        listener.close()


def _authenticated(conn: socket.socket, token: str) -> bool:
    conn.settimeout(10.0)
    try:
        line = conn.makefile("r", encoding="utf-8", errors="replace").readline()
    except OSError:
        return False
    conn.settimeout(None)
    return secrets.compare_digest(line.strip(), token)


def _entry(address: Address, executor: TaskExecutor, frame: FrameType, port: int,
           post_mortem: bool, error: str) -> debug_pb2.Breakpoint:
    entry = debug_pb2.Breakpoint(
        breakpoint_id=secrets.token_hex(8), host=address.ip, port=port,
        token=secrets.token_hex(16), pid=os.getpid(), worker_id=address.worker_id,
        node_id=address.node_id, filename=frame.f_code.co_filename, lineno=frame.f_lineno,
        since=time.time(), post_mortem=post_mortem, error=error)
    live = _current_task(executor)
    if live is not None:
        spec = live.spec
        entry.task_id, entry.attempt = spec.task_id.hex(), spec.attempt
        entry.function, entry.job_id = spec.function_name, spec.job_id.hex()
        entry.actor_id = (spec.actor_id or executor.actor_id).hex()
    return entry


def _current_task(executor: TaskExecutor) -> Any:
    me = threading.get_ident()
    return next((t for t in list(executor.live.values()) if t.thread_id == me), None)


def _announce(executor: TaskExecutor, entry: debug_pb2.Breakpoint) -> None:
    fields = {"breakpoint_id": entry.breakpoint_id, "function": entry.function,
              "task_id": entry.task_id, "node_id": entry.node_id, "pid": entry.pid,
              "host": entry.host, "port": entry.port, "filename": entry.filename,
              "lineno": entry.lineno, "post_mortem": entry.post_mortem}
    log.warning("debugger.waiting", **fields)
    live = _current_task(executor)
    if live is not None:
        with contextlib.suppress(Exception):  # telemetry never breaks the runtime
            live.span.add_event("debugger.waiting", {
                "tracedray.debugger.breakpoint_id": entry.breakpoint_id,
                "tracedray.node.id": entry.node_id, "process.pid": entry.pid,
                "tracedray.debugger.location": f"{entry.filename}:{entry.lineno}"})
