"""Where telemetry's own warnings go (a failed export, the OTel SDK's complaints).

Telemetry sits below the logs package: a log line carries the current span's ids and is
written through telemetry's append files, so telemetry never imports ``tracedray.logs``.
Instead, ``tracedray.logs`` installs its reporter here when it is imported, and every
runtime process imports it before configuring telemetry. Until then (telemetry used on
its own) warnings go to the standard library's ``tracedray.telemetry`` logger.
Reporting never raises.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Mapping

Reporter = Callable[[str, int, str, Mapping[str, object]], None]
"""``(logger name, level, event, fields)``: one line in the process's record."""


def _to_stdlib(name: str, level: int, event: str, fields: Mapping[str, object]) -> None:
    logging.getLogger("tracedray.telemetry").log(level, "%s %s", event, dict(fields))


_reporter: Reporter = _to_stdlib


def set_reporter(reporter: Reporter) -> None:
    global _reporter
    _reporter = reporter


def report(name: str, level: int, event: str, fields: Mapping[str, object]) -> None:
    with contextlib.suppress(Exception):  # telemetry never breaks its caller
        _reporter(name, level, event, fields)


def warn(event: str, fields: Mapping[str, object]) -> None:
    report("tracedray.telemetry", logging.WARNING, event, fields)
