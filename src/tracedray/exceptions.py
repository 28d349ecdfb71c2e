"""The one exception tree of tracedray, with Ray's names.

::

    RayError (TracedrayError)
    ├── RayTaskError                 a task raised; get() re-raises it as the original type too
    ├── WorkerCrashedError           the worker process died (exit code / signal and its meaning)
    ├── RayActorError
    │   └── ActorDiedError           the actor is dead (killed, crashed, out of restarts)
    ├── TaskCancelledError
    ├── ObjectLostError              every copy of an object is gone
    │   └── OwnerDiedError
    ├── ObjectStoreFullError         the node's shared-memory store cannot take the object
    ├── GetTimeoutError              also a TimeoutError
    ├── TaskUnschedulableError       no node can ever satisfy the resource request
    ├── NodeDiedError
    ├── RaySystemError               tracedray's own machinery failed (GCS, raylet unreachable)
    │   ├── ClusterConnectionError   no cluster at the address tried (also a ConnectionError)
    │   │   └── GcsUnavailableError  the GCS stayed unreachable past the reconnect timeout
    │   └── SessionFileCorruptError  a session file (a compressed log or trace part) is damaged
    ├── AuthenticationError          the cluster refused this process's token (also a
    │                                PermissionError)
    ├── SerializationError           a value cannot be pickled (also a TypeError)
    └── ConfigError                  a bad option, environment variable or config file
                                     (also a ValueError)

Errors from grpc, redis and the OS are translated into this tree where they cross
into tracedray (``raise ... from``), so user code only ever needs these names.
"""

from __future__ import annotations

from typing import Any


class RayError(Exception):
    """Root of every error tracedray raises."""


TracedrayError = RayError


class RaySystemError(RayError):
    """tracedray's own machinery failed; the message says which component and what to do."""


class ClusterConnectionError(RaySystemError, ConnectionError):
    """No tracedray cluster answered at the address tried."""


class GcsUnavailableError(ClusterConnectionError):
    """The GCS stayed unreachable for longer than ``TRACEDRAY_GCS_RECONNECT_TIMEOUT_S``.

    A GCS that restarts (the head raylet restarts one that died) is waited for; this is
    raised once the wait is over. Never a sign that what was asked for does not exist.
    """

    def __init__(self, message: str = "", address: str = "", waited_s: float = 0.0) -> None:
        self.address = address
        self.waited_s = waited_s
        super().__init__(message or f"the GCS at {address} is unreachable")

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (str(self), self.address, self.waited_s))


class SessionFileCorruptError(RaySystemError):
    """A file of the session folder (a compressed part of a log or trace file) cannot be
    read as what it claims to be; the message names the file and what is wrong."""


class AuthenticationError(RayError, PermissionError):
    """The cluster refused this process's credentials (no token, or the wrong one).

    Not a ``ClusterConnectionError``: retrying does not help, and callers that retry
    an unreachable cluster must give up on this at once.
    """


class ConfigError(RayError, ValueError):
    """A malformed option, environment variable or configuration value."""


class OptionTypeError(ConfigError, TypeError):
    """An option of the wrong type: a ``TypeError`` as in Ray (and a ``ConfigError``)."""


class SerializationError(RayError, TypeError):
    """A value (argument, return value or put object) cannot be serialized."""


class GetTimeoutError(RayError, TimeoutError):
    """``get`` did not finish within its ``timeout``."""


class TaskCancelledError(RayError):
    """The task was cancelled with ``tracedray.cancel``."""

    def __init__(self, task_id: str = "", message: str | None = None) -> None:
        self.task_id = task_id
        super().__init__(message or f"task {task_id} was cancelled")


class TaskUnschedulableError(RayError):
    """No node in the cluster can satisfy the task's resource request."""


class NodeDiedError(RayError):
    """The node a task or object was on has died."""


class ObjectStoreFullError(RayError):
    """The node's shared-memory object store cannot hold the object."""


class ObjectLostError(RayError):
    """Every copy of an object is gone and it cannot be rebuilt."""

    def __init__(self, object_ref_hex: str = "", reason: str = "") -> None:
        self.object_ref_hex = object_ref_hex
        self.reason = reason
        super().__init__(f"object {object_ref_hex} is lost: {reason}" if reason else object_ref_hex)

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.object_ref_hex, self.reason))


class OwnerDiedError(ObjectLostError):
    """The process that owned the object (its creator) has died."""


class WorkerCrashedError(RayError):
    """The worker process running the task died before the task finished."""

    def __init__(self, message: str = "", *, exit_code: int | None = None,
                 signal_name: str | None = None, meaning: str = "") -> None:
        self.exit_code = exit_code
        self.signal_name = signal_name
        self.meaning = meaning
        super().__init__(message)

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild_worker_crashed,
                (str(self), self.exit_code, self.signal_name, self.meaning))


def _rebuild_worker_crashed(message: str, exit_code: int | None, signal_name: str | None,
                            meaning: str) -> WorkerCrashedError:
    return WorkerCrashedError(message, exit_code=exit_code, signal_name=signal_name,
                              meaning=meaning)


class RayActorError(RayError):
    """An actor method could not run because the actor is unavailable or dead."""

    def __init__(self, message: str = "", actor_id: str = "") -> None:
        self.actor_id = actor_id
        super().__init__(message or f"actor {actor_id} is unavailable")

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (str(self), self.actor_id))


class ActorDiedError(RayActorError):
    """The actor is dead: killed, crashed past ``max_restarts``, or its node died."""


class ActorUnavailableError(RayActorError):
    """The actor is restarting; the call may be retried."""


class RayTaskError(RayError):
    """A task raised an exception.

    ``get`` raises an instance of a class derived from both this and the original
    exception's type (see :meth:`as_instanceof_cause`), so ``except ValueError``
    in user code still catches a remote ``ValueError``.
    """

    def __init__(self, function_name: str, traceback_str: str, cause: BaseException | None,
                 pid: int = 0, ip: str = "", node_id: str = "", task_id: str = "") -> None:
        self._fill(function_name, traceback_str, cause, pid, ip, node_id, task_id)
        super().__init__(self._message())

    def _fill(self, function_name: str, traceback_str: str, cause: BaseException | None,
              pid: int, ip: str, node_id: str, task_id: str) -> None:
        self.function_name = function_name
        self.traceback_str = traceback_str
        self.cause = cause
        self.pid = pid
        self.ip = ip
        self.node_id = node_id
        self.task_id = task_id

    def _message(self) -> str:
        where = f"pid={self.pid}, ip={self.ip}"
        if self.node_id:
            where += f", node={self.node_id[:12]}"
        kind = type(self.cause).__name__ if self.cause else "Error"
        return f"{kind} in {self.function_name}() ({where})\n{self.traceback_str}"

    def __str__(self) -> str:
        return self._message()

    def __reduce__(self) -> tuple[Any, ...]:
        return (RayTaskError, (self.function_name, self.traceback_str, self.cause, self.pid,
                               self.ip, self.node_id, self.task_id))

    def as_instanceof_cause(self) -> RayTaskError:
        """Return an error that is both a RayTaskError and an instance of the cause's type."""
        cause_cls = type(self.cause) if self.cause is not None else None
        if cause_cls is None or issubclass(cause_cls, RayTaskError) or cause_cls is Exception:
            return self
        try:
            dual = _dual_class(cause_cls)
            instance: RayTaskError = Exception.__new__(dual)
            # Fill both halves without running any __init__: the cause's signature is
            # unknown, and RayTaskError.__init__ would reach the cause's through super().
            instance._fill(self.function_name, self.traceback_str, self.cause, self.pid,
                           self.ip, self.node_id, self.task_id)
            instance.__dict__.update(getattr(self.cause, "__dict__", {}))
            instance.args = getattr(self.cause, "args", ())
            return instance
        except TypeError:
            # Layout conflicts (builtin types with incompatible C layouts) keep the plain error.
            return self


_DUAL_CACHE: dict[type, type] = {}


def _dual_class(cause_cls: type) -> type:
    dual = _DUAL_CACHE.get(cause_cls)
    if dual is None:
        name = f"RayTaskError({cause_cls.__name__})"

        def __str__(self: RayTaskError) -> str:
            return RayTaskError._message(self)

        def __reduce__(self: RayTaskError) -> tuple[Any, ...]:
            return RayTaskError.__reduce__(self)

        dual = type(name, (RayTaskError, cause_cls),
                    {"__str__": __str__, "__reduce__": __reduce__, "__module__": __name__})
        _DUAL_CACHE[cause_cls] = dual
    return dual


__all__ = [
    "ActorDiedError",
    "ActorUnavailableError",
    "ClusterConnectionError",
    "AuthenticationError",
    "ConfigError",
    "GcsUnavailableError",
    "GetTimeoutError",
    "OptionTypeError",
    "NodeDiedError",
    "ObjectLostError",
    "ObjectStoreFullError",
    "OwnerDiedError",
    "RayActorError",
    "RayError",
    "RaySystemError",
    "RayTaskError",
    "SerializationError",
    "SessionFileCorruptError",
    "TaskCancelledError",
    "TaskUnschedulableError",
    "TracedrayError",
    "WorkerCrashedError",
]
