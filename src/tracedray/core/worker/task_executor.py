"""Running pushed tasks inside a worker process (normal tasks and actor methods).

Normal workers run one task at a time in arrival order. An actor runs its calls
one at a time in submission order per caller, or on a thread pool when
``max_concurrency > 1``; an async actor's coroutines run on its event loop
(async_actor.py). A task that blocks in ``get`` hands the tasks queued
behind it back to their caller (they might be what it is waiting for).
"""

from __future__ import annotations

import asyncio
import collections
import contextvars
import ctypes
import inspect
import os
import threading
import time
import traceback
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NoReturn, Protocol

from tracedray import logs, telemetry
from tracedray._proto.v1 import common_pb2
from tracedray.core import code_source, trace_context
from tracedray.core.ids import object_id_for
from tracedray.core.process import exit_now
from tracedray.core.serialization import serialize
from tracedray.core.worker import remote_debugger
from tracedray.core.worker.async_actor import ActorEventLoop, actor_concurrency, is_async_actor
from tracedray.core.worker.creation_once import CreationOnce
from tracedray.core.worker.pending_task import error_value
from tracedray.core.worker.slow_tasks import FunctionDurations
from tracedray.core.worker.stack_dump import LiveTask
from tracedray.exceptions import ActorDiedError, RayError, RayTaskError, TaskCancelledError
from tracedray.telemetry import instruments

if TYPE_CHECKING:
    from tracedray.core.address import Address
    from tracedray.core.functions import FunctionManager
    from tracedray.core.protocol.flight_recorder import FlightRecorder
    from tracedray.core.worker.blocking import BlockedState
    from tracedray.core.worker.object_io import ObjectIO
    from tracedray.core.worker.output_echo import OutputEcho
    from tracedray.core.worker.ownership import Ownership
    from tracedray.core.worker.task_events import TaskEventBuffer

log = logs.get_logger(__name__)
Respond = Callable[[common_pb2.TaskResult], None]
MAX_EARLY_CANCELS = 10_000


class TaskInterrupt(KeyboardInterrupt):
    """What a cooperative ``cancel`` raises inside a running task.

    A KeyboardInterrupt, as Ray raises, rather than an Exception: the ``except
    Exception`` of user code, of libraries and of telemetry's own guards ("never break
    the caller") would otherwise swallow the cancel and let the task run on. The
    caller's ``get`` raises TaskCancelledError, as in Ray.
    """


_KIND_NAMES = {common_pb2.NORMAL: "normal", common_pb2.ACTOR_CREATION: "actor_creation",
               common_pb2.ACTOR_METHOD: "actor_method"}


@dataclass(frozen=True)
class ExecutorStatistics:
    queued: int
    running: int
    executed_total: int
    failed_total: int
    requeued_total: int


class ExecutorHost(Protocol):
    """What the executor asks of the process it runs in."""

    current_task: common_pb2.TaskSpec | None  # the task running now (its job, its name)

    def became_actor(self, spec: common_pb2.TaskSpec) -> None:
        ...

    def exit_soon(self, reason: str, code: int = 0) -> None:
        ...

    def exit_actor_soon(self, actor_id: bytes, cause: str) -> None:
        ...


class TaskExecutor:
    def __init__(self, host: ExecutorHost, address: Address, *, functions: FunctionManager,
                 objects: ObjectIO, ownership: Ownership, task_events: TaskEventBuffer,
                 output: OutputEcho, flight_recorder: FlightRecorder, blocking: BlockedState,
                 drain_submissions: Callable[[], None]) -> None:
        self._host = host
        self._worker_id, self._node_id = address.worker_id, address.node_id
        self._ip, self._pid = address.ip, address.pid
        self._functions = functions
        self._objects = objects
        self._ownership = ownership  # the returns' captured refs, registered before replies
        self._task_events = task_events
        self._output = output
        self._flight_recorder = flight_recorder
        self._blocking = blocking
        self._drain_submissions = drain_submissions
        self._queue: collections.deque[tuple[common_pb2.TaskSpec, Respond]] = collections.deque()
        self._cond = threading.Condition()
        self._pool: ThreadPoolExecutor | None = None
        self._event_loop: ActorEventLoop | None = None  # an async actor's (async_actor.py)
        self._exit_cause = ""  # set once the actor asked to exit (exit_actor())
        self.actor_instance: Any = None
        self.actor_id: bytes = b""
        self._running: dict[bytes, int] = {}  # task id -> thread ident
        # What runs now and how long each function took, for stack dumps and slow tasks.
        self.live: dict[bytes, LiveTask] = {}
        self.durations = FunctionDurations()
        self._interrupted: set[bytes] = set()  # running tasks a TaskInterrupt was sent to
        self._cancelled_early: set[bytes] = set()
        self._actor_lock = threading.Lock()  # a single-threaded actor runs one call at a time
        self._creation = CreationOnce()
        self._executed = self._failed = self._requeued = 0
        self._thread = threading.Thread(target=self._loop, daemon=True, name="tracedray-executor")
        self._thread.start()

    # --- intake
    def push(self, spec: common_pb2.TaskSpec, respond: Respond) -> None:
        if spec.submitted_at or spec.dispatched_at:
            # Its caller left these states to us (an actor call's first, a normal task's
            # first and dispatch: task_events.py): they go out in the event that carries
            # the task's RUNNING and FINISHED.
            self._task_events.record_left_by_caller(spec, spec.attempt, self._node_id,
                                                    self._worker_id, self._pid)
        if (spec.kind == common_pb2.ACTOR_CREATION
                and not self._creation.admit(spec.task_id, respond)):
            return  # pushed again by a restarted GCS: __init__ runs once (creation_once)
        is_method = spec.kind == common_pb2.ACTOR_METHOD
        with self._cond:  # the same lock as cancel(): a cancel is never missed in between
            cancelled = spec.task_id in self._cancelled_early
            if cancelled:
                self._cancelled_early.discard(spec.task_id)
            elif not is_method:
                self._queue.append((spec, respond))
                self._cond.notify()
                return
        if cancelled:
            respond(_cancelled_result(spec))
        elif self._pool is not None:
            self._pool.submit(self._run_and_respond, spec, respond)
        else:
            # One call at a time, on the caller's stream reader thread: one thread handoff
            # less per actor call than queueing; per-caller order is the stream's order.
            with self._actor_lock:
                self._run_and_respond(spec, respond)

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._queue:
                    self._cond.wait()
                spec, respond = self._queue.popleft()
            # Each normal task in a copy of this thread's context: what it leaves set
            # there (a cancel's interrupt between a ContextVar's set and its reset: the
            # current span, the log lines' task fields) goes with it, not into the next.
            contextvars.copy_context().run(self._run_and_respond, spec, respond)

    def on_blocked(self) -> None:
        """The running task waits in get(): give unstarted normal tasks back to their callers."""
        self._hand_back(lambda spec: spec.kind == common_pb2.NORMAL)

    def requeue(self, task_id: bytes) -> bool:
        """Hand one unstarted normal task back to its caller (it found an idle worker)."""
        return self._hand_back(lambda spec: spec.task_id == task_id and
                               spec.kind == common_pb2.NORMAL) > 0

    def _hand_back(self, chosen: Callable[[common_pb2.TaskSpec], bool]) -> int:
        with self._cond:
            keep: collections.deque[tuple[common_pb2.TaskSpec, Respond]] = collections.deque()
            handed_back: list[tuple[common_pb2.TaskSpec, Respond]] = []
            for spec, respond in self._queue:
                (handed_back if chosen(spec) else keep).append((spec, respond))
            self._queue = keep
        for spec, respond in handed_back:
            self._requeued += 1
            respond(common_pb2.TaskResult(task_id=spec.task_id, attempt=spec.attempt,
                                          requeued=True))
        return len(handed_back)

    # --- execution
    def _run_and_respond(self, spec: common_pb2.TaskSpec, respond: Respond) -> None:
        try:
            if self._exit_cause:  # the actor is leaving: what came after that fails
                result = _error_result(spec, ActorDiedError(self._exit_cause,
                                                            self.actor_id.hex()))
            else:
                result = self.run(spec)
        except TaskInterrupt:  # a cancel delivered while run() handled another error
            result = _cancelled_result(spec)
        except BaseException as exc:  # noqa: BLE001 - a bug here must still answer the caller
            log.error("task.executor_bug", task_id=spec.task_id.hex(), error=repr(exc))
            result = _error_result(spec, exc)
        # Borrowers are registered before the caller hears.
        self._ownership.flush_reference_updates()
        self._output.flush()  # what the task printed reaches the driver before its result
        if spec.kind == common_pb2.ACTOR_CREATION:
            self._creation.ended(spec.task_id, result)
        respond(result)
        if self._exit_cause:
            self._host.exit_actor_soon(self.actor_id, self._exit_cause)

    def run(self, spec: common_pb2.TaskSpec) -> common_pb2.TaskResult:
        task_hex = spec.task_id.hex()
        name = spec.function_name
        result = common_pb2.TaskResult(task_id=spec.task_id, attempt=spec.attempt,
                                       worker_id=self._worker_id, worker_pid=self._pid,
                                       node_id=self._node_id)
        actor_hex = (spec.actor_id or self.actor_id).hex()
        kind = _KIND_NAMES.get(spec.kind, "normal")
        shape = instruments.execution_shape(name, kind, self._node_id, self._worker_id,
                                            actor_hex)
        span, parent_fields = trace_context.start_child(spec, shape, (spec.task_id, spec.attempt))
        # The raylet reads this slot if the process dies mid-task: the parent's trace
        # fields there, so it needs no spec to attach worker.exit to the task's trace.
        started = time.time()
        self._flight_recorder.record({"task_id": task_hex, "attempt": spec.attempt,
                                       "function": name, "trace": parent_fields,
                                       "started_at": started})
        try:
            # First in the ``try``: from here a cancel may interrupt the task, and the
            # ``finally`` ends that (_stop_interrupts).
            self._running[spec.task_id] = thread_id = threading.get_ident()
            self.live[spec.task_id] = LiveTask(spec, started, thread_id, span)
            self._task_events.record(spec, "RUNNING", node_id=self._node_id,
                                      worker_id=self._worker_id, worker_pid=self._pid,
                                      at=started)
            # The span is current while the task runs: attach/detach rather than
            # ``with telemetry.activate(span)``, whose object and two methods cost ~4k
            # instructions a task.
            token = telemetry.attach_span(span)
            try:
                # As ``with logs.task_context(...)``, without a generator's ~1.8 µs a call.
                context = logs.enter_task_context(
                    job_id=spec.job_id.hex(), task_id=task_hex, actor_id=actor_hex,
                    worker_id=self._worker_id, task_name=name, attempt=spec.attempt)
                try:
                    self._host.current_task = spec
                    # The line ``log.info("task.execute", ...)`` writes, byte for byte,
                    # without structlog's chain (a fifth of an actor call's CPU).
                    line_task = logs.info_context()
                    if line_task is not None:
                        logs.write_info_at(__name__, "task.execute", time.time(), line_task,
                                           logs.current_trace_ids(), function=name,
                                           attempt=spec.attempt)
                    values = self._execute(spec)
                finally:
                    logs.exit_task_context(context)
            finally:
                telemetry.detach_span(token)
            # The returns are the caller's: they go when it exits or dies, not with us.
            owner = spec.caller if spec.HasField("caller") else None
            result.returns.extend(
                self._objects.to_value(oid, serialize(value, what=f"return value of {name}"),
                                        call_site=spec.call_site, owner=owner)
                for oid, value in zip(_return_ids(spec), values, strict=True))
            self._register_captured(result)
            self._executed += 1
            # The result carries what the record says, for its caller to record should we
            # die before our flusher sends it (executor_reports.py).
            result.started_at, result.finished_at = started, time.time()
            result.report_seq = self._task_events.record(
                spec, "FINISHED", node_id=self._node_id, worker_id=self._worker_id,
                worker_pid=self._pid, at=result.finished_at)
        except BaseException as exc:  # noqa: BLE001 - user code may raise anything
            self._failed += 1
            if isinstance(exc, ActorExit) and self.actor_instance is not None:
                exc = self._begin_actor_exit(spec, exc)
            elif isinstance(exc, SystemExit):
                self._exit_process(spec, span, exc)  # as in Ray: the process exits
            if remote_debugger.post_mortem_enabled() and not isinstance(
                    exc, KeyboardInterrupt | SystemExit):
                remote_debugger.post_mortem(exc)  # waits for `tracedray debug` to detach
            if isinstance(exc, KeyboardInterrupt):  # a cancel, or the task's own: as Ray
                exc = TaskCancelledError(task_hex)
            cancelled = isinstance(exc, TaskCancelledError)
            error = exc if cancelled else self._task_error(spec, exc)
            telemetry.record_error(span, exc, getattr(error, "traceback_str", None))
            with telemetry.activate(span), logs.task_context(
                    job_id=spec.job_id.hex(), task_id=task_hex, actor_id=actor_hex,
                    worker_id=self._worker_id, task_name=name, attempt=spec.attempt):
                log.warning("task.failed", function=name, error_type=type(exc).__qualname__,
                            error=str(exc)[:2000],
                            traceback=_tail(getattr(error, "traceback_str", ""), 8000))
            result.is_application_error = True
            result.cancelled = cancelled
            result.retryable_error = spec.retry_exceptions and not cancelled
            result.ClearField("returns")
            result.returns.extend(error_value(oid, error) for oid in _return_ids(spec))
            result.started_at, result.finished_at = started, time.time()
            result.error_type, result.error_message = type(exc).__qualname__, str(exc)[:2000]
            result.report_seq = self._task_events.record(
                spec, "FAILED", node_id=self._node_id, worker_id=self._worker_id,
                worker_pid=self._pid, error_type=result.error_type,
                error_message=result.error_message, at=result.finished_at)
        finally:
            try:
                interrupted = self._stop_interrupts(spec.task_id)
            except TaskInterrupt:  # sent as the task ended, delivered here: it is over
                self._stop_interrupts(spec.task_id)
                interrupted = True
            if interrupted:  # it may have landed in get()'s bookkeeping
                self._blocking.settle()
            self._host.current_task = None
            self._flight_recorder.clear()
            self.live.pop(spec.task_id, None)
            self.durations.observe(name, time.time() - started)
            span.end()
        result.reported_through = self._task_events.delivered_through
        return result

    def _begin_actor_exit(self, spec: common_pb2.TaskSpec, exc: ActorExit) -> ActorDiedError:
        """``exit_actor()`` (or ``__ray_terminate__``): the actor ends for good, after this
        call's answer is out; the call itself, and every call after it, fails with
        ``ActorDiedError``, as in Ray."""
        cause = (f"the actor exited by calling {exc.how} in "
                 f"{spec.function_name}" if exc.how == "exit_actor()" else
                 "the actor was terminated with __ray_terminate__")
        self._exit_cause = cause
        log.info("actor.exit_requested", actor_id=self.actor_id.hex(), how=exc.how,
                 task_id=spec.task_id.hex())
        return ActorDiedError(cause, self.actor_id.hex())

    def _exit_process(self, spec: common_pb2.TaskSpec, span: Any, exc: SystemExit) -> NoReturn:
        """``sys.exit()`` in a task or actor method ends the worker, as in Ray: its caller
        sees the worker die (``WorkerCrashedError``, retried under ``max_retries``; an
        actor restarts within ``max_restarts``). The flight recorder still names the task,
        so the raylet attributes the exit to it."""
        code = exit_code(exc)
        log.warning("task.system_exit", task_id=spec.task_id.hex(), function=spec.function_name,
                    attempt=spec.attempt, exit_code=code)
        telemetry.record_error(span, exc)
        span.end()
        self._drain_submissions()  # what it submitted before the exit is recorded, as sent
        exit_now(code)

    def _stop_interrupts(self, task_id: bytes) -> bool:
        """The task is over: no cancel may interrupt this thread for it from now on,
        and one sent but not yet delivered is withdrawn (it would land in the next
        task, or end the executor's loop). Returns whether one was sent."""
        with self._cond:
            self._running.pop(task_id, None)
            if task_id not in self._interrupted:
                return False
            self._interrupted.discard(task_id)
            ctypes.pythonapi.PyThreadState_SetAsyncExc(
                ctypes.c_ulong(threading.get_ident()), None)
            return True

    def _execute(self, spec: common_pb2.TaskSpec) -> list[Any]:
        target: Any = self._functions.load(spec.function_id) if spec.function_id else None
        values = [self._objects.load(arg.value) for arg in spec.args]
        n_kwargs = len(spec.kwarg_names)
        args = values[: len(values) - n_kwargs]
        kwargs = dict(zip(spec.kwarg_names, values[len(values) - n_kwargs:], strict=True))
        if spec.kind == common_pb2.ACTOR_CREATION:
            self.actor_id = spec.actor_id
            is_async = is_async_actor(target)
            if is_async:
                self._event_loop = ActorEventLoop()
            concurrency = actor_concurrency(spec.actor_options.max_concurrency, is_async)
            if concurrency > 1:
                self._pool = ThreadPoolExecutor(concurrency, thread_name_prefix="tracedray-actor")
            self.actor_instance = target(*args, **kwargs)
            self._host.became_actor(spec)
            return [None] * max(spec.num_returns, 1)
        if spec.kind == common_pb2.ACTOR_METHOD:
            if self.actor_instance is None:
                raise RayError("this worker hosts no actor (creation failed?)")
            if spec.method_name == "__ray_terminate__":
                raise ActorExit("__ray_terminate__")
            builtin = BUILTIN_ACTOR_METHODS.get(spec.method_name)
            if builtin is not None:
                output = builtin(self.actor_instance, *args, **kwargs)
            else:
                output = getattr(self.actor_instance, spec.method_name)(*args, **kwargs)
            if inspect.iscoroutine(output):
                loop = self._event_loop
                output = loop.run(output) if loop is not None else asyncio.run(output)
        else:
            output = target(*args, **kwargs)
        if spec.num_returns <= 1:
            return [output if spec.num_returns == 1 else None]
        outputs = list(output)
        if len(outputs) != spec.num_returns:
            raise ValueError(f"{spec.function_name} declared num_returns={spec.num_returns} "
                             f"but returned {len(outputs)} values")
        return outputs

    def _task_error(self, spec: common_pb2.TaskSpec, exc: BaseException) -> RayTaskError:
        if isinstance(exc, RayTaskError):
            return exc  # a nested task's error passes through unchanged
        code_source.ensure_known()  # the source lines of code pickled by value
        frames = traceback.format_exception(type(exc), exc, exc.__traceback__)
        # Drop the executor's own frames: the user's code is what matters.
        user_frames = [f for f in frames if "tracedray/core/" not in f]
        tb = "".join(user_frames)
        return RayTaskError(spec.function_name, tb, exc, os.getpid(), self._ip, self._node_id,
                            spec.task_id.hex())

    def _register_captured(self, result: common_pb2.TaskResult) -> None:
        for value in result.returns:
            for inner in value.contained_refs:
                self._ownership.add_captured(inner, value.object_id)

    def cancel(self, task_id: bytes, force: bool) -> bool:
        with self._cond:
            for item in list(self._queue):
                if item[0].task_id == task_id:
                    self._queue.remove(item)
                    spec, respond = item
                    respond(_cancelled_result(spec))
                    return True
            thread_ident = self._running.get(task_id)
            if thread_ident is None:
                # The cancel overtook the task on the wire: refuse it when it arrives.
                if len(self._cancelled_early) < MAX_EARLY_CANCELS:
                    self._cancelled_early.add(task_id)
                return False
            if not force:
                # Only the executor's thread, which runs normal tasks, is interrupted (as
                # in Ray, a running actor call is not), once per task, and under the lock
                # the task's end takes: never after its end (see _stop_interrupts).
                if thread_ident != self._thread.ident:
                    return False
                if task_id not in self._interrupted:
                    self._interrupted.add(task_id)
                    ctypes.pythonapi.PyThreadState_SetAsyncExc(
                        ctypes.c_ulong(thread_ident), ctypes.py_object(TaskInterrupt))
                return True
        self._host.exit_soon("force-cancelled", code=1)
        return True

    def statistics(self) -> ExecutorStatistics:
        return ExecutorStatistics(len(self._queue), len(self._running), self._executed,
                                  self._failed, self._requeued)


def _ray_call(instance: Any, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    return fn(instance, *args, **kwargs)


# Methods every actor has, as in Ray: ``__ray_ready__`` resolves once the actor is
# constructed; ``__ray_call__(fn, *args)`` runs ``fn(instance, *args)`` in the actor.
BUILTIN_ACTOR_METHODS: dict[str, Callable[..., Any]] = {
    "__ray_ready__": lambda instance: True,
    "__ray_call__": _ray_call,
}


class ActorExit(SystemExit):
    """Raised by ``exit_actor()``: ends the actor for good once the call has answered."""

    def __init__(self, how: str = "exit_actor()") -> None:
        super().__init__(0)
        self.how = how


def exit_code(exc: SystemExit) -> int:
    """The process exit status ``sys.exit(code)`` asks for, as Python computes it."""
    if exc.code is None:
        return 0
    return exc.code if isinstance(exc.code, int) else 1


def _tail(text: str, limit: int) -> str:
    """The end of ``text`` (where a traceback names the failing line), at most ``limit``
    characters."""
    return text if len(text) <= limit else "..." + text[-limit:]


def _error_result(spec: common_pb2.TaskSpec, exc: BaseException) -> common_pb2.TaskResult:
    result = common_pb2.TaskResult(task_id=spec.task_id, attempt=spec.attempt,
                                   is_application_error=True)
    result.returns.extend(error_value(object_id, exc) for object_id in _return_ids(spec))
    return result


def _cancelled_result(spec: common_pb2.TaskSpec) -> common_pb2.TaskResult:
    result = common_pb2.TaskResult(task_id=spec.task_id, attempt=spec.attempt,
                                   is_application_error=True, cancelled=True)
    result.returns.extend(error_value(oid, TaskCancelledError(spec.task_id.hex()))
                          for oid in _return_ids(spec))
    return result


def _return_ids(spec: common_pb2.TaskSpec) -> list[bytes]:
    # Imported at module level: an import statement here cost ~1 µs a task.
    task_id, count = spec.task_id, spec.num_returns
    if count <= 1:
        return [object_id_for(task_id, 1)]
    return [object_id_for(task_id, i + 1) for i in range(count)]
