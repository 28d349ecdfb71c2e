"""The public surface changes only on purpose: these lists are the API users import.

A name added to or removed from ``tracedray`` or ``tracedray.exceptions`` fails here;
update the list (and CHANGELOG) when the change is meant."""

from __future__ import annotations

import inspect

import tracedray
from tracedray import exceptions

TOP_LEVEL = [
    "ActorClass", "ActorHandle", "ObjectRef", "RemoteFunction", "__version__", "actor",
    "available_resources", "cancel", "cluster_resources", "exceptions", "get", "get_actor",
    "get_runtime_context", "init", "is_initialized", "kill", "method", "nodes", "put",
    "remote", "shutdown", "util", "wait",
]

EXCEPTIONS = [
    "ActorDiedError", "ActorUnavailableError", "AuthenticationError", "ClusterConnectionError",
    "ConfigError", "GcsUnavailableError",
    "GetTimeoutError", "NodeDiedError", "ObjectLostError", "ObjectStoreFullError",
    "OptionTypeError", "OwnerDiedError", "RayActorError", "RayError", "RaySystemError",
    "RayTaskError", "SerializationError", "SessionFileCorruptError", "TaskCancelledError",
    "TaskUnschedulableError",
    "TracedrayError", "WorkerCrashedError",
]


def test_top_level_names_are_the_curated_ones_and_all_resolve() -> None:
    assert sorted(tracedray.__all__) == sorted(TOP_LEVEL)
    for name in tracedray.__all__:
        assert getattr(tracedray, name) is not None, name
    assert tracedray.actor.exit_actor is not None  # ray.actor.exit_actor's home


def test_every_exception_class_is_exported_and_nothing_else() -> None:
    defined = sorted(name for name, value in vars(exceptions).items()
                     if inspect.isclass(value) and issubclass(value, BaseException)
                     and value.__module__ == exceptions.__name__)
    assert sorted(exceptions.__all__) == defined == sorted(EXCEPTIONS)
    assert all(issubclass(getattr(exceptions, name), exceptions.RayError)
               for name in EXCEPTIONS if name != "RayError")
