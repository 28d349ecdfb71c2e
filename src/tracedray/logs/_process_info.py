"""Facts for the ``process.start`` record, computed once per process."""

from __future__ import annotations

import functools
import getpass
import os
import re
import sys
import time
from collections.abc import Mapping
from pathlib import Path

from tracedray import config
from tracedray._version import __version__

# "name-1.2.3.dist-info" / "name-1.2.3-py3.11.egg-info": the name never contains "-"
# once normalised, so the first "-" separates name and version.
_DIST_DIR = re.compile(r"^(?P<name>[^-]+)-(?P<version>[^-]+?)(-py[\d.]+)?\.(dist|egg)-info$")
_VERSION_LINE = re.compile(r"^Version:\s*(\S+)", re.MULTILINE)


def _normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _version_from_metadata(folder: Path) -> str:
    for candidate in ("METADATA", "PKG-INFO"):
        try:
            with open(folder / candidate, encoding="utf-8", errors="replace") as handle:
                match = _VERSION_LINE.search(handle.read(4096))
        except OSError:
            continue
        if match:
            return match.group(1)
    return ""


@functools.lru_cache(maxsize=1)
def installed_packages() -> Mapping[str, str]:
    """Distribution name → version for everything importable from ``sys.path``.

    Read from the ``*.dist-info`` folder names instead of ``importlib.metadata``,
    which parses every METADATA file (~10x slower); a folder whose name carries no
    version (e.g. a ``src/x.egg-info`` of an editable install) falls back to its
    metadata file. The first entry on ``sys.path`` wins, as for imports.
    """
    packages: dict[str, str] = {}
    for entry in sys.path:
        try:
            names = os.listdir(entry or ".")
        except OSError:
            continue
        for name in names:
            if not name.endswith("-info"):
                continue
            match = _DIST_DIR.match(name)
            if match:
                dist, version = _normalise(match.group("name")), match.group("version")
            elif name.endswith((".dist-info", ".egg-info")):
                dist = _normalise(name.rsplit(".", 1)[0])
                version = _version_from_metadata(Path(entry or ".") / name)
            else:
                continue
            if version:
                packages.setdefault(dist, version)
    return dict(sorted(packages.items()))


def current_user() -> str:
    try:
        return getpass.getuser()
    except Exception:  # no USER variable and no passwd entry (some containers)
        return str(os.getuid()) if hasattr(os, "getuid") else ""


def process_start_time() -> float:
    """When this process started (epoch seconds), for ``process.exit``'s run time."""
    try:
        import psutil

        return float(psutil.Process().create_time())
    except Exception:
        return time.time()


def effective_configuration() -> dict[str, object]:
    """Every ``TRACEDRAY_*`` variable's value, and the ``OTEL_*`` variables that are set.

    Header variables are left out: they usually hold credentials.
    """
    result: dict[str, object] = {}
    for variable in config.ALL_VARIABLES:
        if variable.secret:
            # Whether it is set, never its value.
            result[variable.name] = "<set>" if os.environ.get(variable.name) else ""
            continue
        try:
            value = variable.get()
        except Exception as exc:
            value = f"<invalid: {exc}>"
        result[variable.name] = value if isinstance(value, (bool, int, float)) else str(value)
    for key, value in os.environ.items():
        if key.startswith("OTEL_") and "HEADERS" not in key:
            result[key] = value
    return result


def versions() -> dict[str, str]:
    return {"python": ".".join(map(str, sys.version_info[:3])), "tracedray": __version__}
