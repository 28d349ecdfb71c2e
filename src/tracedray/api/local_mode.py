"""``init(local_mode=True)``: every task and actor method runs in the driver, serially.

No GCS, raylet or worker processes: ``f.remote()`` runs ``f`` right away on the
calling thread, so ``breakpoint()`` and pdb work inside tasks. The results still
come back as ObjectRefs, errors are still stored and re-raised by ``get`` as
``RayTaskError`` that is also the original type, and every event still emits its
span (``task.submit`` → ``task.execute`` in one process, ``object.put/get/free``,
``actor.create``) and JSON log line into a session directory of its own.

Values are stored serialized (and out-of-band buffers copied), as in a real
cluster: mutating an argument or a put value afterwards never changes what a task
or ``get`` sees.
"""

from __future__ import annotations

import asyncio
import collections
import inspect
import os
import threading
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tracedray import logs, telemetry
from tracedray._proto.v1 import gcs_pb2
from tracedray.api import runtime
from tracedray.api.actor import ActorHandle, _methods, constructor_arity, method_arities
from tracedray.api.call_site import user_call_site
from tracedray.core import ids, session
from tracedray.core.object_ref import ObjectRef
from tracedray.core.serialization import Serialized, deserialize, serialize
from tracedray.exceptions import ActorDiedError, ObjectLostError, RayTaskError
from tracedray.telemetry.local_mode_events import LocalModeEvents

log = logs.get_logger("tracedray.core.local_mode")  # the logger its lines name (the record)

LOCAL_ADDRESS = "local_mode"


# --- stored values -----------------------------------------------------------------
@dataclass
class _Stored:
    """One object: its serialized bytes, or the error a ``get`` must raise."""

    inband: bytes
    buffers: list[bytes]
    size: int
    error: BaseException | None = None
    # Refs captured inside the value stay alive (and so stay stored) with it.
    contained: list[ObjectRef] = field(default_factory=list)


def _freeze(serialized: Serialized) -> _Stored:
    # Copy out-of-band buffers: they still point into the caller's (mutable) arrays.
    return _Stored(serialized.inband, [bytes(b) for b in serialized.buffers], serialized.size,
                   contained=list(serialized.contained_refs))


def _error(error: BaseException) -> _Stored:
    return _Stored(b"", [], 0, error=error)


def raise_or_load(stored: _Stored) -> Any:
    if stored.error is not None:
        error = stored.error
        raise error.as_instanceof_cause() if isinstance(error, RayTaskError) else error
    return deserialize(stored.inband, stored.buffers)


def task_error(function_name: str, exc: BaseException, node_id: str, task_id: bytes,
               ip: str) -> RayTaskError:
    """Wrap a user exception as the cluster does (a nested task's error passes through)."""
    if isinstance(exc, RayTaskError):
        return exc
    frames = traceback.format_exception(type(exc), exc, exc.__traceback__)
    # Drop tracedray's own frames: the user's code is what matters.
    tb = "".join(f for f in frames if "tracedray/core/" not in f)
    return RayTaskError(function_name, tb, exc, os.getpid(), ip, node_id, task_id.hex())


# --- reference counting --------------------------------------------------------------
class LocalReferences:
    """Local ref counts for the driver's objects; the last ref gone frees the object.

    ``ObjectRef.__del__`` may run inside any allocation (garbage collection), so
    removals are only queued there and applied by :meth:`drain` on the next API
    call: freeing and its span never run inside a finalizer.
    """

    def __init__(self) -> None:
        self._counts: dict[bytes, int] = {}
        self._released: collections.deque[bytes] = collections.deque()
        self._lock = threading.Lock()

    def add_local_ref(self, object_id: bytes, owner: Any = None, call_site: str = "",
                      *, owned: bool = False) -> None:
        with self._lock:
            self._counts[object_id] = self._counts.get(object_id, 0) + 1

    def remove_local_ref(self, object_id: bytes) -> None:
        self._released.append(object_id)  # deque.append is atomic: safe in a finalizer

    def drain(self) -> list[bytes]:
        """Apply queued removals; returns the ids whose last reference is gone."""
        freed = []
        with self._lock:
            while self._released:
                object_id = self._released.popleft()
                count = self._counts.get(object_id, 0) - 1
                if count > 0:
                    self._counts[object_id] = count
                else:
                    self._counts.pop(object_id, None)
                    freed.append(object_id)
        return freed

    def count(self, object_id: bytes) -> int:
        with self._lock:
            return self._counts.get(object_id, 0)


# --- actors --------------------------------------------------------------------------
@dataclass
class _LocalActor:
    actor_id: bytes
    class_name: str
    name: str
    namespace: str
    instance: Any = None
    death_cause: str = ""
    # One method at a time per actor, as in a cluster; reentrant for nested calls.
    lock: threading.RLock = field(default_factory=threading.RLock)


class _ActorScope:
    """What ``get_runtime_context().get_actor_id()`` reads (``worker.executor.actor_id``)."""

    def __init__(self) -> None:
        self._tls = threading.local()

    @property
    def actor_id(self) -> bytes:
        return getattr(self._tls, "actor_id", b"")

    @actor_id.setter
    def actor_id(self, value: bytes) -> None:
        self._tls.actor_id = value


@dataclass(frozen=True)
class _RunningTask:
    """The current task as ``get_runtime_context()`` and nested submissions see it."""

    task_id: bytes
    function_name: str
    depth: int


@dataclass(frozen=True)
class LocalModeStatistics:
    tasks_executed: int
    tasks_failed: int
    actors_created: int
    objects_stored: int
    bytes_stored: int
    objects_freed: int


# --- the runtime ---------------------------------------------------------------------
class LocalRuntime:
    """:class:`~tracedray.api.runtime.Runtime` in the driver alone; it is also the
    worker its ObjectRefs count references with and ``get_runtime_context()`` reads."""

    def __init__(self, *, node_id: str, worker_id: str, job_id: bytes, namespace: str) -> None:
        self.node_id = node_id
        self.worker_id = worker_id
        self._events = LocalModeEvents(node_id, worker_id)
        self.job_id = job_id
        self.namespace = namespace
        self.ip = "127.0.0.1"
        self.references = LocalReferences()
        self.executor = _ActorScope()
        self._objects: dict[bytes, _Stored] = {}
        self._actors: dict[bytes, _LocalActor] = {}
        self._lock = threading.RLock()
        self._tls = threading.local()
        self._executed = self._failed = self._actors_created = self._freed = 0

    # --- context
    @property
    def worker(self) -> LocalRuntime:
        return self

    @property
    def current_task(self) -> _RunningTask | None:
        return getattr(self._tls, "task", None)

    def current_job_id(self) -> bytes:
        return self.job_id

    # --- objects
    def put(self, value: Any) -> ObjectRef:
        self._release_unreferenced()
        site = user_call_site(2)
        object_id = ids.object_id_for(ids.new_task_id(), ids.PUT_INDEX_BASE)
        with self._events.object_put(object_id, site) as put:
            stored = _freeze(serialize(value, what="put() value"))
            ref = self._store(object_id, stored, site)
            put.stored(stored.size)
        return ref

    def get(self, refs: Sequence[ObjectRef], timeout: float | None) -> list[Any]:
        """Every value is already there (tasks ran when submitted): ``timeout`` is moot."""
        return [self._get_one(ref) for ref in refs]

    def wait(self, refs: Sequence[ObjectRef], num_returns: int, timeout: float | None
             ) -> tuple[list[ObjectRef], list[ObjectRef]]:
        return list(refs[:num_returns]), list(refs[num_returns:])

    def _get_one(self, ref: ObjectRef) -> Any:
        self._release_unreferenced()
        with self._events.object_get(ref.hex()) as got:
            with self._lock:
                stored = self._objects.get(ref.binary())
            if stored is None:
                raise ObjectLostError(ref.hex(), "not in this local-mode driver (created by "
                                      "another cluster, or already freed)")
            got.found(stored.size)
            return raise_or_load(stored)

    def _store(self, object_id: bytes, stored: _Stored, call_site: str) -> ObjectRef:
        with self._lock:
            self._objects[object_id] = stored
        return ObjectRef(object_id, None, call_site, _worker=self,  # type: ignore[arg-type]
                         _owned=True)

    def _release_unreferenced(self) -> None:
        for object_id in self.references.drain():
            with self._lock:
                stored = self._objects.pop(object_id, None)
            if stored is None:
                continue
            self._freed += 1
            self._events.object_free(object_id, stored.size)
            # The value's captured refs go with it (they may free more on the next drain).
            stored.contained.clear()

    # --- tasks
    def submit_task(self, function: Callable[..., Any], name: str, args: Sequence[Any],
                    kwargs: Mapping[str, Any], options: Mapping[str, Any]) -> Any:
        return self._run(name, "normal", b"", function, args, kwargs,
                         options.get("num_returns", 1))

    def cancel(self, ref: ObjectRef, force: bool, recursive: bool) -> None:
        """Nothing to cancel: every task finished when it was submitted."""

    # --- actors
    def create_actor(self, cls: type, args: Sequence[Any], kwargs: Mapping[str, Any],
                     options: Mapping[str, Any]) -> ActorHandle:
        name = options.get("name") or ""
        namespace = options.get("namespace")
        namespace = self.namespace if namespace is None else namespace
        if name:
            existing = self._named(name, namespace)
            if existing is not None:
                if options.get("get_if_exists"):
                    return ActorHandle(existing.actor_id, existing.class_name, _methods(cls), 0,
                                       arities=method_arities(cls))
                raise ValueError(f"an actor named {name!r} already exists in namespace "
                                 f"{namespace!r}; pass get_if_exists=True to reuse it")
        checked = constructor_arity(cls)  # after get_if_exists, as in Ray
        if checked is not None:
            checked.check(args, kwargs)
        actor = _LocalActor(ids.new_actor_id(), cls.__qualname__, name, namespace)
        with self._lock:
            self._actors[actor.actor_id] = actor
        self._actors_created += 1
        with self._events.actor_create(actor.actor_id, actor.class_name, name):
            refs = self._run(f"{cls.__qualname__}.__init__", "actor_creation", actor.actor_id,
                             lambda *a, **k: _construct(actor, cls, a, k), args, kwargs, 1)
        # The creation result tells whether the constructor raised; nobody else holds it.
        with self._lock:
            stored = self._objects.get(refs.binary())
        if stored is not None and isinstance(stored.error, RayTaskError):
            actor.death_cause = f"the actor's constructor raised: {stored.error.cause!r}"
        return ActorHandle(actor.actor_id, actor.class_name, _methods(cls), 0,
                           arities=method_arities(cls))

    def submit_actor_task(self, handle: ActorHandle, method: str, args: Sequence[Any],
                          kwargs: Mapping[str, Any], num_returns: int,
                          max_task_retries: int | None, retry_exceptions: Any) -> Any:
        """Retry options are moot: a method runs once, at once."""
        actor = self._actors.get(handle._actor_id)
        name = f"{handle._class_name}.{method}"
        if actor is None or actor.death_cause:
            # No task runs on a dead actor: its refs hold the error, as in a cluster.
            cause = actor.death_cause if actor is not None else \
                "it does not belong to this local-mode driver"
            error = ActorDiedError(f"actor {handle._class_name} ({handle._actor_id.hex()}) is "
                                   f"dead: {cause}", handle._actor_id.hex())
            task_id = ids.new_task_id()
            refs = [self._store(ids.object_id_for(task_id, i + 1), _error(error), "")
                    for i in range(max(num_returns, 1))]
            return None if num_returns == 0 else refs[0] if num_returns == 1 else refs
        return self._run(name, "actor_method", actor.actor_id,
                         lambda *a, **k: _call_method(actor, method, a, k), args, kwargs,
                         num_returns)

    def _run(self, name: str, kind: str, actor_id: bytes, target: Callable[..., Any],
             args: Sequence[Any], kwargs: Mapping[str, Any], num_returns: int) -> Any:
        """Submit and execute at once: the refs returned are already resolved."""
        self._release_unreferenced()
        task_id = ids.new_task_id()
        site = user_call_site(2)
        parent = self.current_task
        with self._events.task_submit(task_id, name, kind, site, self.job_id,
                                      actor_id) as submission:
            carrier = submission.carrier()
            # Arguments are copied now, as a real submission would serialize them.
            frozen_args = [_freeze(serialize(a, what=f"argument {i} of {name}"))
                           if not isinstance(a, ObjectRef) else a for i, a in enumerate(args)]
            frozen_kwargs = {k: _freeze(serialize(v, what=f"argument {k!r} of {name}"))
                             if not isinstance(v, ObjectRef) else v for k, v in kwargs.items()}
        outputs = self._execute(task_id, name, kind, actor_id, carrier, target, frozen_args,
                                frozen_kwargs, num_returns, parent)
        refs = [self._store(ids.object_id_for(task_id, i + 1), value, site)
                for i, value in enumerate(outputs)]
        if num_returns == 0:
            return None
        return refs[0] if num_returns == 1 else refs

    def _execute(self, task_id: bytes, name: str, kind: str, actor_id: bytes,
                 carrier: Mapping[str, str], target: Callable[..., Any],
                 args: list[Any], kwargs: dict[str, Any], num_returns: int,
                 parent: _RunningTask | None) -> list[_Stored]:
        outer_task, outer_actor = self.current_task, self.executor.actor_id
        self._tls.task = _RunningTask(task_id, name, parent.depth + 1 if parent else 0)
        self.executor.actor_id = actor_id
        n_returns = max(num_returns, 1)
        try:
            with self._events.task_execute(task_id, name, kind, actor_id,
                                           carrier) as execution, logs.task_context(
                    job_id=self.job_id.hex(), task_id=task_id.hex(), actor_id=actor_id.hex(),
                    worker_id=self.worker_id, task_name=name):
                log.info("task.execute", function=name, attempt=0)
                try:
                    call_args = [self._resolve(a) for a in args]
                    call_kwargs = {k: self._resolve(v) for k, v in kwargs.items()}
                    output = target(*call_args, **call_kwargs)
                    values = _split(name, output, num_returns)
                    result = [_freeze(serialize(v, what=f"return value of {name}"))
                              for v in values]
                except BaseException as exc:  # noqa: BLE001 - user code may raise anything
                    error = task_error(name, exc, self.node_id, task_id, self.ip)
                    execution.failed(exc, error.traceback_str)
                    log.warning("task.failed", function=name, error_type=type(exc).__qualname__,
                                error=str(exc)[:2000])
                    self._failed += 1
                    return [_error(error)] * n_returns
            self._executed += 1
            return result
        finally:
            self._tls.task, self.executor.actor_id = outer_task, outer_actor

    def _resolve(self, arg: Any) -> Any:
        """A top-level ref becomes its value (its error fails the task); a copy is loaded."""
        if isinstance(arg, ObjectRef):
            return self._get_one(arg)
        return raise_or_load(arg)

    # --- actors (directory)
    def _named(self, name: str, namespace: str) -> _LocalActor | None:
        with self._lock:
            for actor in self._actors.values():
                if actor.name == name and actor.namespace == namespace and not actor.death_cause:
                    return actor
        return None

    def actor(self, actor_id: bytes) -> _LocalActor | None:
        return self._actors.get(actor_id)

    def actor_info(self, name: str, namespace: str) -> gcs_pb2.ActorInfo | None:
        actor = self._named(name, namespace)
        if actor is None:
            return None
        return gcs_pb2.ActorInfo(actor_id=actor.actor_id, name=actor.name,
                                 namespace=actor.namespace, class_name=actor.class_name,
                                 state="DEAD" if actor.death_cause else "ALIVE",
                                 death_cause=actor.death_cause, node_id=self.node_id,
                                 pid=os.getpid(), job_id=self.job_id)

    def kill(self, actor_id: bytes, no_restart: bool) -> None:
        """Killed for good whatever ``no_restart`` says: nothing restarts an actor here."""
        actor = self.actor(actor_id)
        if actor is not None and not actor.death_cause:
            actor.death_cause = "killed with tracedray.kill()"
            actor.instance = None

    # --- cluster
    def node_table(self) -> list[gcs_pb2.NodeWithLoad]:
        cpus = float(os.cpu_count() or 1)
        info = gcs_pb2.NodeInfo(node_id=self.node_id, state="ALIVE", is_head=True,
                                resources_total={"CPU": cpus}, hostname=os.uname().nodename)
        info.raylet.ip = self.ip
        return [gcs_pb2.NodeWithLoad(info=info, resources_available={"CPU": cpus})]

    def finish_job(self) -> None:
        """Nothing to record: the job lives and ends with this process."""

    # --- lifecycle
    def shutdown(self) -> None:
        self._release_unreferenced()
        with self._lock:
            remaining = len(self._objects)
            self._objects.clear()
            self._actors.clear()
        log.info("local_mode.shutdown", objects_dropped=remaining,
                 tasks_executed=self._executed, tasks_failed=self._failed)

    def statistics(self) -> LocalModeStatistics:
        with self._lock:
            count = len(self._objects)
            size = sum(s.size for s in self._objects.values())
        return LocalModeStatistics(self._executed, self._failed, self._actors_created, count,
                                   size, self._freed)


def _construct(actor: _LocalActor, cls: type, args: Sequence[Any],
               kwargs: Mapping[str, Any]) -> None:
    actor.instance = cls(*args, **kwargs)


def _call_method(actor: _LocalActor, method: str, args: Sequence[Any],
                 kwargs: Mapping[str, Any]) -> Any:
    from tracedray.core.worker.task_executor import BUILTIN_ACTOR_METHODS

    builtin = BUILTIN_ACTOR_METHODS.get(method)
    with actor.lock:
        if builtin is not None:
            return builtin(actor.instance, *args, **kwargs)
        output = getattr(actor.instance, method)(*args, **kwargs)
    if inspect.iscoroutine(output):  # an async actor's method: run serially, as all here
        return asyncio.run(output)
    return output


def _split(name: str, output: Any, num_returns: int) -> list[Any]:
    if num_returns <= 1:
        return [output if num_returns == 1 else None]
    outputs = list(output)
    if len(outputs) != num_returns:
        raise ValueError(f"{name} declared num_returns={num_returns} but returned "
                         f"{len(outputs)} values")
    return outputs


def start_local_mode(namespace: str) -> tuple[LocalRuntime, session.SessionPaths, str]:
    """A session directory, telemetry and logs for the driver, and the in-process worker
    (the current runtime): the runtime, the session and the namespace."""
    paths = session.create_session()
    job_id = ids.new_job_id()
    node_id = ids.new_node_id()
    telemetry.configure("driver", session_dir=paths.root, node_id=node_id,
                        session_id=paths.session_id)
    logs.configure("driver", session_dir=paths.root, node_id=node_id,
                   session_id=paths.session_id, config={"local_mode": True})
    _export_spans(paths)
    ns = namespace or f"anonymous-{job_id.hex()}"
    rt = LocalRuntime(node_id=node_id, worker_id=ids.new_worker_id(), job_id=job_id,
                      namespace=ns)
    logs.set_process_context(job_id=job_id.hex(), node_id=node_id)
    runtime.set_current(rt)
    log.info("driver.local_mode", job_id=job_id.hex(), session=str(paths.root),
             started_at=time.time())
    return rt, paths, ns


def _export_spans(paths: session.SessionPaths) -> None:
    """No raylet, so no node agent: one exports this driver's files to the configured
    OTLP endpoint (if any) while it runs and after it ends; a dead endpoint is said once."""
    from tracedray.core.raylet.telemetry_agent import start_for_driver
    from tracedray.telemetry import endpoint_check

    endpoint_check.check_in_background(log=lambda event, fields: log.warning(event, **fields))
    start_for_driver(paths.root)
