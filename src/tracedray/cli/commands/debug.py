"""``tracedray debug``: list the ``breakpoint()``s waiting in remote tasks, attach to one.

The breakpoints are found as ``stack`` finds stacks: every raylet asks its workers at
once (``breakpoints_only``). Attaching connects to the worker's pdb socket, sends the
breakpoint's token, and relays this terminal to it; ``continue`` (or ``quit``, or
Ctrl-D) detaches and the task goes on.
"""

from __future__ import annotations

import os
import select
import socket
import sys
import time
from typing import TYPE_CHECKING, Any

import typer

from tracedray.cli.output import ADDRESS_HELP, OutputFormat, format_option

if TYPE_CHECKING:
    from tracedray.cli.stack_view import NodeAnswer

Row = dict[str, Any]
COLUMNS = ("index", "breakpoint_id", "function", "task_id", "location", "pid", "node_id",
           "waiting_s", "post_mortem")


def breakpoint_rows(answers: list[NodeAnswer], now: float) -> list[Row]:
    """Every waiting breakpoint, the oldest first, numbered (pure)."""
    found = [bp for answer in answers if answer.dumps is not None
             for process in answer.dumps.processes if process.HasField("dump")
             for bp in process.dump.breakpoints]
    found.sort(key=lambda bp: bp.since)
    return [{"index": i, "breakpoint_id": bp.breakpoint_id, "function": bp.function,
             "task_id": bp.task_id, "attempt": bp.attempt, "actor_id": bp.actor_id,
             "job_id": bp.job_id, "location": f"{bp.filename}:{bp.lineno}", "pid": bp.pid,
             "node_id": bp.node_id, "worker_id": bp.worker_id, "host": bp.host,
             "port": bp.port, "token": bp.token, "waiting_s": round(max(now - bp.since, 0), 1),
             "post_mortem": bp.post_mortem, "error": bp.error}
            for i, bp in enumerate(found)]


def choose(rows: list[Row], which: str) -> Row | None:
    """The breakpoint named by its index or an id prefix (pure)."""
    if which.isdigit() and int(which) < len(rows):
        return rows[int(which)]
    matches = [r for r in rows if r["breakpoint_id"].startswith(which.lower())]
    return matches[0] if len(matches) == 1 else None


def debug(
    which: str | None = typer.Argument(None, help="A breakpoint's index or id: attach to it."),
    address: str | None = typer.Option(None, "--address", help=ADDRESS_HELP),
    output_format: OutputFormat = format_option(),
) -> None:
    """List the breakpoint()s waiting in remote tasks, or attach a pdb session to one.

    `breakpoint()` in a task or actor method pauses it until a debugger attaches;
    `continue` (or `quit`, or Ctrl-D) detaches and the task goes on. With
    TRACEDRAY_DEBUG_POST_MORTEM=1 in the cluster's environment, a task's uncaught
    exception waits likewise in a post-mortem session."""
    from tracedray.cli.commands.stack import collect
    from tracedray.cli.output import fail, note, print_data, print_rows, warn
    from tracedray.cli.stack_view import node_rows, unanswered
    from tracedray.core.cluster_client import connect_cluster
    from tracedray.exceptions import RayError

    try:
        client = connect_cluster(address)
        answers = collect(client, node=None, timeout_s=5.0, drivers=False, native=False,
                          breakpoints_only=True)
    except RayError as exc:
        raise fail(str(exc)) from exc
    for line in unanswered(node_rows(answers)):
        warn(line)
    rows = breakpoint_rows(answers, time.time())
    if which is None and output_format.structured:
        print_data([{k: v for k, v in r.items() if k != "token"} for r in rows], output_format)
        return
    if which is None:
        if not rows:
            note("no breakpoint is waiting; breakpoint() in a task pauses it until you "
                 "attach with `tracedray debug INDEX`")
            return
        print_rows(rows, COLUMNS, output_format, title="waiting breakpoints")
        if not sys.stdin.isatty():
            return
        which = typer.prompt("Attach to (index or id; empty to quit)", default="",
                             show_default=False)
        if not which:
            return
    chosen = choose(rows, which)
    if chosen is None:
        raise fail(f"no waiting breakpoint is {which!r}: `tracedray debug` lists them "
                   f"({len(rows)} now)")
    note(f"attached to {chosen['function'] or 'a task'} at {chosen['location']} (pid "
         f"{chosen['pid']}); `continue` or Ctrl-D detaches and the task goes on")
    try:
        _relay(chosen["host"], chosen["port"], chosen["token"])
    except OSError as exc:
        raise fail(f"could not talk to the breakpoint at {chosen['host']}:{chosen['port']}: "
                   f"{exc}; it may have been attached to or ended meanwhile") from exc
    note("detached")


def _relay(host: str, port: int, token: str) -> None:
    """This terminal <-> the remote pdb, until the remote side closes."""
    with socket.create_connection((host, port), timeout=10.0) as conn:
        conn.settimeout(None)
        conn.sendall(token.encode() + b"\n")
        stdin = sys.stdin.fileno()
        stdin_open = True
        while True:
            readable, _, _ = select.select([conn] + ([stdin] if stdin_open else []), [], [])
            if conn in readable:
                data = conn.recv(65536)
                if not data:
                    return
                sys.stdout.write(data.decode(errors="replace"))
                sys.stdout.flush()
            if stdin_open and stdin in readable:
                data = os.read(stdin, 65536)
                if not data:  # Ctrl-D: detach, the task goes on
                    stdin_open = False
                    conn.sendall(b"continue\n")
                else:
                    conn.sendall(data)


def register(app: typer.Typer) -> None:
    app.command("debug")(debug)
