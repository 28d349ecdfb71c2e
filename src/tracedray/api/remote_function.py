"""``@remote`` on a function: ``f.remote(...)`` submits a task, ``f.options(...)`` tweaks it."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from tracedray.api import arity, runtime
from tracedray.api import options as opts


class RemoteFunction:
    def __init__(self, function: Callable[..., Any], options: dict[str, Any]) -> None:
        self._function = function
        self._options = opts.validate(options, opts.TASK_OPTIONS,
                                      f"remote function {function.__qualname__}")
        self._name = f"{function.__module__}.{function.__qualname__}"
        self._arity = arity.of_function(function)  # checked at every .remote(), as in Ray
        functools.update_wrapper(self, function)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError(f"remote function {self._function.__qualname__} cannot be called "
                        f"directly; use {self._function.__name__}.remote(...)")

    def options(self, **options: Any) -> RemoteFunction:
        merged = {**self._options, **opts.validate(options, opts.TASK_OPTIONS,
                                                   f"{self._function.__qualname__}.options()")}
        clone = RemoteFunction.__new__(RemoteFunction)
        clone.__dict__.update(self.__dict__)
        clone._options = merged
        return clone

    def remote(self, *args: Any, **kwargs: Any) -> Any:
        if self._arity is not None:
            self._arity.check(args, kwargs)
        return runtime.global_runtime().submit_task(self._function, self._name, args, kwargs,
                                            self._options)
