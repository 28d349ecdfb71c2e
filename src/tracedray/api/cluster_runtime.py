"""The runtime of a process connected to a cluster: the API's calls on its core worker.

Every operation of :class:`tracedray.api.runtime.Runtime` as a driver or a worker
process performs it: values go to the owner's memory store or the node's shared
memory, tasks to the task submitter (leases from raylets), actors to the GCS.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

from tracedray import logs
from tracedray._proto.v1 import common_pb2, gcs_pb2
from tracedray.api import options as opts
from tracedray.api.actor import (
    ActorHandle,
    _methods,
    constructor_arity,
    method_arities,
    method_retry_options,
)
from tracedray.api.call_site import user_call_site
from tracedray.api.submission import (
    TaskPlan,
    actor_call_plan,
    actor_creation_plan,
    build_task,
    plan_task,
)
from tracedray.core import ids
from tracedray.core.object_ref import ObjectRef
from tracedray.core.serialization import serialize
from tracedray.core.worker.memory_store import is_error
from tracedray.core.worker.retry_policy import RetryExceptions
from tracedray.exceptions import GetTimeoutError, OwnerDiedError
from tracedray.telemetry import instruments

if TYPE_CHECKING:
    from tracedray.core.worker.core_worker import CoreWorker

log = logs.get_logger("tracedray.core.api")  # the API's events, whichever module logs them

_instruments = instruments.Instruments(log)



MAX_PLANS = 1024  # forgotten beyond that, then made again


class ClusterRuntime:
    """:class:`~tracedray.api.runtime.Runtime` over a :class:`CoreWorker`."""

    def __init__(self, worker: CoreWorker) -> None:
        self.worker = worker
        # id(options) -> the submission plan of the remote function that holds them.
        self._plans: dict[int, TaskPlan] = {}
        # (actor, class, method, num_returns, retries, retry_exceptions) -> its calls' plan.
        self._actor_plans: dict[tuple[Any, ...], TaskPlan] = {}

    @property
    def node_id(self) -> str:
        return self.worker.node_id

    @property
    def namespace(self) -> str:
        return self.worker.namespace

    # --- objects
    def put(self, value: Any) -> ObjectRef:
        worker = self.worker
        site = user_call_site(2)
        object_id = ids.object_id_for(ids.new_task_id(), ids.PUT_INDEX_BASE)
        # object.put is recorded whole at the end: nothing below needs it as the current
        # span.
        start_ns = time.time_ns()
        try:
            serialized = serialize(value, what="put() value")
            stored = worker.objects.to_value(object_id, serialized, call_site=site)
            ref = worker.new_owned_ref(object_id, site)
            worker.store_owned_value(stored, "FINISHED")
            for inner in stored.contained_refs:
                worker.add_captured(inner, object_id)
        except BaseException as exc:
            _instruments.object_put_failed(object_id, site, start_ns, exc)
            raise
        _instruments.object_put(object_id, stored.size, "shm" if stored.store_node_id else "inline",
                                site, worker.node_id, start_ns)
        return ref

    def get(self, refs: Sequence[ObjectRef], timeout: float | None) -> list[Any]:
        worker = self.worker
        self._refuse_stale(refs)
        ids_ = [r.binary() for r in refs]
        size: int | None = None  # known once every value is in
        start_ns = time.time_ns()  # object.get recorded whole at the end: see put()
        try:
            # As Ray's: an error among the values raises at once, not after the slowest.
            ready = worker.wait_values(ids_, len(set(ids_)), timeout, stop_on_error=True)
            if len(ready) < len(set(ids_)):
                for object_id in ids_:
                    if object_id in ready:
                        error = worker.memory_store.get_if_ready(object_id)
                        if is_error(error):
                            worker.objects.load(cast(common_pb2.ObjectValue, error))  # raises
                missing = [i.hex() for i in ids_ if i not in ready]
                raise GetTimeoutError(f"get() timed out after {timeout}s waiting for "
                                      f"{len(missing)} of {len(refs)} object(s), "
                                      f"e.g. {missing[0]}")
            # Every one is ready, so none is None.
            stored = cast(list[common_pb2.ObjectValue],
                          [worker.memory_store.get_if_ready(object_id) for object_id in ids_])
            # Before loading: a stored error raises from load().
            size = sum(value.size for value in stored)
            values = [worker.objects.load(value) for value in stored]
        except BaseException as exc:
            _instruments.object_get_failed(ids_, size, start_ns, exc)
            raise
        _instruments.object_got(ids_, size, start_ns)
        return values

    def wait(self, refs: Sequence[ObjectRef], num_returns: int, timeout: float | None
             ) -> tuple[list[ObjectRef], list[ObjectRef]]:
        self._refuse_stale(refs)
        ready_ids = self.worker.wait_values([r.binary() for r in refs], num_returns, timeout)
        ready = [r for r in refs if r.binary() in ready_ids][:num_returns]
        chosen = set(ready)
        return ready, [r for r in refs if r not in chosen]

    def _refuse_stale(self, refs: Sequence[ObjectRef]) -> None:
        """A ref made by an earlier connection of this process (before ``shutdown()`` and a
        new ``init()``) names an object nothing here will ever produce: fail at once."""
        for ref in refs:
            made_by = ref._worker
            if made_by is not None and made_by is not self.worker:
                raise OwnerDiedError(ref.hex(), "it was made before this process's last "
                                     "init(): it might be dead or it's from a different "
                                     "cluster")

    # --- tasks
    def submit_task(self, function: Callable[..., Any], name: str, args: Sequence[Any],
                    kwargs: Mapping[str, Any], options: Mapping[str, Any]) -> Any:
        worker = self.worker
        plan = self._plans.get(id(options))
        if plan is None or plan.options is not options:
            plan = plan_task(worker, function, name, options)
            if len(self._plans) >= MAX_PLANS:  # ever new options (.options() in a loop)
                self._plans.clear()
            self._plans[id(options)] = plan  # the plan holds options: the id stays theirs
        built = build_task(worker, plan, args, kwargs)
        # Its span ends as the task is handed over; the inbox's thread records it.
        built.record.ended_at = time.time_ns()
        worker.submit_later(built.task, built.record)
        return _returned(built.refs, plan.num_returns)

    def cancel(self, ref: ObjectRef, force: bool, recursive: bool) -> None:
        worker = self.worker
        worker.inbox.drain()  # the task may still wait in the inbox
        task_id = ref.task_id().binary()
        if worker.submitter.cancel(task_id, force, recursive):
            return
        if force:
            if worker.actor_submitter.owns_call(task_id):
                raise ValueError("force=True is not supported for actor tasks.")
            return
        worker.actor_submitter.cancel(task_id)

    # --- actors
    def create_actor(self, cls: type, args: Sequence[Any], kwargs: Mapping[str, Any],
                     options: Mapping[str, Any]) -> ActorHandle:
        worker = self.worker
        name = options.get("name") or ""
        namespace = options.get("namespace")
        namespace = worker.namespace if namespace is None else namespace
        actor_options = common_pb2.ActorOptions(
            max_restarts=options.get("max_restarts", 0),
            max_task_retries=options.get("max_task_retries", 0),
            # 0: the default, which depends on the class (1, or 1,000 for an async actor).
            max_concurrency=options.get("max_concurrency", 0), name=name, namespace=namespace,
            detached=options.get("lifetime") == "detached", class_name=cls.__qualname__)
        if options.get("get_if_exists") and name:
            try:
                info = worker.gcs.get_actor(name=name, namespace=namespace)
                if info.state != "DEAD":
                    return ActorHandle._from_info(info)
            except Exception:  # noqa: BLE001 - not found: create it below
                pass
        # After get_if_exists found none, as in Ray: an existing actor is returned
        # whatever the arguments.
        checked = constructor_arity(cls)
        if checked is not None:
            checked.check(args, kwargs)
        function_id = worker.functions.export(cls, f"actor class {cls.__name__}")
        actor_id = ids.new_actor_id()
        # Actors hold 0 CPU while alive by default (as in Ray), 1 to be scheduled.
        resources = opts.resource_request(options, 0.0)
        task, refs, record = build_task(
            worker, actor_creation_plan(function_id, cls.__qualname__, resources, actor_id,
                                        actor_options), args, kwargs)
        record.write()  # the line and the spec's trace context; the span ends below
        try:
            _resolve_now(worker, task)
            info = worker.gcs.create_actor(task.spec, bool(options.get("get_if_exists")))
            worker.submitter.watch_actor_creation(resources, cls.__qualname__)
        finally:
            record.span.end()
            worker.references.remove_submitted(task.dep_ids)
        return ActorHandle(info.actor_id, cls.__qualname__, _methods(cls),
                           actor_options.max_task_retries, method_retry_options(cls),
                           method_arities(cls))

    def submit_actor_task(self, handle: ActorHandle, method: str, args: Sequence[Any],
                          kwargs: Mapping[str, Any], num_returns: int,
                          max_task_retries: int | None, retry_exceptions: Any) -> Any:
        retries = handle._max_task_retries if max_task_retries is None else max_task_retries
        allowed = RetryExceptions.from_option(retry_exceptions,
                                              f"{handle._class_name}.{method}")
        key = (handle._actor_id, handle._class_name, method, num_returns, retries, allowed)
        plan = self._actor_plans.get(key)
        if plan is None:
            plan = actor_call_plan(handle._actor_id, handle._class_name, method, num_returns,
                                   retries, allowed)
            if len(self._actor_plans) >= MAX_PLANS:  # ever new actors or options
                self._actor_plans.clear()
            self._actor_plans[key] = plan
        built = build_task(self.worker, plan, args, kwargs)
        built.record.ended_at = time.time_ns()  # as submit_task's
        self.worker.submit_later(built.task, built.record, retries)
        return _returned(built.refs, num_returns)

    def kill(self, actor_id: bytes, no_restart: bool) -> None:
        self.worker.inbox.drain()  # calls made before the kill go out before it
        self.worker.gcs.kill_actor(actor_id, no_restart)
        if no_restart:
            self.worker.actor_submitter.mark_dead(actor_id, "killed with tracedray.kill()")

    def actor_info(self, name: str, namespace: str) -> gcs_pb2.ActorInfo | None:
        return self.worker.gcs.find_actor(name=name, namespace=namespace)

    # --- cluster
    def node_table(self) -> list[gcs_pb2.NodeWithLoad]:
        return self.worker.gcs.get_nodes()

    def finish_job(self) -> None:
        self.worker.gcs.finish_job(gcs_pb2.JobInfo(job_id=self.worker.job_id))

    def shutdown(self) -> None:
        self.worker.shutdown()


def _returned(refs: list[ObjectRef], num_returns: int) -> Any:
    """What ``.remote()`` returns: nothing, one ref, or a list of them."""
    if num_returns == 0:
        return None
    return refs[0] if num_returns == 1 else refs


def _resolve_now(worker: CoreWorker, task: Any) -> None:
    """Creation arguments are resolved before the GCS gets the spec."""
    done = threading.Event()
    failure: list[Any] = []

    def failed(_task: Any, error: Any) -> None:
        failure.append(error)
        done.set()

    worker.resolver.resolve(task, lambda _t: done.set(), failed)
    done.wait()
    if failure:
        worker.objects.load(failure[0])  # raises the upstream error
