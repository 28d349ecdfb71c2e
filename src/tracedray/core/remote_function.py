"""``@remote`` on a function: ``f.remote(...)`` submits a task, ``f.options(...)`` tweaks it."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from tracedray.core import arity
from tracedray.core import options as opts
from tracedray.core.worker.retry_policy import RetryExceptions
from tracedray.v1 import common_pb2

DEFAULT_MAX_RETRIES = 3


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
        from tracedray.core.api import global_worker
        from tracedray.core.submission import build_task

        if self._arity is not None:
            self._arity.check(args, kwargs)
        worker = global_worker()
        options = self._options
        num_returns = options.get("num_returns", 1)
        if hasattr(worker, "local_call"):
            return worker.local_call(self._function, args, kwargs, num_returns)
        function_id = worker.functions.export(self._function, f"function {self._name}")
        retry = RetryExceptions.from_option(options.get("retry_exceptions"),
                                            f"function {self._name}")
        task, refs, span = build_task(
            worker, kind=common_pb2.NORMAL, function_id=function_id,
            function_name=self._name, args=args, kwargs=kwargs, num_returns=num_returns,
            resources=opts.resource_request(options, 1.0),
            max_retries=options.get("max_retries", DEFAULT_MAX_RETRIES),
            retry_exceptions=retry)
        try:
            worker.submitter.submit(task)
        finally:
            span.end()
        if num_returns == 0:
            return None
        return refs[0] if num_returns == 1 else refs
