"""The process's current runtime: what the API layer dispatches every call through.

The Ray API is process-global (``ray.get`` takes no handle), so exactly one place
holds the connection: set by ``init`` (driver) or the worker entry point
(``worker_main.py``), cleared by ``shutdown``; it also sets the core's
``current_worker``, which the core reads below this layer. Two runtimes implement :class:`Runtime`:

- ``ClusterRuntime`` (``cluster_runtime.py``): a core worker connected to a GCS and a
  raylet; tasks run in worker processes.
- ``LocalRuntime`` (``local_mode.py``): ``init(local_mode=True)``; tasks run at once,
  serially, on the calling thread.

The API modules (``calls``, ``remote_function``, ``actor``) validate the user's
arguments, then make one call on the current runtime; they never ask which kind it is.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from tracedray.core import current_worker

if TYPE_CHECKING:
    from tracedray._proto.v1 import gcs_pb2
    from tracedray.api.actor import ActorHandle
    from tracedray.core.object_ref import ObjectRef


class Runtime(Protocol):
    """The operations of the Ray API, behind the checks every runtime shares."""

    @property
    def worker(self) -> Any:
        """What ``ObjectRef`` counts its references with and ``get_runtime_context()``
        reads: the ``CoreWorker``, or the ``LocalRuntime`` itself."""

    @property
    def node_id(self) -> str: ...

    @property
    def namespace(self) -> str: ...

    # --- objects
    def put(self, value: Any) -> ObjectRef: ...

    def get(self, refs: Sequence[ObjectRef], timeout: float | None) -> list[Any]: ...

    def wait(self, refs: Sequence[ObjectRef], num_returns: int, timeout: float | None
             ) -> tuple[list[ObjectRef], list[ObjectRef]]: ...

    # --- tasks
    def submit_task(self, function: Callable[..., Any], name: str, args: Sequence[Any],
                    kwargs: Mapping[str, Any], options: Mapping[str, Any]) -> Any:
        """Returns what ``f.remote()`` returns: None, a ref, or a list of refs."""

    def cancel(self, ref: ObjectRef, force: bool, recursive: bool) -> None: ...

    # --- actors
    def create_actor(self, cls: type, args: Sequence[Any], kwargs: Mapping[str, Any],
                     options: Mapping[str, Any]) -> ActorHandle: ...

    def submit_actor_task(self, handle: ActorHandle, method: str, args: Sequence[Any],
                          kwargs: Mapping[str, Any], num_returns: int,
                          max_task_retries: int | None, retry_exceptions: Any) -> Any: ...

    def kill(self, actor_id: bytes, no_restart: bool) -> None: ...

    def actor_info(self, name: str, namespace: str) -> gcs_pb2.ActorInfo | None:
        """The named actor's record, None when there is none; an unreachable cluster
        raises (``GcsUnavailableError``), never passes for "none"."""

    # --- cluster
    def node_table(self) -> list[gcs_pb2.NodeWithLoad]: ...

    def finish_job(self) -> None:
        """Tell the cluster this driver's job ended (a driver that did not start it)."""

    def shutdown(self) -> None: ...


_current: Runtime | None = None
_lock = threading.RLock()


def current_runtime() -> Runtime | None:
    return _current


def current() -> Any:
    """The current runtime's worker (what ``ObjectRef`` and the executor read), or None."""
    return current_worker.current()


def global_runtime() -> Runtime:
    """The current runtime, starting a local cluster first if needed (as Ray does)."""
    rt = _current
    if rt is not None:
        return rt
    # Only a program that calls the API before init() loads it here: calls builds on
    # this module.
    from tracedray.api import calls

    calls.init_unless_initialized()
    rt = _current
    assert rt is not None
    return rt


def set_current(rt: Runtime | None) -> None:
    global _current
    with _lock:
        _current = rt
        current_worker.set_current(rt.worker if rt is not None else None)
