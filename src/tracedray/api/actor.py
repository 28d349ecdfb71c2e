"""``@remote`` on a class: actors, their handles and method calls."""

from __future__ import annotations

import inspect
import weakref
from typing import Any, NoReturn

from tracedray._proto.v1 import gcs_pb2
from tracedray.api import arity, runtime
from tracedray.api import options as opts


class ActorClass:
    def __init__(self, cls: type, options: dict[str, Any]) -> None:
        self._cls = cls
        self._options = opts.validate(options, opts.ACTOR_OPTIONS, f"actor class {cls.__name__}")
        self.__name__ = cls.__name__
        self.__doc__ = cls.__doc__
        constructor_arity(cls)  # read once now (cached); checked at .remote(), as in Ray

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError(f"actor class {self._cls.__name__} cannot be instantiated directly; "
                        f"use {self._cls.__name__}.remote(...)")

    def options(self, **options: Any) -> ActorClass:
        clone = ActorClass.__new__(ActorClass)
        clone.__dict__.update(self.__dict__)
        clone._options = {**self._options, **opts.validate(options, opts.ACTOR_OPTIONS,
                                                           f"{self._cls.__name__}.options()")}
        return clone

    def __getattr__(self, name: str) -> Any:
        # The user class's face, as in Ray: class attributes, static and class methods
        # (which run here, in the caller) and inherited attributes.
        cls = self.__dict__.get("_cls")
        if cls is None or name.startswith("__"):
            raise AttributeError(name)
        return getattr(cls, name)

    def remote(self, *args: Any, **kwargs: Any) -> ActorHandle:
        # The constructor's arity is checked by the runtime: after get_if_exists found
        # none, as in Ray (an existing actor is returned whatever the arguments).
        return runtime.global_runtime().create_actor(self._cls, args, kwargs, self._options)


def _methods(cls: type) -> dict[str, int]:
    out = {}
    for name, member in inspect.getmembers(cls, predicate=callable):
        if name.startswith("__") and name != "__call__":
            continue
        out[name] = getattr(member, "__tracedray_num_returns__", 1)
    return out


_ARITIES: weakref.WeakKeyDictionary[type, dict[str, arity.Arity]] = \
    weakref.WeakKeyDictionary()


_CONSTRUCTORS: weakref.WeakKeyDictionary[type, arity.Arity | None] = \
    weakref.WeakKeyDictionary()


def constructor_arity(cls: type) -> arity.Arity | None:
    """The arity of ``cls.__init__`` as ``Actor.remote(...)`` is called, once per class."""
    if cls not in _CONSTRUCTORS:
        _CONSTRUCTORS[cls] = arity.of_method(cls, "__init__")
    return _CONSTRUCTORS[cls]


def method_arities(cls: type) -> dict[str, arity.Arity]:
    """Each method's arity (a handle checks its calls with them), once per class."""
    found = _ARITIES.get(cls)
    if found is None:
        found = _ARITIES[cls] = arity.of_methods(cls, list(_methods(cls)))
    return found


# Every actor has them, as in Ray (the executor runs them: task_executor.py).
BUILTIN_METHODS = frozenset({"__ray_ready__", "__ray_call__", "__ray_terminate__"})


def exit_actor() -> NoReturn:
    """End the current actor for good, from one of its methods (Ray's
    ``ray.actor.exit_actor``): this call and every call after it fail with
    ``ActorDiedError``; the actor is not restarted."""
    from tracedray.core.worker.task_executor import ActorExit

    worker = runtime.current()
    executor = getattr(worker, "executor", None)
    if getattr(executor, "actor_instance", None) is None:
        raise TypeError("exit_actor() was called outside an actor: only an actor's methods "
                        "(in a cluster, not in local mode) can end their actor")
    raise ActorExit()


def method_retry_options(cls: type) -> dict[str, dict[str, Any]]:
    """``max_task_retries`` / ``retry_exceptions`` given by ``@method`` per method."""
    out = {}
    for name, member in inspect.getmembers(cls, predicate=callable):
        given = getattr(member, "__tracedray_method_options__", {})
        retry = {k: v for k, v in given.items() if k in ("max_task_retries", "retry_exceptions")}
        if retry:
            out[name] = retry
    return out


class ActorMethod:
    def __init__(self, handle: ActorHandle, name: str, num_returns: int,
                 max_task_retries: int | None = None, retry_exceptions: Any = None) -> None:
        self._handle = handle
        self._name = name
        self._num_returns = num_returns
        self._max_task_retries = max_task_retries
        self._retry_exceptions = retry_exceptions

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError(f"actor method {self._name} cannot be called directly; "
                        f"use .{self._name}.remote(...)")

    def options(self, **options: Any) -> ActorMethod:
        checked = opts.validate(options, opts.METHOD_OPTIONS, f"actor method {self._name}")
        return ActorMethod(self._handle, self._name,
                           checked.get("num_returns", self._num_returns),
                           checked.get("max_task_retries", self._max_task_retries),
                           checked.get("retry_exceptions", self._retry_exceptions))

    def remote(self, *args: Any, **kwargs: Any) -> Any:
        return self._handle._call(self._name, args, kwargs, self._num_returns,
                                  self._max_task_retries, self._retry_exceptions)


class ActorHandle:
    def __init__(self, actor_id: bytes, class_name: str, methods: dict[str, int],
                 max_task_retries: int,
                 method_options: dict[str, dict[str, Any]] | None = None,
                 arities: dict[str, arity.Arity] | None = None) -> None:
        self._actor_id = actor_id
        self._class_name = class_name
        self._methods = methods
        self._max_task_retries = max_task_retries
        # Per-method retry defaults from @method (a call's .options() overrides them).
        self._method_options = method_options or {}
        # Each method's signature, to check a call's arguments at .remote() (as Ray);
        # a handle found by name has none, and its calls go unchecked.
        self._arities = arities or {}

    @classmethod
    def _from_info(cls, info: gcs_pb2.ActorInfo) -> ActorHandle:
        return cls(info.actor_id, info.class_name, {},
                   info.creation_task.actor_options.max_task_retries)

    def __getattr__(self, name: str) -> ActorMethod:
        if name in BUILTIN_METHODS:
            return ActorMethod(self, name, 1)
        if name.startswith("__"):
            raise AttributeError(name)
        if self._methods and name not in self._methods:
            raise AttributeError(f"actor {self._class_name} has no method {name!r}")
        given = self._method_options.get(name, {})
        return ActorMethod(self, name, self._methods.get(name, 1),
                           given.get("max_task_retries"), given.get("retry_exceptions"))

    def _call(self, method: str, args: Any, kwargs: Any, num_returns: int,
              max_task_retries: int | None, retry_exceptions: Any = None) -> Any:
        checked = self._arities.get(method)
        if checked is not None:
            checked.check(args, kwargs)
        return runtime.global_runtime().submit_actor_task(
            self, method, args, kwargs, num_returns, max_task_retries, retry_exceptions)

    def __reduce__(self) -> tuple[Any, ...]:
        return (ActorHandle, (self._actor_id, self._class_name, self._methods,
                              self._max_task_retries, self._method_options, self._arities))

    def __repr__(self) -> str:
        return f"Actor({self._class_name}, {self._actor_id.hex()})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ActorHandle) and other._actor_id == self._actor_id

    def __hash__(self) -> int:
        return hash(self._actor_id)
