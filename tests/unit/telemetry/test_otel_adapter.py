"""OpenTelemetry's private internals are used in one module, on verified versions only.

``telemetry/_otel_adapter.py`` takes shortcuts through the API's internals on the hot
paths and falls back to the public API where they do not check out. These tests fail
when the installed ``opentelemetry-api`` leaves the range the shortcuts were verified on
(re-verify them, then move ``SUPPORTED_API``), when a shortcut silently fell back (the
fast path is gone), or when another module reaches into the internals.
"""

from __future__ import annotations

import importlib.metadata
import re
from pathlib import Path

import tracedray
from tracedray.telemetry import _otel_adapter

PRIVATE_USES = re.compile(r"_RUNTIME_CONTEXT|_SPAN_KEY|_current_context|tuple\.__new__")


def test_the_installed_api_is_a_version_the_shortcuts_were_verified_on() -> None:
    installed = importlib.metadata.version("opentelemetry-api")
    major, minor = (int(part) for part in installed.split(".")[:2])
    low, high = _otel_adapter.SUPPORTED_API
    assert low <= (major, minor) < high, (
        f"opentelemetry-api {installed} is outside {low} <= v < {high}: check that "
        f"telemetry/_otel_adapter.py's shortcuts still hold, then move SUPPORTED_API")


def test_every_shortcut_is_in_use_on_a_supported_version() -> None:
    assert _otel_adapter.shortcuts_in_use() == {
        "span_context": True, "current_span": True, "activation": True}


def test_no_other_module_touches_opentelemetrys_internals() -> None:
    package = Path(tracedray.__file__).parent
    adapter = Path(_otel_adapter.__file__)
    offending = [f"{path.relative_to(package.parent)}:{number}: {line.strip()}"
                 for path in sorted(package.rglob("*.py")) if path != adapter
                 for number, line in enumerate(path.read_text().splitlines(), 1)
                 if PRIVATE_USES.search(line)]
    assert not offending, "\n".join(offending)
