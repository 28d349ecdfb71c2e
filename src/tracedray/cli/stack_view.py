"""``tracedray stack``'s model and text: the raylets' dumps as rows, filtered, rendered.

Pure functions of the ``NodeStackDumps`` the raylets returned (and what the GCS says
of each node): no I/O here, so the filters and the text are unit-tested.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from tracedray._proto.v1 import debug_pb2

Row = dict[str, Any]


@dataclass(frozen=True)
class NodeAnswer:
    node_id: str
    ip: str
    is_head: bool
    dumps: debug_pb2.NodeStackDumps | None
    error: str = ""  # why ``dumps`` is missing


def task_row(task: debug_pb2.RunningTask, now: float) -> Row:
    return {"task_id": task.task_id, "attempt": task.attempt, "function": task.function,
            "kind": task.kind, "actor_id": task.actor_id, "job_id": task.job_id,
            "running_for_s": round(max(now - task.started_at, 0.0), 3),
            "trace_id": task.trace_id, "thread_id": task.thread_id}


def process_row(process: debug_pb2.ProcessStackDump) -> Row:
    row: Row = {"worker_id": process.worker_id, "pid": process.pid,
                "component": process.component, "state": process.state,
                "error": process.error}
    if process.native_error:
        row["native_error"] = process.native_error
    if not process.HasField("dump"):
        row.update(actor_id=process.actor_id, actor_class="", job_id="", tasks=[], threads=[])
        return row
    dump = process.dump
    tasks = {t.thread_id: task_row(t, dump.dumped_at) for t in dump.tasks}
    row.update(actor_id=dump.actor_id or process.actor_id, actor_class=dump.actor_class,
               job_id=dump.job_id, tasks=list(tasks.values()))
    row["threads"] = [
        {"thread_id": t.thread_id, "name": t.name, "daemon": t.daemon,
         "task": tasks.get(t.thread_id),
         "frames": [{"filename": f.filename, "lineno": f.lineno, "function": f.function,
                     "line": f.line} for f in t.frames],
         **({"native_frames": list(t.native_frames)} if t.native_frames else {})}
        for t in dump.threads]
    return row


def node_rows(answers: Iterable[NodeAnswer]) -> list[Row]:
    rows = []
    for answer in answers:
        processes = ([process_row(p) for p in answer.dumps.processes]
                     if answer.dumps is not None else [])
        processes.sort(key=lambda p: (p["component"] != "driver", not p["tasks"], p["pid"]))
        rows.append({"node_id": answer.node_id, "ip": answer.ip, "is_head": answer.is_head,
                     "error": answer.error, "processes": processes})
    return rows


def only_task(rows: list[Row], task_id: str) -> list[Row]:
    """Just the thread running the task whose id starts with ``task_id`` (pure)."""
    prefix = task_id.lower()
    out = []
    for node in rows:
        processes = []
        for process in node["processes"]:
            threads = [t for t in process["threads"]
                       if t["task"] and t["task"]["task_id"].startswith(prefix)]
            if threads:
                tasks = [t["task"] for t in threads]
                processes.append({**process, "threads": threads, "tasks": tasks})
        if processes:
            out.append({**node, "processes": processes})
    return out


def only_actor(rows: list[Row], actor_id: str) -> list[Row]:
    """The process hosting the actor whose id starts with ``actor_id`` (pure)."""
    prefix = actor_id.lower()
    out = []
    for node in rows:
        processes = [p for p in node["processes"] if p["actor_id"]
                     and p["actor_id"].startswith(prefix)]
        if processes:
            out.append({**node, "processes": processes})
    return out


def unanswered(rows: list[Row]) -> list[str]:
    """Where the command could not look: nodes and processes that did not answer."""
    out = [f"node {n['node_id'][:12]} ({n['ip']}): {n['error']}" for n in rows if n["error"]]
    out += [f"pid {p['pid']} on node {n['node_id'][:12]}: {p['error']}"
            for n in rows for p in n["processes"] if p["error"]]
    return out


# Where the runtime's own frames live: the text view folds them (JSON keeps them all).
_RUNTIME_PARTS = ("/tracedray/", "/threading.py", "/grpc/", "/concurrent/futures/",
                  "/socket.py", "/selectors.py", "/queue.py", "/asyncio/", "<frozen runpy>")


def is_runtime_frame(frame: Row) -> bool:
    return any(part in frame["filename"] for part in _RUNTIME_PARTS)


def user_frames(frames: list[Row]) -> tuple[int, list[Row]]:
    """(how many leading runtime frames, the rest): a task's stack from its own code on."""
    for index, frame in enumerate(frames):
        if not is_runtime_frame(frame):
            return index, frames[index:]
    return 0, frames


def shown_in_text(thread: Row, all_threads: bool) -> bool:
    """A thread the text shows: one running a task, one in code other than the
    runtime's (a user's own thread), or any with ``all_threads``."""
    return (all_threads or thread["task"] is not None
            or not all(is_runtime_frame(f) for f in thread["frames"]))


def _task_label(task: Row) -> str:
    parts = [f"task {task['task_id']}", f"attempt {task['attempt']}"]
    if task["actor_id"]:
        parts.append(f"actor {task['actor_id']}")
    parts.append(f"running for {task['running_for_s']:.1f}s")
    if task["trace_id"]:
        parts.append(f"trace {task['trace_id']}")
    return f"{task['function']} ({', '.join(parts)})"


def _process_header(process: Row) -> str:
    if process["component"] == "driver":
        what = f"Driver pid {process['pid']}" + (f" (job {process['job_id']})"
                                                 if process["job_id"] else "")
    else:
        what = f"Worker pid {process['pid']} ({process['state']}"
        if process["actor_id"]:
            what += f", actor {process['actor_class'] or '?'} {process['actor_id']}"
        what += ")"
    return f"{what}  worker_id={process['worker_id']}"


def render(rows: list[Row], all_threads: bool = False) -> str:
    """The text ``tracedray stack`` prints: nodes, their processes, each thread's stack
    labelled with the task it runs. The runtime's idle threads, and the runtime's frames
    below a task's own code, are counted rather than shown unless ``all_threads``."""
    lines: list[str] = []
    for node in rows:
        head = ", head" if node["is_head"] else ""
        lines.append(f"=== Node {node['node_id']} ({node['ip']}{head})")
        if node["error"]:
            lines.append(f"  {node['error']}")
        for process in node["processes"]:
            lines.append("")
            lines.append(f"  {_process_header(process)}")
            if process["error"]:
                lines.append(f"    {process['error']}")
                continue
            if not process["tasks"] and process["component"] == "worker":
                lines.append("    running no task")
            for task in process["tasks"]:
                lines.append(f"    running {_task_label(task)}")
            if process.get("native_error"):
                lines.append(f"    (no native frames: {process['native_error']})")
            shown = [t for t in process["threads"] if shown_in_text(t, all_threads)]
            for thread in shown:
                task = thread["task"]
                label = f" -- running {task['function']} (task {task['task_id']})" if task else ""
                daemon = " daemon" if thread["daemon"] else ""
                lines.append(f"    Thread {thread['name']} ({thread['thread_id']}{daemon}){label}:")
                folded, frames = (0, thread["frames"]) if all_threads else user_frames(
                    thread["frames"])
                if folded:
                    lines.append(f"      ... {folded} frames of the runtime")
                for frame in frames:
                    lines.append(f'      File "{frame["filename"]}", line {frame["lineno"]}, '
                                 f'in {frame["function"]}')
                    if frame["line"]:
                        lines.append(f"        {frame['line']}")
                for native in thread.get("native_frames", []):
                    lines.append(f"      [native] {native}")
            hidden = len(process["threads"]) - len(shown)
            if hidden:
                lines.append(f"    ({hidden} threads of the runtime, idle: --all-threads "
                             "shows them)")
        lines.append("")
    return "\n".join(lines)
