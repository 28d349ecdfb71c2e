"""Turning a ``.remote(...)`` call into a task spec plus the refs it returns."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

from tracedray import logs
from tracedray._proto.v1 import common_pb2
from tracedray.api import options as opts
from tracedray.api.call_site import user_call_site
from tracedray.api.submit_record import SubmitRecord
from tracedray.core import ids
from tracedray.core.object_ref import ObjectRef
from tracedray.core.serialization import serialize
from tracedray.core.worker.pending_task import PendingTask
from tracedray.core.worker.retry_policy import NO_RETRY, RetryExceptions
from tracedray.core.worker.task_submitter import resource_shape

if TYPE_CHECKING:
    from tracedray.core.worker.core_worker import CoreWorker

log = logs.get_logger("tracedray.core.submission")  # the logger its lines name (the record)
DEFAULT_MAX_RETRIES = 3  # a normal task's, as in Ray
_KIND_LABEL: dict[int, str] = {common_pb2.NORMAL: "normal",
                               common_pb2.ACTOR_CREATION: "actor_creation",
                               common_pb2.ACTOR_METHOD: "actor_method"}


class Built(NamedTuple):
    """A built task: the pending task, its return refs, and what is left to record of
    it (``SubmitRecord``: its span, line, trace context and first event), to write when
    the task is submitted."""
    task: PendingTask
    refs: list[ObjectRef]
    record: SubmitRecord


class SpecTemplate:
    """The spec every task of one plan starts as, a copy of which each ``.remote()`` takes:
    every field its tasks share (the function, kind, resources, retries, and the caller's
    address, namespace and job), so a call sets only its own (task id, call site,
    parent, depth, trace context). One ``CopyFrom`` costs less than setting a dozen
    fields one by one (each a upb setattr) or passing them to the constructor.

    It is made again when the caller, namespace or job differs from the last call's (a
    worker's submissions belong to the job of the task it runs): (caller, namespace,
    job id, spec) is one tuple, swapped whole, so threads calling at once never pair
    one job's spec with another's key.
    """

    __slots__ = ("_fields", "_base")

    def __init__(self, fields: Mapping[str, Any]) -> None:
        # The shared fields, as TaskSpec's keywords (a default serializes as one never set).
        self._fields = dict(fields)
        self._base: tuple[Any, str, bytes, common_pb2.TaskSpec] | None = None

    def new_spec(self, caller: common_pb2.Address, namespace: str,
                 job_id: bytes) -> common_pb2.TaskSpec:
        """A new spec holding the shared fields, the caller's address, namespace and job."""
        base = self._base
        if base is None or base[0] is not caller or base[1] != namespace or base[2] != job_id:
            base = self._base = (caller, namespace, job_id, common_pb2.TaskSpec(
                caller=caller, namespace=namespace, job_id=job_id, **self._fields))
        spec = common_pb2.TaskSpec()
        spec.CopyFrom(base[3])
        return spec


@dataclass(frozen=True)
class TaskPlan:
    """What every ``.remote()`` of one remote function with one set of options (or every
    call of one actor method with one set of options) shares, worked out once instead of
    at each call (``plan_task``, ``actor_call_plan``, ``actor_creation_plan``)."""
    options: Mapping[str, Any] | None  # a remote function's: its cache key is their id
    kind: int
    function_id: str
    function_name: str
    num_returns: int
    resources: dict[str, float]
    resource_shape: str  # the scheduling key's resource part ("": the submitter's to find)
    max_retries: int
    retry_exceptions: RetryExceptions
    template: SpecTemplate
    actor_id: bytes = b""


def _plan(options: Mapping[str, Any] | None, kind: int, function_id: str, function_name: str,
          num_returns: int, resources: dict[str, float], max_retries: int,
          retry_exceptions: RetryExceptions, *, resource_shape: str = "",
          actor_id: bytes = b"", method_name: str = "",
          actor_options: common_pb2.ActorOptions | None = None) -> TaskPlan:
    fields: dict[str, Any] = {"kind": kind, "function_id": function_id,
                              "function_name": function_name, "num_returns": num_returns,
                              "resources": resources, "max_retries": max_retries,
                              "retry_exceptions": retry_exceptions.allowed,
                              "actor_id": actor_id, "method_name": method_name}
    if actor_options is not None:
        fields["actor_options"] = actor_options
    return TaskPlan(options, kind, function_id, function_name, num_returns, resources,
                    resource_shape, max_retries, retry_exceptions, SpecTemplate(fields),
                    actor_id)


def plan_task(worker: CoreWorker, function: Any, name: str,
              options: Mapping[str, Any]) -> TaskPlan:
    """A remote function's plan for ``options`` (exports the function, once)."""
    resources = opts.resource_request(options, 1.0)
    return _plan(options, common_pb2.NORMAL,
                 worker.functions.export(function, f"function {name}"), name,
                 options.get("num_returns", 1), resources,
                 options.get("max_retries", DEFAULT_MAX_RETRIES),
                 RetryExceptions.from_option(options.get("retry_exceptions"),
                                             f"function {name}"),
                 resource_shape=resource_shape(resources))


def actor_creation_plan(function_id: str, class_name: str, resources: dict[str, float],
                        actor_id: bytes, actor_options: common_pb2.ActorOptions) -> TaskPlan:
    """The plan of one actor's creation task (made for it alone)."""
    return _plan(None, common_pb2.ACTOR_CREATION, function_id, f"{class_name}.__init__", 1,
                 resources, 0, NO_RETRY, actor_id=actor_id, actor_options=actor_options)


def actor_call_plan(actor_id: bytes, class_name: str, method: str, num_returns: int,
                    max_retries: int, retry_exceptions: RetryExceptions) -> TaskPlan:
    """The plan of the calls of one actor method with one set of options."""
    return _plan(None, common_pb2.ACTOR_METHOD, "", f"{class_name}.{method}", num_returns,
                 {}, max_retries, retry_exceptions, actor_id=actor_id, method_name=method)


def build_task(worker: CoreWorker, plan: TaskPlan, args: Sequence[Any],
               kwargs: Mapping[str, Any], *, call_site: str | None = None) -> Built:
    """Builds the task; an argument that cannot be pickled raises here, at ``.remote()``."""
    task_id = ids.new_task_id()
    site = call_site or user_call_site(3)
    parent = worker.current_task
    job_id = worker.current_job_id()
    spec = plan.template.new_spec(worker.address_proto, worker.namespace, job_id)
    spec.task_id = task_id
    spec.call_site = site
    if parent is not None:
        spec.parent_task_id = parent.task_id
        spec.depth = parent.depth + 1
    max_retries = plan.max_retries
    record = SubmitRecord(worker.task_events, spec, function=plan.function_name,
                          kind=_KIND_LABEL[plan.kind], call_site=site, job_id=job_id,
                          max_retries=max_retries, actor_id=plan.actor_id)
    try:
        task = _attach_args(worker, spec, args, kwargs, max_retries)
    except BaseException as exc:
        record.fail(exc)
        raise
    task.retry_exceptions = plan.retry_exceptions
    task.resource_shape = plan.resource_shape
    record.task = task
    if plan.num_returns <= 1:  # most tasks: no comprehensions (each a frame in 3.11)
        object_id = ids.object_id_for(task_id, 1)
        refs = [worker.new_owned_ref(object_id, site)]
        task.return_ids = [object_id]
    else:
        refs = [worker.new_owned_ref(ids.object_id_for(task_id, i + 1), site)
                for i in range(plan.num_returns)]
        task.return_ids = [r.binary() for r in refs]
    return Built(task, refs, record)


def _attach_args(worker: CoreWorker, spec: common_pb2.TaskSpec, args: Sequence[Any],
                 kwargs: Mapping[str, Any], max_retries: int) -> PendingTask:
    task = PendingTask(spec=spec, return_ids=[], dep_ids=[], unresolved=[],
                       retries_left=max_retries)
    if not args and not kwargs:
        return task  # nothing to serialize, resolve or keep alive
    keep_alive: list[ObjectRef] = []
    values = [*args, *kwargs.values()]
    spec.kwarg_names.extend(kwargs.keys())
    for index, value in enumerate(values):
        arg = spec.args.add()
        if isinstance(value, ObjectRef):
            arg.is_ref = True
            task.unresolved.append((index, value.binary(), value.owner_address))
            task.dep_ids.append(value.binary())
            keep_alive.append(value)
            continue
        serialized = serialize(value, what=f"argument {index} of {spec.function_name}")
        for inner in serialized.contained_refs:
            task.dep_ids.append(inner.binary())
            keep_alive.append(inner)
        if serialized.size < worker.objects.inline_threshold:
            arg.value.CopyFrom(worker.objects.to_value(b"", serialized, call_site=spec.call_site))
        else:
            # A large argument goes to the store once, as a hidden object the task keeps alive.
            object_id = ids.object_id_for(spec.task_id, ids.PUT_INDEX_BASE + index)
            ref = worker.new_owned_ref(object_id, spec.call_site)
            stored = worker.objects.to_value(object_id, serialized, call_site=spec.call_site)
            worker.store_owned_value(stored, "FINISHED")
            arg.value.CopyFrom(stored)
            task.dep_ids.append(object_id)
            keep_alive.append(ref)
            if stored.store_node_id:
                task.input_bytes_by_node[stored.store_node_id] = stored.size
    worker.references.add_submitted(task.dep_ids)
    del keep_alive  # refs may go now: the submitted count holds the objects
    return task
