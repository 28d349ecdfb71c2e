"""This process's threads and what they run, for ``tracedray stack`` and hung tasks.

The dump is made inside the process (``sys._current_frames()``), on the gRPC thread
that received the request: no root, no ptrace rights, no py-spy. A process whose
threads hold the GIL in native code cannot answer, which its raylet reports as "not
answering within the timeout" rather than waiting.

``LiveTask`` is what the task executor keeps about each task it runs (its spec, its
start, its thread, its ``task.execute`` span); the rest of this module turns those
and the interpreter's frames into a ``StackDump`` (pure, given the frames).
"""

from __future__ import annotations

import linecache
import os
import sys
import threading
import time
from collections.abc import Iterable, Mapping
from types import FrameType
from typing import TYPE_CHECKING, Any, NamedTuple

from tracedray import logs
from tracedray._proto.v1 import common_pb2, debug_pb2

if TYPE_CHECKING:
    from tracedray.core.worker.task_executor import TaskExecutor

log = logs.get_logger(__name__)

# A deep recursion's frames are cut to the innermost ones: what the thread does now.
MAX_FRAMES = 120
_KIND_NAMES = {common_pb2.NORMAL: "normal", common_pb2.ACTOR_CREATION: "actor_creation",
               common_pb2.ACTOR_METHOD: "actor_method"}


class LiveTask(NamedTuple):
    spec: common_pb2.TaskSpec
    started_at: float  # unix seconds
    thread_id: int
    span: Any  # its task.execute span, for a task.slow event


def running_task(live: LiveTask, actor_id: bytes = b"") -> debug_pb2.RunningTask:
    spec = live.spec
    trace_id = spec.trace_id
    return debug_pb2.RunningTask(
        task_id=spec.task_id.hex(), attempt=spec.attempt, function=spec.function_name,
        kind=_KIND_NAMES.get(spec.kind, "normal"), actor_id=(spec.actor_id or actor_id).hex(),
        started_at=live.started_at, trace_id=trace_id.hex() if len(trace_id) == 16 else "",
        thread_id=live.thread_id, job_id=spec.job_id.hex())


def frames_of(frame: FrameType | None, limit: int = MAX_FRAMES) -> list[debug_pb2.StackFrame]:
    """The frames from ``frame`` outwards, returned outermost first (as a traceback);
    at most ``limit``, the innermost ones."""
    stack: list[debug_pb2.StackFrame] = []
    while frame is not None and len(stack) < limit:
        code = frame.f_code
        lineno = frame.f_lineno or 0
        line = linecache.getline(code.co_filename, lineno, frame.f_globals).strip()
        stack.append(debug_pb2.StackFrame(filename=code.co_filename, lineno=lineno,
                                          function=code.co_name, line=line))
        frame = frame.f_back
    stack.reverse()
    return stack


def thread_stacks(frames: Mapping[int, FrameType], threads: Iterable[threading.Thread],
                  ) -> list[debug_pb2.ThreadStack]:
    """One entry per thread with a frame, named from ``threads`` (pure)."""
    by_id = {t.ident: t for t in threads if t.ident is not None}
    out = []
    for thread_id, frame in frames.items():
        thread = by_id.get(thread_id)
        out.append(debug_pb2.ThreadStack(
            thread_id=thread_id, name=thread.name if thread else f"thread-{thread_id}",
            daemon=bool(thread and thread.daemon), frames=frames_of(frame)))
    return out


def awaited_by(frame: FrameType | None) -> Any:
    """The coroutine an async actor's call waits for, if ``frame``'s stack is waiting in
    ``ActorEventLoop.run`` (async_actor.py); else None."""
    while frame is not None:
        code = frame.f_code
        if code.co_name == "run" and code.co_filename.endswith("async_actor.py"):
            return frame.f_locals.get("coroutine")
        frame = frame.f_back
    return None


def coroutine_frames(coroutine: Any, limit: int = MAX_FRAMES) -> list[debug_pb2.StackFrame]:
    """A suspended coroutine's frames down its ``await`` chain, outermost first: where
    an async call waits (the loop thread's own stack shows only the one running now)."""
    out: list[debug_pb2.StackFrame] = []
    while coroutine is not None and len(out) < limit:
        frame = (getattr(coroutine, "cr_frame", None) or getattr(coroutine, "gi_frame", None)
                 or getattr(coroutine, "ag_frame", None))
        if frame is None:
            break
        out.extend(frames_of(frame, 1))
        coroutine = (getattr(coroutine, "cr_await", None)
                     or getattr(coroutine, "gi_yieldfrom", None)
                     or getattr(coroutine, "ag_await", None))
    return out


def dump(*, worker_id: str, pid: int, component: str, job_id: bytes,
         live: Iterable[LiveTask], actor_id: bytes = b"", actor_instance: Any = None,
         skip_thread: int | None = None) -> debug_pb2.StackDump:
    """Every thread of this process but ``skip_thread`` (the one dumping), the
    threads running a task first."""
    tasks = [running_task(t, actor_id) for t in live]
    task_threads = {t.thread_id for t in tasks}
    frames = {k: v for k, v in sys._current_frames().items() if k != skip_thread}
    threads = thread_stacks(frames, threading.enumerate())
    threads.sort(key=lambda t: (t.thread_id not in task_threads, t.name))
    for index in range(len(threads) - 1, -1, -1):  # backwards: inserting shifts the rest
        thread = threads[index]
        coroutine = awaited_by(frames.get(thread.thread_id)) if (
            thread.thread_id in task_threads) else None
        if coroutine is not None:
            # Labelled with the same task (same thread id), right after its thread.
            threads.insert(index + 1, debug_pb2.ThreadStack(
                thread_id=thread.thread_id, name=f"{thread.name} (its coroutine)",
                daemon=thread.daemon, frames=coroutine_frames(coroutine)))
    return debug_pb2.StackDump(
        worker_id=worker_id, pid=pid, component=component, job_id=job_id.hex(),
        actor_id=actor_id.hex(),
        actor_class=type(actor_instance).__qualname__ if actor_instance is not None else "",
        dumped_at=time.time(), threads=threads, tasks=tasks)


def format_frames(frames: Iterable[debug_pb2.StackFrame]) -> str:
    """A traceback's text for a stack (as ``traceback.format_list``)."""
    parts = []
    for f in frames:
        parts.append(f'  File "{f.filename}", line {f.lineno}, in {f.function}\n')
        if f.line:
            parts.append(f"    {f.line}\n")
    return "".join(parts)


def thread_of(stack_dump: debug_pb2.StackDump, thread_id: int) -> debug_pb2.ThreadStack | None:
    return next((t for t in stack_dump.threads if t.thread_id == thread_id), None)


def summary(stack_dump: debug_pb2.StackDump, limit: int = 16_000) -> str:
    """The dump as text for a log line: each task's thread first, then the others'
    innermost frame; at most ``limit`` characters."""
    by_thread = {t.thread_id: t for t in stack_dump.tasks}
    parts = []
    for thread in stack_dump.threads:
        task = by_thread.get(thread.thread_id)
        if task is not None:
            parts.append(f"Thread {thread.name} running {task.function} "
                         f"(task {task.task_id}, attempt {task.attempt}):\n"
                         + format_frames(thread.frames))
        elif thread.frames:
            last = thread.frames[-1]
            parts.append(f"Thread {thread.name}: {last.function} "
                         f"({last.filename}:{last.lineno})\n")
    text = "".join(parts)
    return text if len(text) <= limit else text[:limit] + "..."


def dump_process(worker_id: str, component: str, job_id: bytes, executor: TaskExecutor | None,
                 request: debug_pb2.DumpStacksRequest | None = None) -> debug_pb2.StackDump:
    """This process's dump (the CoreWorkerService.DumpStacks answer), also logged as a
    ``worker.stack_dump`` line; with ``breakpoints_only``, just its waiting breakpoints."""
    from tracedray.core.worker import remote_debugger

    if request is not None and request.breakpoints_only:
        return debug_pb2.StackDump(worker_id=worker_id, pid=os.getpid(),
                                   component=component, dumped_at=time.time(),
                                   breakpoints=remote_debugger.waiting())
    result = dump(worker_id=worker_id, pid=os.getpid(), component=component,
                  job_id=job_id, live=list(executor.live.values()) if executor else [],
                  actor_id=executor.actor_id if executor else b"",
                  actor_instance=executor.actor_instance if executor else None,
                  skip_thread=threading.get_ident())
    result.breakpoints.extend(remote_debugger.waiting())
    log.info("worker.stack_dump", threads=len(result.threads),
             task_ids=[t.task_id for t in result.tasks],
             functions=[t.function for t in result.tasks], stacks=summary(result))
    return result
