"""A node's environment fingerprint: interpreter and installed package versions.

Nodes report it when they join; the GCS flags a node whose versions differ from
the head's (the "some machines ran an old version" failure).
"""

from __future__ import annotations

import functools
import platform

from tracedray import logs
from tracedray._version import __version__

# Packages whose drift changes behaviour of pickled functions and the runtime itself.
WATCHED = ("tracedray", "cloudpickle", "numpy", "grpcio", "protobuf", "opentelemetry-sdk",
           "structlog", "pandas", "redis")


@functools.lru_cache(maxsize=1)
def environment_fingerprint() -> dict[str, str]:
    from tracedray import config

    env = {"python": platform.python_version(), "tracedray": __version__}
    # The versions the process.start line lists (read once per process from the
    # dist-info folders' names), not importlib.metadata's: that imports email's parser and
    # zipfile and parses every METADATA file, ~0.8 MB of a raylet's memory for nine strings.
    installed = logs.installed_packages()
    env.update({f"pkg:{name}": installed[name] for name in WATCHED if name in installed})
    # The test hook replaces what this node reports, as a machine with other versions would.
    env.update({f"pkg:{name}": version
                for name, version in config.FAKE_PACKAGE_VERSIONS.get().items()})
    return env


def drift(head: dict[str, str], node: dict[str, str]) -> list[str]:
    """Human-readable differences of ``node`` against ``head`` (pure)."""
    out = []
    for key in sorted(set(head) | set(node)):
        if head.get(key) != node.get(key):
            out.append(f"{key.removeprefix('pkg:')}: head {head.get(key, 'absent')}, "
                       f"node {node.get(key, 'absent')}")
    return out
