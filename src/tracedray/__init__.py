"""tracedray: a Ray-compatible distributed runtime that records everything it does.

``import tracedray as ray`` and the Ray core API works: init, shutdown, remote,
get, put, wait, kill, get_actor, cancel, ObjectRef, exceptions.
"""

from tracedray import exceptions
from tracedray._version import __version__
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

__all__ = [
    "ActorClass",
    "ActorHandle",
    "ObjectRef",
    "RemoteFunction",
    "__version__",
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
    "wait",
]
