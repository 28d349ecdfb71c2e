"""tracedray: a Ray-compatible distributed runtime that records everything it does.

``import tracedray as ray`` and the Ray core API works: init, shutdown, remote,
get, put, wait, kill, get_actor, cancel, ObjectRef, exceptions.

Names are loaded on first use (PEP 562), so ``import tracedray`` and
``tracedray --help`` do not pay for grpc and the OpenTelemetry SDK.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from tracedray import exceptions
from tracedray._version import __version__

if TYPE_CHECKING:
    from tracedray.core.actor import ActorClass, ActorHandle
    from tracedray.core.api import (
        available_resources,
        cancel,
        cluster_resources,
        get,
        get_actor,
        init,
        is_initialized,
        kill,
        nodes,
        put,
        shutdown,
        wait,
    )
    from tracedray.core.decorators import method, remote
    from tracedray.core.object_ref import ObjectRef
    from tracedray.core.remote_function import RemoteFunction
    from tracedray.core.runtime_context import get_runtime_context

_LAZY = {
    "ActorClass": "tracedray.core.actor",
    "ActorHandle": "tracedray.core.actor",
    "ObjectRef": "tracedray.core.object_ref",
    "RemoteFunction": "tracedray.core.remote_function",
    "available_resources": "tracedray.core.api",
    "cancel": "tracedray.core.api",
    "cluster_resources": "tracedray.core.api",
    "get": "tracedray.core.api",
    "get_actor": "tracedray.core.api",
    "get_runtime_context": "tracedray.core.runtime_context",
    "init": "tracedray.core.api",
    "is_initialized": "tracedray.core.api",
    "kill": "tracedray.core.api",
    "method": "tracedray.core.decorators",
    "nodes": "tracedray.core.api",
    "put": "tracedray.core.api",
    "remote": "tracedray.core.decorators",
    "shutdown": "tracedray.core.api",
    "wait": "tracedray.core.api",
    "util": "tracedray.util",
    "actor": "tracedray.core.actor",  # as ray.actor: exit_actor, ActorClass, ActorHandle
}


def __getattr__(name: str) -> Any:
    module_name = _LAZY.get(name)
    if module_name is None:
        raise AttributeError(f"module 'tracedray' has no attribute {name!r}")
    module = importlib.import_module(module_name)
    value = module if name in ("util", "actor") else getattr(module, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY])


__all__ = [
    "ActorClass",
    "ActorHandle",
    "ObjectRef",
    "RemoteFunction",
    "__version__",
    "actor",
    "available_resources",
    "cancel",
    "cluster_resources",
    "exceptions",
    "get",
    "get_actor",
    "get_runtime_context",
    "init",
    "is_initialized",
    "kill",
    "method",
    "nodes",
    "put",
    "remote",
    "shutdown",
    "util",
    "wait",
]
