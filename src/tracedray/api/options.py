"""Validation of ``@remote`` / ``.options()`` keywords: wrong names or types fail loudly."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tracedray.core.worker.retry_policy import RetryExceptions
from tracedray.exceptions import ConfigError, OptionTypeError

TASK_OPTIONS: dict[str, tuple[type, ...]] = {
    "num_cpus": (int, float), "num_gpus": (int, float), "num_returns": (int,),
    "max_retries": (int,), "retry_exceptions": (bool, list, tuple), "resources": (dict,),
    "name": (str,), "memory": (int, float), "scheduling_strategy": (str, type(None)),
    "runtime_env": (dict, type(None)), "max_calls": (int,), "_metadata": (dict,),
}
ACTOR_OPTIONS: dict[str, tuple[type, ...]] = {
    "num_cpus": (int, float), "num_gpus": (int, float), "resources": (dict,),
    "max_restarts": (int,), "max_task_retries": (int,), "max_concurrency": (int,),
    "name": (str, type(None)), "namespace": (str, type(None)), "lifetime": (str, type(None)),
    "get_if_exists": (bool,), "memory": (int, float), "scheduling_strategy": (str, type(None)),
    "runtime_env": (dict, type(None)), "max_pending_calls": (int,), "_metadata": (dict,),
}
METHOD_OPTIONS: dict[str, tuple[type, ...]] = {"num_returns": (int,), "name": (str,),
                                               "max_task_retries": (int,),
                                               "retry_exceptions": (bool, list, tuple)}


def validate(options: Mapping[str, Any], allowed: Mapping[str, tuple[type, ...]],
             what: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in options.items():
        if key not in allowed:
            close = [k for k in allowed if k.split("_")[-1] in key or key in k]
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ConfigError(f"unknown option {key!r} for {what}{hint}; "
                              f"valid options: {', '.join(sorted(allowed))}")
        types = allowed[key]
        if isinstance(value, bool) and bool not in types and types != (int, float):
            raise OptionTypeError(f"option {key}={value!r} for {what} must be "
                                  f"{' or '.join(t.__name__ for t in types)}")
        if not isinstance(value, types):
            raise OptionTypeError(f"option {key}={value!r} for {what} must be "
                                  f"{' or '.join(t.__name__ for t in types)}, "
                                  f"not {type(value).__name__}")
        out[key] = value
    if "retry_exceptions" in out:
        RetryExceptions.from_option(out["retry_exceptions"], what)  # raises if malformed
    for key in ("max_retries", "max_restarts", "max_task_retries"):
        if key in out and out[key] < -1:
            raise ConfigError(f"The keyword '{key}' only accepts 0, -1 or a positive "
                              f"integer, got {out[key]} (for {what})")
    if "num_returns" in out and out["num_returns"] < 0:
        raise ConfigError(f"num_returns must be >= 0, got {out['num_returns']}")
    if out.get("lifetime") not in (None, "detached", "non_detached"):
        raise ConfigError(f"lifetime must be 'detached' or None, got {out['lifetime']!r}")
    for key in ("num_cpus", "num_gpus"):
        if key in out and out[key] < 0:
            raise ConfigError(f"{key} must be >= 0, got {out[key]}")
    return out


def resource_request(options: Mapping[str, Any], default_cpus: float) -> dict[str, float]:
    request: dict[str, float] = {}
    cpus = options.get("num_cpus", default_cpus)
    if cpus:
        request["CPU"] = float(cpus)
    if options.get("num_gpus"):
        request["GPU"] = float(options["num_gpus"])
    for name, amount in (options.get("resources") or {}).items():
        if name in ("CPU", "GPU"):
            raise ConfigError(f"use num_cpus/num_gpus instead of resources={{{name!r}: ...}}")
        if not isinstance(amount, int | float) or amount < 0:
            raise ConfigError(f"resource {name!r} must be a non-negative number, got {amount!r}")
        request[name] = float(amount)
    return request
