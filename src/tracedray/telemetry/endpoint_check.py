"""A driver's one warning about an OTLP endpoint it cannot reach.

The driver does not export (the node's telemetry agent does: agent_export.py), so a
dead endpoint costs its exit nothing; but its user should hear about it once, on
stderr, rather than find an empty Jaeger later. A daemon thread tries a TCP
connection to each configured endpoint when the driver starts; nothing waits for it.
"""

from __future__ import annotations

import os
import socket
import sys
import threading
from collections.abc import Callable, Mapping

from tracedray import config
from tracedray.telemetry.export_config import OtlpTarget, export_config

CONNECT_TIMEOUT_S = 3.0
_warned = False
_lock = threading.Lock()


def warning_text(target: OtlpTarget, error: str) -> str:
    return (f"tracedray: OTLP endpoint {target.display} unreachable ({error}): spans are "
            "kept in the session files and will be exported by the node's telemetry agent "
            "when it answers\n")


def unreachable(target: OtlpTarget, timeout_s: float = CONNECT_TIMEOUT_S) -> str:
    """Why ``target`` takes no TCP connection ("" when it does)."""
    host, port = target.host_port
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return ""
    except OSError as exc:
        return f"{type(exc).__name__}: {exc}"


def check_in_background(environ: Mapping[str, str] | None = None,
                        log: Callable[[str, Mapping[str, object]], None] | None = None,
                        ) -> threading.Thread | None:
    """Check the configured endpoints on a daemon thread; the first one that takes no
    connection is reported once per process on stderr (and to ``log``). Never raises."""
    env = os.environ if environ is None else environ
    try:
        settings = export_config(env)
        files = config.TRACE_FILES.get(env)
    except Exception:
        return None
    targets = settings.otlp_targets
    if not targets or _warned:
        return None
    if settings.traces is not None and not files:
        # The agent exports the trace files: without them there is nothing to send.
        _say(f"tracedray: TRACEDRAY_TRACE_FILES=false: spans are not recorded, so none "
             f"are exported to the OTLP endpoint {settings.traces.display}\n", log,
             "telemetry.otlp_without_trace_files", {"endpoint": settings.traces.display})
    thread = threading.Thread(target=_check, args=(targets, log), daemon=True,
                              name="tracedray-otlp-check")
    thread.start()
    return thread


def _check(targets: tuple[OtlpTarget, ...],
           log: Callable[[str, Mapping[str, object]], None] | None) -> None:
    global _warned
    seen: set[tuple[str, int]] = set()
    for target in targets:
        if target.host_port in seen:
            continue
        seen.add(target.host_port)
        error = unreachable(target)
        if not error:
            continue
        with _lock:
            if _warned:
                return
            _warned = True
        _say(warning_text(target, error), log, "telemetry.otlp_unreachable",
             {"endpoint": target.display, "error": error})
        return


def _say(text: str, log: Callable[[str, Mapping[str, object]], None] | None, event: str,
         fields: Mapping[str, object]) -> None:
    try:
        sys.stderr.write(text)
        sys.stderr.flush()
        if log is not None:
            log(event, fields)
    except Exception:
        pass
