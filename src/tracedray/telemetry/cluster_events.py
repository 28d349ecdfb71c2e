"""The cluster's lifecycle events, as the processes that see them report them.

A raylet reports its node's start, its workers' starts and exits and the objects it
pulls; the GCS reports jobs ending, nodes dying, actors created and tasks failed at
their job's end; an owner reports the tasks nothing can run, the objects a dead node
took and the ones it rebuilds. Each hook takes plain values (ids, names, counts) and
records the event's span and log line as docs/telemetry.md names them, so the core
builds no span attributes for these events. The hot events (tasks, objects) have their
own hooks in ``instruments.py``.

A hook whose span covers work the caller does (a node registering, an object being
pulled) is a context manager: the block runs inside the span, log lines written there
carry its ids, and what the work learns goes in through the handle's named methods.
Every class here is made with its component's logger, so each line keeps the
``logger`` it has always had.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import Any, Protocol

from opentelemetry.trace import Span, SpanContext, Status, StatusCode

from tracedray.exceptions import RaySystemError
from tracedray.telemetry import attributes as A
from tracedray.telemetry._api import context_from_carrier, record_error, span, start_span
from tracedray.telemetry._record import remote_parent
from tracedray.telemetry._state import enabled
from tracedray.telemetry.instruments import LogLines


class LogLevels(LogLines, Protocol):
    """What these hooks need of a logger: info and warning lines."""

    def warning(self, event: str, *args: Any, **fields: Any) -> Any: ...

    def error(self, event: str, *args: Any, **fields: Any) -> Any: ...


class _Open:
    """A span open around the caller's work."""

    __slots__ = ("_span",)

    def __init__(self, current: Span) -> None:
        self._span = current


class NodeStart(_Open):
    def version_drift(self, differences: Sequence[str]) -> None:
        """How this node's interpreter or packages differ from the head's."""
        self._span.set_attribute(A.NODE_VERSION_DRIFT, differences)


class ObjectTransfer(_Open):
    def received(self, size: int, streams: int) -> None:
        """``size`` bytes came in over ``streams`` data-path connections (0: gRPC)."""
        self._span.set_attribute(A.TRANSFER_BYTES, size)
        self._span.set_attribute(A.TRANSFER_STREAMS, streams)


class ActorCreation(_Open):
    def placed(self, node_id: str, worker_pid: int) -> None:
        """The actor got a worker: its node and pid."""
        self._span.set_attribute(A.NODE_ID, node_id)
        self._span.set_attribute(A.WORKER_PID, worker_pid)


class UnusedRelease(_Open):
    def answered(self, withdrawn: int, killed: list[int], unanswered: list[str]) -> None:
        """What the raylets did: requests withdrawn, worker pids killed, and the nodes
        that did not answer."""
        self._span.set_attribute(A.ACTOR_REQUESTS_WITHDRAWN, withdrawn)
        self._span.set_attribute(A.ACTOR_WORKERS_KILLED, killed)
        self._span.set_attribute(A.GCS_NODES_UNANSWERED, unanswered)


class GcsRestart:
    """The ``gcs.restart`` span, from a GCS's death being noticed until a new one
    answers (or the watch stops), and its lines."""

    __slots__ = ("_span", "_log", "_address", "_old_pid")

    def __init__(self, current: Span, log: LogLevels, address: str, old_pid: int) -> None:
        self._span, self._log, self._address, self._old_pid = current, log, address, old_pid

    def attempt_failed(self, attempt: int, error: BaseException, retry_in_s: float) -> None:
        """Starting a new GCS failed; the first failure marks the span an error."""
        self._log.error("gcs.restart_failed", attempt=attempt, error=str(error),
                        retry_in_s=retry_in_s)
        if attempt == 1:
            record_error(self._span, error)

    def restarted(self, new_pid: int, attempts: int, downtime_s: float) -> None:
        self._span.set_attribute(A.GCS_NEW_PID, new_pid)
        self._span.set_attribute(A.GCS_RESTART_ATTEMPTS, attempts)
        self._span.end()
        self._log.info("gcs.restarted", gcs_pid=new_pid, old_pid=self._old_pid,
                       downtime_s=round(downtime_s, 3), attempts=attempts,
                       address=self._address)

    def stopped(self) -> None:
        """The watch stopped before a new GCS came up."""
        self._span.end()


# A worker's memory facts (the log fields the raylet knows, exit_meaning.py): their
# span attributes.
_MEMORY_ATTRIBUTE = {"cause": A.EXIT_CAUSE, "cgroup": A.EXIT_CGROUP,
                     "memory_limit": A.EXIT_MEMORY_LIMIT, "peak_rss": A.EXIT_PEAK_RSS,
                     "node_memory_percent": A.NODE_MEMORY_PERCENT}


def exit_memory_attributes(memory_fields: Mapping[str, Any]) -> dict[str, Any]:
    """The memory facts of a worker's exit (log fields), as worker.exit span attributes."""
    return {_MEMORY_ATTRIBUTE[name]: value for name, value in memory_fields.items()}


def attempt_start_attributes(slot: Mapping[str, Any]) -> dict[str, Any]:
    """When the attempt in a dead worker's flight recorder slot started (worker.exit)."""
    started = slot.get("started_at")
    if isinstance(started, int | float) and not isinstance(started, bool) and started > 0:
        return {A.TASK_STARTED: int(started * 1e9)}
    return {}


class RayletEvents:
    """A raylet's events: its node, its workers, the objects it pulls."""

    __slots__ = ("_log",)

    def __init__(self, log: LogLevels) -> None:
        self._log = log

    @contextmanager
    def node_start(self, node_id: str, ip: str) -> Iterator[NodeStart]:
        """The ``node.start`` span, around the node's registration."""
        with span("node.start", {A.NODE_ID: node_id, A.NODE_IP: ip}) as current:
            yield NodeStart(current)

    def node_started(self, node_id: str, address: str, resources: Mapping[str, float],
                     store_capacity: int, differences: Sequence[str]) -> None:
        self._log.info("node.start", node_id=node_id, address=address, resources=resources,
                       store_capacity=store_capacity)
        if differences:
            self._log.warning("node.version_drift", node_id=node_id, differences=differences,
                              hint="this node's interpreter or packages differ from the head's")

    def worker_started(self, worker_id: str, worker_pid: int, node_id: str, port: int) -> None:
        if enabled():
            start_span("worker.start", {A.WORKER_ID: worker_id, A.WORKER_PID: worker_pid,
                                        A.NODE_ID: node_id}).end()
        self._log.info("worker.start", worker_id=worker_id, worker_pid=worker_pid, port=port)

    def worker_exited(self, *, worker_id: str, worker_pid: int, node_id: str, exit_code: Any,
                      exit_signal: Any, meaning: str, memory_fields: Mapping[str, Any],
                      slot: Mapping[str, Any], actor_id: bytes, reason: str,
                      unexpected: bool, parent: SpanContext | None) -> None:
        """A worker process ended: the ``worker.exit`` span (under the task its flight
        recorder ``slot`` names, an error when ``unexpected`` and it died of a signal or
        an exit code) and line. ``reason``: why it was stopped, "" when nobody stopped
        it."""
        attributes: dict[str, Any] = {
            A.WORKER_ID: worker_id, A.WORKER_PID: worker_pid, A.NODE_ID: node_id,
            A.EXIT_CODE: exit_code, A.EXIT_SIGNAL: exit_signal, A.EXIT_MEANING: meaning,
            **exit_memory_attributes(memory_fields)}
        if slot.get("task_id"):
            attributes[A.TASK_ID] = slot["task_id"]
            attributes[A.TASK_ATTEMPT] = int(slot.get("attempt", 0))
            attributes[A.TASK_FUNCTION] = slot.get("function", "")
            attributes.update(attempt_start_attributes(slot))
        if actor_id:
            attributes[A.ACTOR_ID] = actor_id.hex()
        if reason:
            attributes[A.EXIT_REASON] = reason
        if enabled():
            current = start_span("worker.exit", attributes, parent=parent)
            if unexpected and (exit_signal or exit_code):
                record_error(current, RaySystemError(
                    f"worker pid {worker_pid} died: {exit_signal or exit_code}: {meaning}"))
            current.end()
        level = self._log.warning if unexpected else self._log.info
        level("worker.exit", worker_id=worker_id, worker_pid=worker_pid, exit_code=exit_code,
              signal=exit_signal, meaning=meaning, reason=reason or "unexpected",
              running_task=slot.get("task_id", ""), **memory_fields)

    def gcs_restart(self, storage: str, address: str, old_pid: int, exit: str
                    ) -> GcsRestart:
        """The head raylet noticed its GCS died (``exit``: how) and restarts it."""
        current = start_span("gcs.restart", {A.GCS_STORAGE: storage, A.GCS_ADDRESS: address,
                                             A.GCS_OLD_PID: old_pid, A.GCS_EXIT: exit})
        self._log.warning("gcs.died", gcs_pid=old_pid, exit=exit, address=address,
                          storage=storage)
        return GcsRestart(current, self._log, address, old_pid)

    @contextmanager
    def object_transfer(self, object_id: bytes, from_node: str, to_node: str
                        ) -> Iterator[ObjectTransfer]:
        """The ``object.transfer`` span, around a pull from another node's store."""
        with span("object.transfer", {A.OBJECT_ID: object_id.hex(),
                                      A.TRANSFER_FROM_NODE: from_node,
                                      A.TRANSFER_TO_NODE: to_node}) as current:
            yield ObjectTransfer(current)

    def object_transferred(self, object_id: bytes, size: int, from_node: str, streams: int,
                           duration_s: float) -> None:
        self._log.info("object.transfer", object_id=object_id.hex(), bytes=size,
                       from_node=from_node, streams=streams, duration_s=round(duration_s, 6))


class StoreEvents:
    """A node's object store moving an object: freed, spilled, restored, evicted. Each
    span covers the move (the store's lock held); ``used_after`` is the store's bytes
    in use once it is done."""

    __slots__ = ("_log", "_node_id", "_capacity")

    def __init__(self, log: LogLevels, node_id: str, capacity: int) -> None:
        self._log, self._node_id, self._capacity = log, node_id, capacity

    def _span(self, name: str, object_id: str, size: int, used_after: int,
              **extra: Any) -> Any:
        return span(name, {A.OBJECT_ID: object_id, A.OBJECT_SIZE: size,
                           A.NODE_ID: self._node_id, A.STORE_USED: used_after,
                           A.STORE_CAPACITY: self._capacity, **extra})

    def object_free(self, object_id: str, size: int, used_after: int, reason: str
                    ) -> AbstractContextManager[Span]:
        return self._span("object.free", object_id, size, used_after,
                          **{A.OBJECT_FREE_REASON: reason})

    def object_spill(self, object_id: str, size: int, used_after: int, path: str
                     ) -> AbstractContextManager[Span]:
        return self._span("object.spill", object_id, size, used_after, **{A.SPILL_PATH: path})

    def spilled(self, object_id: str, size: int, path: str, used: int) -> None:
        self._log.info("object spilled", object_id=object_id, size=size,
                       node_id=self._node_id, spill_path=path, store_used=used,
                       store_capacity=self._capacity)

    def object_restore(self, object_id: str, size: int, used_after: int, path: str
                       ) -> AbstractContextManager[Span]:
        return self._span("object.restore", object_id, size, used_after,
                          **{A.SPILL_PATH: path})

    def restored(self, object_id: str, size: int, path: str, used: int) -> None:
        self._log.info("object restored", object_id=object_id, size=size,
                       node_id=self._node_id, spill_path=path, store_used=used,
                       store_capacity=self._capacity)

    def object_evict(self, object_id: str, size: int, used_after: int
                     ) -> AbstractContextManager[Span]:
        return self._span("object.evict", object_id, size, used_after)

    def evicted(self, object_id: str, size: int, used: int) -> None:
        self._log.info("object evicted", object_id=object_id, size=size,
                       node_id=self._node_id, store_used=used, store_capacity=self._capacity)


class GcsEvents:
    """The GCS's events: jobs ending, nodes dying, actors created, tasks failed at their
    job's end."""

    __slots__ = ("_log",)

    def __init__(self, log: LogLevels) -> None:
        self._log = log

    @contextmanager
    def job_finish(self, job_id: bytes, state: str, reason: str, driver_pid: int,
                   finished: bool) -> Iterator[None]:
        """The ``job.finish`` span and line (a warning unless the job ``finished``),
        around what its end does (its actors killed)."""
        job_hex = job_id.hex()
        with span("job.finish", {A.JOB_ID: job_hex, A.JOB_STATE: state,
                                 A.JOB_END_REASON: reason}):
            (self._log.info if finished else self._log.warning)(
                "job.finish", job_id=job_hex, state=state, reason=reason,
                driver_pid=driver_pid)
            yield

    def flushed(self, *, storage: str, entries: int, size: int, rss_before: int,
                rss_after: int, tables: Mapping[str, int], hot_entries: Mapping[str, int],
                start_ns: int, duration_s: float) -> None:
        """A flush moved ``entries`` records (``size`` bytes; per table in ``tables``)
        to the storage, leaving ``hot_entries`` in memory: the ``gcs.flush`` span, from
        ``start_ns`` for ``duration_s``, and line."""
        current = start_span("gcs.flush", {
            A.GCS_FLUSH_ENTRIES: entries, A.GCS_FLUSH_BYTES: size,
            A.GCS_MEMORY_BEFORE: rss_before, A.GCS_MEMORY_AFTER: rss_after,
            A.GCS_HOT_ENTRIES: sum(hot_entries.values()), A.GCS_STORAGE: storage,
            A.GCS_TABLE: sorted(tables)}, start_time=start_ns)
        current.end(end_time=start_ns + int(duration_s * 1e9))
        self._log.info("gcs.flush", entries=entries, bytes=size,
                       duration_s=round(duration_s, 6), memory_before=rss_before,
                       memory_after=rss_after, storage=storage, tables=dict(tables),
                       hot_entries=dict(hot_entries))

    def flush_failed(self, storage: str, error: BaseException) -> None:
        current = start_span("gcs.flush", {A.GCS_STORAGE: storage})
        record_error(current, error)
        current.end()
        self._log.error("gcs.flush_failed", storage=storage, error=str(error))

    def node_dead(self, node_id: str, ip: str, pid: int, reason: str) -> None:
        with span("node.dead", {A.NODE_ID: node_id, A.NODE_IP: ip,
                                A.NODE_DEATH_REASON: reason}):
            self._log.warning("node.dead", node_id=node_id, ip=ip, pid=pid, reason=reason)

    def task_failed_at_job_end(self, *, task_id: bytes, attempt: int, function: str,
                               state: str, job_id: bytes, actor_id: bytes, error_type: str,
                               reason: str, trace_id: str, submit_span_id: int,
                               at: float) -> None:
        """The ``task.job_end`` span, at ``at`` in the task's trace (under its
        ``task.submit``, when ``trace_id`` names one), and its line."""
        task_hex = task_id.hex()
        attributes: dict[str, Any] = {
            A.TASK_ID: task_hex, A.TASK_ATTEMPT: attempt, A.TASK_FUNCTION: function,
            A.TASK_STATE: state, A.JOB_ID: job_id.hex(), A.ERROR_TYPE: error_type,
            A.TASK_FAILURE_REASON: reason}
        if actor_id:
            attributes[A.ACTOR_ID] = actor_id.hex()
        parent = None
        if len(trace_id) == 32 and submit_span_id:
            parent = remote_parent(int(trace_id, 16), submit_span_id, 1)
        at_ns = int(at * 1e9)
        current = start_span("task.job_end", attributes, start_time=at_ns, parent=parent)
        current.set_status(Status(StatusCode.ERROR, f"{error_type}: {reason}"))
        current.end(at_ns)
        self._log.info("task.job_end", task_id=task_hex, attempt=attempt, function=function,
                       job_id=job_id.hex(), error_type=error_type, reason=reason,
                       **({"trace_id": trace_id} if trace_id else {}))

    @contextmanager
    def actor_create(self, actor_id: bytes, class_name: str, name: str,
                     carrier: Mapping[str, str]) -> Iterator[ActorCreation]:
        """The ``actor.create`` span, under the creating call (its spec's ``carrier``),
        around placing the actor and running its constructor."""
        with span("actor.create", {A.ACTOR_ID: actor_id.hex(), A.ACTOR_CLASS: class_name,
                                   A.ACTOR_NAME: name},
                  context=context_from_carrier(carrier)) as current:
            yield ActorCreation(current)

    @contextmanager
    def release_unused(self, nodes: int, to_place: int) -> Iterator[UnusedRelease]:
        """The ``actor.release_unused`` span, around asking ``nodes`` raylets to give up
        the workers of actors no longer placed there (``to_place`` are placed again)."""
        with span("actor.release_unused", {A.GCS_NODES: nodes,
                                           A.ACTOR_RECREATED: to_place}) as current:
            yield UnusedRelease(current)

    def unused_released(self, nodes: int, to_place: int, withdrawn: int, killed: list[int],
                        adopted: list[int], unanswered: Mapping[str, str]) -> None:
        """The line after :meth:`release_unused`: also the pids of the workers adopted
        (creations the GCS before had under way) and each silent node's error."""
        (self._log.warning if unanswered else self._log.info)(
            "actor.release_unused", nodes=nodes, actors_to_place=to_place,
            requests_withdrawn=withdrawn, killed_worker_pids=killed,
            adopted_worker_pids=adopted, unanswered=unanswered)


class OwnerEvents:
    """An owner's events (a driver or worker): tasks nothing can run, objects lost with
    a node and rebuilt."""

    __slots__ = ("_log",)

    def __init__(self, log: LogLevels) -> None:
        self._log = log

    def task_infeasible(self, what: str, request: Mapping[str, float],
                        cluster_resources: Any, nodes: int, waited_s: float) -> None:
        """A request no node can fit has waited ``waited_s``: the ``task.infeasible``
        span and warning."""
        waited = round(waited_s, 1)
        with span("task.infeasible", {"tracedray.task.resources": str(request),
                                      "tracedray.cluster.resources": str(cluster_resources),
                                      "tracedray.waited_s": waited}):
            self._log.warning("task.infeasible", what=what, resources=request,
                              cluster_resources=cluster_resources, nodes=nodes,
                              waited_s=waited)

    @contextmanager
    def node_lost_objects(self, node_id: str, reason: str, owned: int) -> Iterator[None]:
        """The ``node.lost_objects`` span and ``node.dead_seen`` line, around what the
        owner does about the ``owned`` objects whose copy was on the dead node."""
        with span("node.lost_objects", {A.NODE_ID: node_id, A.NODE_DEATH_REASON: reason,
                                        A.OBJECT_COUNT: owned}):
            self._log.warning("node.dead_seen", node_id=node_id, reason=reason,
                              owned_objects=owned)
            yield

    @contextmanager
    def object_reconstruct(self, object_id: bytes, task_id: bytes, function: str,
                           attempt: int, cause: str) -> Iterator[None]:
        """The ``object.reconstruct`` span and line, around resubmitting the task that
        makes the lost object."""
        object_hex, task_hex = object_id.hex(), task_id.hex()
        with span("object.reconstruct", {
                A.OBJECT_ID: object_hex, A.TASK_ID: task_hex, A.TASK_FUNCTION: function,
                A.TASK_ATTEMPT: attempt, A.OBJECT_RECONSTRUCTION_CAUSE: cause}):
            self._log.warning("object.reconstruct", object_id=object_hex, task_id=task_hex,
                              function=function, attempt=attempt, cause=cause)
            yield
