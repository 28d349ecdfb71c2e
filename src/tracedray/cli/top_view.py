"""``tracedray top``'s frame: the cluster now, from the raylets' stats and the task table.

``build_frame`` is pure (node views, task rows and the clock in, a ``Frame`` out) and
``render`` turns a frame into Rich tables, so what a frame shows is unit-tested
without a cluster or a terminal.
"""

from __future__ import annotations

import collections
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tracedray.cli.cluster_client import NodeView

Row = dict[str, Any]
PENDING_STATES = ("PENDING_ARGS_AVAIL", "PENDING_NODE_ASSIGNMENT", "SUBMITTED_TO_WORKER",
                  "PENDING_ACTOR_TASK_ORDERING_OR_CONCURRENCY")
SORT_KEYS = ("longest", "running", "name")
RECENT_FAILURES = 8


@dataclass(frozen=True)
class Frame:
    nodes: list[Row]
    functions: list[Row]  # running tasks by function
    pending: dict[str, int]  # state -> count, of tasks not running yet
    infeasible: int  # lease requests no node can ever grant (from the raylets)
    failures: list[Row]  # the latest failed tasks
    notes: list[str] = field(default_factory=list)
    jobs: list[str] = field(default_factory=list)  # jobs with tasks, for the job filter
    node_ids: list[str] = field(default_factory=list)  # every node, for the node filter


class Action(Enum):
    NONE = "none"
    QUIT = "quit"
    STACK = "stack"  # show the selected function's longest-running task's stack
    TRACE = "trace"  # ... its story


@dataclass(frozen=True)
class TopState:
    """What the live view's keys chose: the order, the filters, the selected row."""

    sort: str = "longest"
    node: str | None = None
    job: str | None = None
    selected: int = 0  # a row of the running functions


KEYS_HELP = ("keys: s sort | n node | j job | 1-9 select | k stack | t trace | q quit")


def _next(current: str | None, choices: Sequence[str]) -> str | None:
    """The next filter value: none, then each choice in turn, then none again."""
    if not choices:
        return None
    if current not in choices:
        return choices[0]
    index = choices.index(current) + 1
    return choices[index] if index < len(choices) else None


def on_key(state: TopState, key: str, *, nodes: Sequence[str], jobs: Sequence[str],
           rows: int) -> tuple[TopState, Action]:
    """The live view's state machine: a key pressed in ``state`` (pure)."""
    if key in ("q", "\x03"):
        return state, Action.QUIT
    if key == "s":
        order = SORT_KEYS[(SORT_KEYS.index(state.sort) + 1) % len(SORT_KEYS)]
        return replace(state, sort=order, selected=0), Action.NONE
    if key == "n":
        return replace(state, node=_next(state.node, nodes), selected=0), Action.NONE
    if key == "j":
        return replace(state, job=_next(state.job, jobs), selected=0), Action.NONE
    if key.isdigit() and 1 <= int(key) <= rows:
        return replace(state, selected=int(key) - 1), Action.NONE
    if key in ("k", "\r", "\n") and rows:
        return state, Action.STACK
    if key == "t" and rows:
        return state, Action.TRACE
    return state, Action.NONE


def node_rows(views: Iterable[NodeView]) -> list[Row]:
    rows = []
    for view in views:
        info, stats = view.node.info, view.stats
        total_cpu = info.resources_total.get("CPU", 0.0)
        available = (stats.resources_available if stats else view.node.resources_available)
        workers = collections.Counter(w.state for w in stats.workers) if stats else {}
        rows.append({
            "node_id": info.node_id, "ip": info.raylet.ip, "is_head": info.is_head,
            "state": info.state, "error": view.error,
            "cpus_used": total_cpu - available.get("CPU", total_cpu), "cpus": total_cpu,
            "host_cpu_percent": stats.host_cpu_percent if stats else None,
            "host_memory_percent": stats.host_memory_percent if stats else None,
            "store_used": stats.store_used if stats else view.node.store_used,
            "store_capacity": (stats.store_capacity if stats else 0)
            or info.object_store_capacity,
            "workers": {k: v for k, v in sorted(workers.items()) if k != "DEAD"},
            "pending_leases": stats.pending_leases if stats else view.node.pending_leases,
            "infeasible_leases": (stats.infeasible_leases if stats
                                  else view.node.infeasible_leases)})
    return rows


def function_rows(tasks: Iterable[Row], sort: str = "longest") -> list[Row]:
    """Running tasks grouped by function: how many, the longest running time, how many
    were flagged slow, and the task that has run longest (to pass to ``stack --task``)."""
    groups: dict[str, Row] = {}
    for task in tasks:
        if task.get("state") != "RUNNING":
            continue
        name = task.get("name") or "(unknown)"
        group = groups.setdefault(name, {"function": name, "type": task.get("type", ""),
                                         "running": 0, "longest_s": 0.0, "slow": 0,
                                         "longest_task_id": ""})
        group["running"] += 1
        group["slow"] += 1 if task.get("slow") else 0
        running_for = task.get("running_for_s") or 0.0
        if running_for >= group["longest_s"]:
            group["longest_s"] = running_for
            group["longest_task_id"] = task.get("task_id", "")
    return sort_functions(list(groups.values()), sort)


def sort_functions(rows: list[Row], sort: str) -> list[Row]:
    if sort == "name":
        return sorted(rows, key=lambda r: r["function"])
    if sort == "running":
        return sorted(rows, key=lambda r: (-r["running"], r["function"]))
    return sorted(rows, key=lambda r: (-r["longest_s"], r["function"]))


def failure_rows(tasks: Iterable[Row], limit: int = RECENT_FAILURES) -> list[Row]:
    failed = [t for t in tasks if t.get("state") == "FAILED"]
    failed.sort(key=lambda t: t.get("_time", 0.0), reverse=True)
    return [{"task_id": t.get("task_id", ""), "function": t.get("name", ""),
             "error_type": t.get("error_type", ""),
             "error": (t.get("error_message") or "").splitlines()[0][:120]
             if t.get("error_message") else "", "node_id": t.get("node_id", "")}
            for t in failed[:limit]]


def build_frame(views: Sequence[NodeView], tasks: Sequence[Row], *, sort: str = "longest",
                node: str | None = None, job: str | None = None) -> Frame:
    """What one refresh of ``top`` shows (pure). ``node``/``job``: id prefixes to keep."""
    all_jobs = sorted({t["job_id"] for t in tasks if t.get("job_id")})
    node_ids = [v.node_id for v in views]
    if node:
        views = [v for v in views if v.node_id.startswith(node)]
        tasks = [t for t in tasks if (t.get("node_id") or "").startswith(node)
                 or t.get("state") != "RUNNING"]
    if job:
        tasks = [t for t in tasks if (t.get("job_id") or "").startswith(job)]
    nodes = node_rows(views)
    pending = collections.Counter(t["state"] for t in tasks if t.get("state") in PENDING_STATES)
    return Frame(nodes=nodes, functions=function_rows(tasks, sort),
                 pending=dict(sorted(pending.items())),
                 infeasible=sum(n["infeasible_leases"] or 0 for n in nodes),
                 failures=failure_rows(tasks), jobs=all_jobs, node_ids=node_ids)


def _percent(value: float | None) -> str:
    return "" if value is None else f"{value:.0f}%"


def render(frame: Frame, *, title: str = "", selected: int | None = None,
           footer: str = "") -> Any:
    """The frame as a Rich renderable (a group of tables); ``selected`` marks a row of
    the running functions (the live view's keys act on it)."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    from tracedray.cli.output import format_bytes

    nodes = Table(title="Nodes", title_justify="left", expand=False)
    for column in ("node", "ip", "CPUs used", "host CPU", "host mem", "store", "workers",
                   "queued", "infeasible"):
        nodes.add_column(column, overflow="fold")  # no hidden text
    for n in frame.nodes:
        name = n["node_id"][:12] + (" (head)" if n["is_head"] else "")
        if n["state"] != "ALIVE" or n["error"]:
            nodes.add_row(name, n["ip"], Text(n["error"] or n["state"], style="red"))
            continue
        store = f"{format_bytes(n['store_used'])} / {format_bytes(n['store_capacity'])}"
        workers = " ".join(f"{k.lower()}:{v}" for k, v in n["workers"].items()) or "-"
        nodes.add_row(name, n["ip"], f"{n['cpus_used']:g} / {n['cpus']:g}",
                      _percent(n["host_cpu_percent"]), _percent(n["host_memory_percent"]),
                      store, workers, str(n["pending_leases"]), str(n["infeasible_leases"]))
    running = Table(title="Running tasks by function", title_justify="left")
    for column in ("#", "function", "type", "running", "longest", "slow", "longest task"):
        running.add_column(column, overflow="fold")  # no hidden text
    for index, f in enumerate(frame.functions):
        running.add_row(str(index + 1), f["function"], f["type"], str(f["running"]),
                        f"{f['longest_s']:.1f}s",
                        Text(str(f["slow"]), style="bold red") if f["slow"] else "0",
                        f["longest_task_id"], style="reverse" if index == selected else None)
    if not frame.functions:
        running.add_row("", "(no task is running)", "", "", "", "", "")
    pending = ", ".join(f"{k}: {v}" for k, v in frame.pending.items()) or "none"
    waiting = Text(f"Waiting to run: {pending}; infeasible lease requests: {frame.infeasible}",
                   style="yellow" if frame.infeasible else "")
    failures = Table(title="Recent failures", title_justify="left")
    for column in ("task", "function", "error type", "error", "node"):
        failures.add_column(column, overflow="fold")  # no hidden text
    for f in frame.failures:
        failures.add_row(f["task_id"][:16], f["function"], f["error_type"], f["error"],
                         f["node_id"][:12])
    if not frame.failures:
        failures.add_row("(none)", "", "", "", "")
    parts: list[Any] = [Text(title, style="bold")] if title else []
    parts += [nodes, running, waiting, failures]
    parts += [Text(note, style="yellow") for note in frame.notes]
    if footer:
        parts.append(Text(footer, style="dim"))
    return Group(*parts)
