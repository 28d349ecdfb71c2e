"""configure() and get_logger(): wiring the processor chain to the sink.

We do not call ``structlog.configure``: that is global, and user code may use
structlog for its own logs. Our loggers are built directly on our processor list
and sink, so configure() can change where lines go for loggers created earlier.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import structlog
from structlog.typing import FilteringBoundLogger

from tracedray import config, telemetry
from tracedray import config as config_module  # configure() has a parameter named config
from tracedray.exceptions import ConfigError
from tracedray.logs import _context, _processors
from tracedray.logs._exit_status import ExitStatus, interpreter_exit_status, watch_exits
from tracedray.logs._process_info import (
    current_user,
    effective_configuration,
    installed_packages,
    process_start_time,
    versions,
)
from tracedray.logs._sink import LineSink, LogStatistics
from tracedray.telemetry import diagnostics
from tracedray.telemetry._host import host_ip, host_name
from tracedray.telemetry._resource import service_name

_BASE = structlog.make_filtering_bound_logger(logging.DEBUG)


def _never_raises(method: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(method)
    def guarded(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        except Exception:  # a bad format string or value must not break the caller
            return None

    return guarded


def _leveled(method: Callable[..., Any], level: int) -> Callable[..., Any]:
    """``method`` (guarded), skipped at once below the configured level: the chain's
    first processor (filter_by_level) would drop the line anyway, after ~1.4 µs."""
    guarded = _never_raises(method)

    @functools.wraps(method)
    def leveled(self: Any, *args: Any, **kwargs: Any) -> Any:
        if level < _processors.state.min_level:
            return None
        return guarded(self, *args, **kwargs)

    return leveled


# A FilteringBoundLogger whose calls can never raise into the caller. The level
# methods interpolate "%s" arguments before the processor chain runs, so each
# public method is guarded, not only the chain.
_SafeBoundLogger = type("_SafeBoundLogger", (_BASE,), {
    **{name: _leveled(getattr(_BASE, name), _processors.METHOD_LEVEL[name])
       for name in ("debug", "info", "warning", "warn", "error", "exception", "critical",
                    "fatal", "msg")},
    "log": _never_raises(_BASE.log),
})


@dataclass
class _Configured:
    key: tuple[object, ...]
    pid: int
    component: str
    start_time: float
    exit_recorded: bool = False


sink = LineSink()
_lock = threading.RLock()
_configured: _Configured | None = None
_atexit_registered = False


def get_logger(name: str | None = None) -> FilteringBoundLogger:
    """A logger that works before configure(); until then only WARNING+ reach stderr."""
    initial = {"logger": name} if name else {}
    return cast(FilteringBoundLogger,
                _SafeBoundLogger(sink, _processors.PROCESSORS, initial))


def _report_for_telemetry(name: str, level: int, event: str,
                          fields: Mapping[str, object]) -> None:
    get_logger(name).log(level, event, **fields)


diagnostics.set_reporter(_report_for_telemetry)


def _level_number(name: str, variable: str) -> int:
    level = _processors.LEVELS.get(name.strip().lower())
    if level is None:
        raise ConfigError(f"{variable}={name!r} is not a log level; "
                          f"use one of {', '.join(_processors.LEVELS)}")
    return level


def configure(component: str, *, session_dir: Path | None, node_id: str = "",
              session_id: str = "", config: Mapping[str, object] | None = None,
              console_level: str | None = None) -> None:
    """Send this process's lines to ``<session_dir>/logs/<component>-<pid>.jsonl``.

    Idempotent for the same arguments in the same process; in a forked child (new
    pid) it opens the child's own file and writes the child's ``process.start``.
    """
    global _configured, _atexit_registered
    key = (component, str(session_dir), node_id, session_id, console_level)
    pid = os.getpid()
    with _lock:
        if _configured is not None and _configured.pid == pid and _configured.key == key:
            return
        min_level = _level_number(_config_log_level(), "TRACEDRAY_LOG_LEVEL")
        # A new identity (component, session, node): fields set for the previous one
        # with set_process_context (a finished driver's node_id) no longer apply.
        _context.set_process_context(**dict.fromkeys(_context.process_fields(), ""))
        console = None if console_level is None else _level_number(console_level,
                                                                   "console_level")
        _processors.state = _processors.ProcessorState(
            min_level=min_level,
            static_fields={"component": component, "service": service_name(os.environ),
                           "host": host_name(), "ip": host_ip(),
                           "node_id": node_id, "versions": versions(),
                           **({"session_id": session_id} if session_id else {})},
        )
        path = None if session_dir is None else session_dir / "logs" / f"{component}-{pid}.jsonl"
        new_file = _configured is None or _configured.pid != pid or \
            _configured.key[1] != key[1] or _configured.component != component
        sink.open(path, console, mapped=config_module.TELEMETRY_MAPPED_FILES.get())
        started = _configured.start_time if _configured is not None and \
            _configured.pid == pid else process_start_time()
        _configured = _Configured(key, pid, component, started)
        if not _atexit_registered:
            atexit.register(_record_exit_at_interpreter_exit)
            watch_exits()
            _atexit_registered = True
    if new_file:
        _write_process_start(config)


def _config_log_level() -> str:
    return config.LOG_LEVEL.get()


def _write_process_start(effective: Mapping[str, object] | None) -> None:
    with contextlib.suppress(Exception):
        get_logger("tracedray").info(
            "process.start",
            argv=list(sys.argv),
            cwd=os.getcwd(),
            user=current_user(),
            executable=sys.executable,
            packages=installed_packages(),
            config=dict(effective) if effective is not None else effective_configuration(),
            host=host_name(),
            ip=host_ip(),
        )


def record_process_exit(exit_code: int) -> None:
    """Write ``process.exit`` now (once per process) — for paths that end in ``os._exit``."""
    _write_process_exit(ExitStatus(exit_code, "explicit"))


def _write_process_exit(status: ExitStatus) -> None:
    with _lock:
        current = _configured
        if current is None or current.pid != os.getpid() or current.exit_recorded:
            return
        current.exit_recorded = True
    get_logger("tracedray").info("process.exit", **status.fields(),
                                 run_time_s=round(time.time() - current.start_time, 6))
    # The process is ending (maybe by os._exit): leave a file without reserved tail.
    sink.unmap()


def _record_exit_at_interpreter_exit() -> None:
    # Spans first: their shutdown may still log (a failed export), and process.exit
    # must be the last line whichever of the two configure() calls came first.
    with contextlib.suppress(Exception):
        telemetry.shutdown()
    # atexit cannot see the status Python exits with: _exit_status rebuilds it. Paths
    # that know the real code (the runtime's own shutdown) call record_process_exit first.
    try:
        status = interpreter_exit_status()
    except Exception:  # telemetry never raises into the exit; say we could not tell
        status = ExitStatus(None, "unknown")
    _write_process_exit(status)


def statistics() -> LogStatistics:
    return sink.statistics()


def info_context() -> Mapping[str, Any] | None:
    """The task context an INFO line logged now carries, for a line whose moment is now
    and whose fields come later (:func:`write_info_at`); None when INFO lines are not
    written. The submit inbox writes ``task.submit`` so: what ``.remote()`` pays for its
    line is this and the time."""
    if _processors.state.min_level > _processors.LEVELS["info"]:
        return None
    return _context.task_fields()


def write_info_at(name: str, event: str, at: float, task: Mapping[str, Any],
                  trace_ids: tuple[str, str] | None, **fields: Any) -> None:
    """Write, from any thread, the line ``get_logger(name).info(event, **fields)`` would
    have written at ``at`` (``time.time()``) in ``task``'s context (:func:`info_context`),
    byte for byte. ``trace_ids``: the current span's ids then, for fields that name none
    (a line logged then would carry them). Never raises."""
    event_dict = {"logger": name, **fields, "event": event}
    if trace_ids is not None:
        event_dict.setdefault("trace_id", trace_ids[0])
        event_dict.setdefault("span_id", trace_ids[1])
    _write_info(event_dict, at, task)


def current_trace_ids() -> tuple[str, str] | None:
    """The current span's (trace id, span id) in hex, as a line logged now names them."""
    return _processors.current_trace_ids()


def _write_info(event_dict: dict[str, Any], at: float, task: Mapping[str, Any]) -> None:
    """The rest of the processor chain for an INFO line logged at ``at`` in ``task``'s
    context, and the append. Never raises."""
    try:
        event_dict["timestamp"] = _processors.utc_timestamp(at)
        event_dict["level"] = "info"
        for key, value in task.items():
            event_dict.setdefault(key, value)
        sink.info(_processors.render_json(None, "info", _processors.add_process_fields(
            None, "info", event_dict)))
    except Exception:  # noqa: BLE001 - logging never raises
        pass
