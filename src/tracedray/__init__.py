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
    from tracedray.api.actor import ActorClass, ActorHandle
    from tracedray.api.calls import (
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
    from tracedray.api.decorators import method, remote
    from tracedray.api.remote_function import RemoteFunction
    from tracedray.api.runtime_context import get_runtime_context
    from tracedray.core.object_ref import ObjectRef

_LAZY = {
    "ActorClass": "tracedray.api.actor",
    "ActorHandle": "tracedray.api.actor",
    "ObjectRef": "tracedray.core.object_ref",
    "RemoteFunction": "tracedray.api.remote_function",
    "available_resources": "tracedray.api.calls",
    "cancel": "tracedray.api.calls",
    "cluster_resources": "tracedray.api.calls",
    "get": "tracedray.api.calls",
    "get_actor": "tracedray.api.calls",
    "get_runtime_context": "tracedray.api.runtime_context",
    "init": "tracedray.api.calls",
    "is_initialized": "tracedray.api.calls",
    "kill": "tracedray.api.calls",
    "method": "tracedray.api.decorators",
    "nodes": "tracedray.api.calls",
    "put": "tracedray.api.calls",
    "remote": "tracedray.api.decorators",
    "shutdown": "tracedray.api.calls",
    "wait": "tracedray.api.calls",
    "util": "tracedray.util",
    "actor": "tracedray.api.actor",  # as ray.actor: exit_actor, ActorClass, ActorHandle
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
