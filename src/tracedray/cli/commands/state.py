"""``tracedray list``, ``get`` and ``summary``: the state API on the command line.

Rows come from ``tracedray.util.state`` (GCS tables + every alive raylet's stats).
A limit never truncates silently, and an unknown id suggests the closest known ids.
"""

from __future__ import annotations

from enum import Enum
from typing import Any

import typer

from tracedray.cli.output import (
    ADDRESS_HELP,
    SESSION_HELP,
    OutputFormat,
    format_option,
)
from tracedray.cli.progress import working


class ListKind(str, Enum):
    tasks = "tasks"
    actors = "actors"
    objects = "objects"
    nodes = "nodes"
    workers = "workers"
    jobs = "jobs"


class GetKind(str, Enum):
    task = "task"
    actor = "actor"
    object = "object"
    node = "node"
    worker = "worker"
    job = "job"


def _get_kind(value: str | GetKind) -> GetKind:
    """A `get` kind; Ray's plural (`get tasks ID`) is accepted too."""
    if isinstance(value, GetKind):
        return value
    text = value.strip().lower()
    try:
        return GetKind(text.removesuffix("s") if text in ListKind.__members__ else text)
    except ValueError:
        raise typer.BadParameter(f"{value!r}: choose one of "
                                 f"{', '.join(k.value for k in GetKind)}") from None


class SummaryKind(str, Enum):
    tasks = "tasks"
    actors = "actors"
    objects = "objects"


# Columns without --detail: enough to find the row, short enough to fit a terminal.
SHORT_COLUMNS: dict[str, tuple[str, ...]] = {
    "tasks": ("task_id", "name", "state", "attempt_number", "type", "node_id", "worker_pid",
              "error_type", "running_for_s", "slow"),
    "actors": ("actor_id", "class_name", "state", "name", "pid", "node_id", "num_restarts"),
    "objects": ("object_ref", "size", "reference_type", "type", "pid", "ip", "call_site",
                "status"),
    "nodes": ("node_id", "ip", "state", "is_head", "resources", "pid", "death_reason"),
    "workers": ("worker_id", "pid", "state", "node_id", "actor_id", "exit_code", "exit_signal"),
    "jobs": ("job_id", "state", "entrypoint", "driver_pid", "start_time", "end_time",
             "end_reason"),
}
# get KIND -> (list kind, id field)
_GET_SOURCE = {"task": ("tasks", "task_id"), "actor": ("actors", "actor_id"),
               "object": ("objects", "object_ref"), "node": ("nodes", "node_id"),
               "worker": ("workers", "worker_id"), "job": ("jobs", "job_id")}


def _fields(kind: str) -> tuple[str, ...]:
    from tracedray.core.protocol import state_rows as rows

    return {"tasks": rows.TASK_FIELDS, "actors": rows.ACTOR_FIELDS,
            "objects": rows.MEMORY_FIELDS, "nodes": rows.NODE_FIELDS,
            "workers": rows.WORKER_FIELDS, "jobs": rows.JOB_FIELDS}[kind]


def _lister(kind: str) -> Any:
    from tracedray.util import state

    return getattr(state, f"list_{kind}")


def _source(address: str | None, session: str | None) -> Any:
    """The running cluster, or its session's files when it stopped (header on stderr)."""
    from tracedray.cli import postmortem

    client = postmortem.open_client(address, session)
    postmortem.announce(client)
    return client


def list_command(
    kind: ListKind = typer.Argument(..., help="What to list."),
    filters: list[str] = typer.Option(
        [], "--filter", "-f",
        help="key=value or key!=value on a row field (repeatable; all must match)."),
    limit: int = typer.Option(100, "--limit", help="Most rows to show (0: all). "
                                                   "Rows left out are counted on stderr."),
    detail: bool = typer.Option(False, "--detail", help="Every field (and task state events)."),
    address: str | None = typer.Option(None, "--address", help=ADDRESS_HELP),
    output_format: OutputFormat = format_option(),
    session: str | None = typer.Option(None, "--session", help=SESSION_HELP),
) -> None:
    """List tasks, actors, objects, nodes, workers or jobs of the running cluster."""
    from tracedray.cli.output import columns_for, fail, print_rows
    from tracedray.exceptions import RayError

    try:
        with working(f"asking the cluster for its {kind.value}",
                     json_output=output_format.structured):
            found = _lister(kind.value)(address=_source(address, session), filters=filters,
                                        limit=limit or None, detail=detail)
    except RayError as exc:
        raise fail(str(exc)) from exc
    columns = columns_for(found, _fields(kind.value)) if detail else SHORT_COLUMNS[kind.value]
    print_rows(found, columns, output_format, title=f"{kind.value} ({found.total} in all)",
               total=found.total, what=kind.value)


def _resolve_id(wanted: str, known: list[str], what: str) -> str:
    """Exact id, or a unique prefix (as git does); otherwise an error with close matches."""
    from tracedray.cli.output import fail
    from tracedray.cli.tracestore.story import close_matches, unique_prefix

    query = wanted.strip().lower()
    if query in known:
        return query
    whole = unique_prefix(query, known)
    if whole is not None:
        return whole
    suggestions = close_matches(query, known)
    hint = f"; did you mean {', '.join(suggestions)}?" if suggestions else \
        f" (the cluster knows {len(set(known))} {what} ids)"
    raise fail(f"no {what} with id {wanted}{hint}")


def get_command(
    kind: GetKind = typer.Argument(
        ..., parser=_get_kind, metavar="KIND",
        help="task, actor, object, node, worker or job (Ray's plurals too: tasks, ...)."),
    item_id: str = typer.Argument(..., metavar="ID", help="Its id (hex); a unique prefix works."),
    address: str | None = typer.Option(None, "--address", help=ADDRESS_HELP),
    output_format: OutputFormat = format_option(),
    session: str | None = typer.Option(None, "--session", help=SESSION_HELP),
) -> None:
    """Every field of one task, actor, object (each holder), node, worker or job."""
    from tracedray.cli.output import fail, format_cell, print_data, stdout_console
    from tracedray.exceptions import RayError

    list_kind, key = _GET_SOURCE[kind.value]
    try:
        with working(f"asking the cluster for {kind.value} {item_id}",
                     json_output=output_format.structured):
            if kind is GetKind.task:  # asked of the GCS by prefix: never every task
                found = _task_candidates(_source(address, session), item_id)
            else:
                found = _lister(list_kind)(address=_source(address, session), limit=None,
                                           detail=True)
    except RayError as exc:
        raise fail(str(exc)) from exc
    resolved = _resolve_id(item_id, [str(row[key]) for row in found], kind.value)
    matches = [row for row in found if row[key] == resolved]
    if output_format.structured:
        print_data(matches if kind is GetKind.object else matches[0], output_format)
        return
    from rich.table import Table

    console = stdout_console()
    for row in matches:
        table = Table(show_header=False, title=f"{kind.value} {resolved}", title_justify="left")
        table.add_column("field", style="bold")
        table.add_column("value", overflow="fold")
        for field, value in row.items():
            if field == "events":
                value = "\n".join(_event_line(e) for e in value)
            table.add_row(field, value if isinstance(value, str) else format_cell(field, value))
        console.print(table)


def _task_candidates(source: Any, item_id: str) -> list[dict[str, Any]]:
    """The tasks ``item_id`` may mean: those it is a prefix of, or, when none, those
    sharing its first characters (for suggestions)."""
    from tracedray.util.state import tasks_with_prefix

    wanted = item_id.strip().lower()
    found = tasks_with_prefix(wanted, address=source)
    if not found:
        found = tasks_with_prefix(wanted[:max(4, len(wanted) // 2)], address=source, limit=50)
    return list(found)


def _event_line(event: dict[str, Any]) -> str:
    """E.g. ``… RUNNING (attempt 0, node 1a2b3c4d5e6f, pid 4242)``; an event the GCS
    recorded (a job's end failing the task) has no node or pid, and says its error."""
    from tracedray.cli.output import format_cell

    where = [f"attempt {event['attempt']}"]
    if event.get("node_id"):
        where.append(f"node {event['node_id'][:12]}")
    if event.get("worker_pid"):
        where.append(f"pid {event['worker_pid']}")
    error = f" {event['error_type']}" if event.get("error_type") else ""
    return (f"{format_cell('event_time', event['time'])} {event['state']} "
            f"({', '.join(where)}){error}")


def summary_command(
    kind: SummaryKind = typer.Argument(..., help="What to summarize."),
    address: str | None = typer.Option(None, "--address", help=ADDRESS_HELP),
    output_format: OutputFormat = format_option(),
    session: str | None = typer.Option(None, "--session", help=SESSION_HELP),
) -> None:
    """Tasks by function with counts per state; actors by class; objects by call site."""
    from tracedray.cli.output import fail, format_bytes, print_rows
    from tracedray.exceptions import RayError
    from tracedray.util import state

    try:
        with working(f"summarizing the cluster's {kind.value}",
                     json_output=output_format.structured):
            summary = getattr(state, f"summarize_{kind.value}")(
                address=_source(address, session))
    except RayError as exc:
        raise fail(str(exc)) from exc
    columns = {"tasks": ("func_or_class_name", "type", "total", "state_counts",
                         "error_type_counts"),
               "actors": ("class_name", "total", "state_counts"),
               "objects": ("call_site", "objects", "references", "total_size",
                           "reference_types")}[kind.value]
    print_rows(summary, columns, output_format, title=f"{kind.value} summary",
               what=f"{kind.value}", formatters={"total_size": format_bytes})


def register(app: typer.Typer) -> None:
    app.command("list")(list_command)
    app.command("get")(get_command)
    app.command("summary")(summary_command)
