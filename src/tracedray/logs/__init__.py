"""tracedray logs: one JSON object per line, per process, in the session directory.

Built on structlog with our own processor chain (we never call
``structlog.configure``, so user code keeps its own structlog setup). Every line
carries ``timestamp`` (UTC, ``Z``), ``level``, ``event``, ``component``, ``host``,
``ip``, ``pid``, ``node_id``, ``versions``; inside :func:`task_context` also the
task's ids, and ``trace_id``/``span_id`` of the current span.

Before :func:`configure`, loggers already work: lines at WARNING and above go to
stderr in a short form, nothing is written to a file. Logging never raises.
"""

from __future__ import annotations

from tracedray.logs._capture import install_output_capture, uninstall_output_capture
from tracedray.logs._context import (
    enter_task_context,
    exit_task_context,
    set_process_context,
    task_context,
)
from tracedray.logs._process_info import installed_packages
from tracedray.logs._setup import (
    configure,
    current_trace_ids,
    get_logger,
    info_context,
    record_process_exit,
    statistics,
    write_info_at,
)
from tracedray.logs._sink import LogStatistics

__all__ = [
    "LogStatistics",
    "configure",
    "current_trace_ids",
    "enter_task_context",
    "exit_task_context",
    "get_logger",
    "info_context",
    "install_output_capture",
    "installed_packages",
    "record_process_exit",
    "set_process_context",
    "statistics",
    "task_context",
    "uninstall_output_capture",
    "write_info_at",
]
