"""``@tracedray.remote`` and ``@tracedray.method``."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from tracedray.api import options as opts
from tracedray.api.actor import ActorClass
from tracedray.api.remote_function import RemoteFunction


def remote(*args: Any, **options: Any) -> Any:
    """``@remote`` or ``@remote(num_cpus=..., ...)`` on a function or a class."""
    def make(target: Any) -> Any:
        if inspect.isclass(target):
            return ActorClass(target, options)
        if callable(target):
            return RemoteFunction(target, options)
        raise TypeError(f"@remote applies to functions and classes, not {type(target).__name__}")

    if len(args) == 1 and not options and callable(args[0]):
        return make(args[0])
    if args:
        raise TypeError("@remote takes keyword options only, e.g. @remote(num_cpus=2)")
    if not options:
        # Ray asserts this (an AssertionError, raised here so that -O keeps it).
        raise AssertionError(
            "The @remote decorator must be applied either with no arguments and no "
            "parentheses, for example '@tracedray.remote', or with some options, for "
            "example '@tracedray.remote(num_returns=2, resources={\"CustomResource\": 1})'.")
    return make


# Accepted for Ray programs' sake, without effect here.
RAY_ONLY_METHOD_OPTIONS = frozenset({"concurrency_group", "enable_task_events",
                                     "_generator_backpressure_num_objects", "tensor_transport"})


def method(**options: Any) -> Callable[[Any], Any]:
    """Declare an actor method's defaults (``num_returns``, ``max_task_retries``,
    ``retry_exceptions``); ``.options()`` on a call overrides them."""
    ours = {k: v for k, v in options.items() if k not in RAY_ONLY_METHOD_OPTIONS}
    checked = opts.validate(ours, opts.METHOD_OPTIONS, "@method")

    def mark(fn: Any) -> Any:
        fn.__tracedray_num_returns__ = checked.get("num_returns", 1)
        fn.__tracedray_method_options__ = checked
        return fn

    return mark
