"""``tracedray top``: a live view of the cluster, refreshed every ``--interval`` seconds.

Each refresh asks every alive raylet for its stats and the GCS for its task table
(``top_view`` builds and draws the frame). ``--once`` prints one frame and exits.
"""

from __future__ import annotations

import dataclasses
import os
import select
import subprocess
import sys
import time
from typing import TYPE_CHECKING, Any

import typer

from tracedray.cli.output import ADDRESS_HELP, FORMAT_HELP, OutputFormat, format_option

if TYPE_CHECKING:
    from tracedray.cli.top_view import Frame, TopState
    from tracedray.core.cluster_client import ClusterClient


def snapshot(client: ClusterClient, *, sort: str, node: str | None,
             job: str | None) -> Frame:
    from tracedray.cli import top_view
    from tracedray.core.protocol.state_rows import task_row

    views = client.node_views()
    now = time.time()
    tasks = []
    for record in client.gcs.get_tasks().tasks:
        row = task_row(record, now=now)
        row["_time"] = max((e.time for e in record.events), default=0.0)
        tasks.append(row)
    return top_view.build_frame(views, tasks, sort=sort, node=node, job=job)


def top(
    address: str | None = typer.Option(None, "--address", help=ADDRESS_HELP),
    once: bool = typer.Option(False, "--once", help="Print one frame and exit."),
    interval: float = typer.Option(2.0, "--interval", min=0.2, help="Seconds between frames."),
    sort: str = typer.Option("longest", "--sort",
                             help="Running functions by: longest, running or name."),
    node: str | None = typer.Option(None, "--node", help="Only the node whose id starts so."),
    job: str | None = typer.Option(None, "--job", help="Only the job whose id starts so."),
    output_format: OutputFormat = format_option(FORMAT_HELP + " (json, yaml: with --once)"),
) -> None:
    """The cluster now: each node's CPUs, memory, object store and workers; running tasks
    by function with the longest running time and slow flags; work waiting to run; recent
    failures. Refreshes until q or Ctrl-C. On a terminal, keys: s sort, n node, j job,
    1-9 select a function, k its longest-running task's stack, t its story (trace)."""
    from tracedray.cli import top_view
    from tracedray.cli.output import fail, print_data, stdout_console
    from tracedray.core.cluster_client import connect_cluster
    from tracedray.exceptions import RayError

    if sort not in top_view.SORT_KEYS:
        raise fail(f"--sort {sort!r}: expected one of {', '.join(top_view.SORT_KEYS)}")
    if output_format.structured and not once:
        raise fail(f"--format {output_format.value} prints one frame: add --once")
    try:
        client = connect_cluster(address)
        state = top_view.TopState(sort=sort, node=node, job=job)
        if once:
            shown = snapshot(client, sort=sort, node=node, job=job)
            if output_format.structured:
                print_data(dataclasses.asdict(shown), output_format)
            else:
                stdout_console().print(top_view.render(shown, title=_title(client)))
            return
        _live(client, state, interval)
    except RayError as exc:
        raise fail(str(exc)) from exc


def _title(client: ClusterClient, state: TopState | None = None) -> str:
    stamp = time.strftime("%H:%M:%S")
    shown = ""
    if state is not None:
        shown = f"; sort {state.sort}" + (f", node {state.node[:12]}" if state.node else "") + (
            f", job {state.job}" if state.job else "")
    return f"tracedray top: cluster {client.gcs_address} at {stamp}{shown} (Ctrl-C to quit)"


def _live(client: ClusterClient, state: TopState, interval: float) -> None:
    """Refresh until q or Ctrl-C; on a terminal, keys act on the view (top_view.on_key)."""
    from rich.live import Live

    from tracedray.cli import top_view
    from tracedray.cli.output import stdout_console

    keys = _Keys()
    live = Live(console=stdout_console(), auto_refresh=False, screen=False)
    try:
        live.start()
        while True:
            shown = snapshot(client, sort=state.sort, node=state.node, job=state.job)
            state = dataclasses.replace(
                state, selected=min(state.selected, max(len(shown.functions) - 1, 0)))
            live.update(top_view.render(shown, title=_title(client, state),
                                        selected=state.selected if keys.enabled else None,
                                        footer=top_view.KEYS_HELP if keys.enabled else ""),
                        refresh=True)
            deadline = time.monotonic() + interval
            while (left := deadline - time.monotonic()) > 0:
                key = keys.read(left)
                if not key:
                    continue
                state, action = top_view.on_key(
                    state, key, nodes=shown.node_ids, jobs=shown.jobs,
                    rows=len(shown.functions))
                if action is top_view.Action.QUIT:
                    return
                if action in (top_view.Action.STACK, top_view.Action.TRACE):
                    task_id = shown.functions[state.selected]["longest_task_id"]
                    live.stop()
                    _show(client, action, task_id, keys)
                    live.start()
                break  # draw again at once
    except KeyboardInterrupt:
        return
    finally:
        live.stop()
        keys.close()


def _show(client: ClusterClient, action: object, task_id: str, keys: _Keys) -> None:
    """A task's stack or story under the paused view, until a key is pressed."""
    from tracedray.cli import top_view

    command = "stack" if action is top_view.Action.STACK else "trace"
    args = ["stack", "--task", task_id] if command == "stack" else ["trace", task_id]
    subprocess.run([sys.executable, "-m", "tracedray.cli.app", *args, "--address",
                    client.gcs_address], check=False)
    typer.echo("-- press a key to go back to top --")
    while not keys.read(3600.0):
        pass


class _Keys:
    """Single key presses from a terminal (cbreak mode, restored at close); none when
    stdin is not a terminal."""

    def __init__(self) -> None:
        self._fd = sys.stdin.fileno() if sys.stdin.isatty() else None
        self._saved: Any = None
        if self._fd is not None:
            import termios
            import tty

            self._saved = termios.tcgetattr(self._fd)
            tty.setcbreak(self._fd)

    @property
    def enabled(self) -> bool:
        return self._fd is not None

    def read(self, timeout_s: float) -> str:
        if self._fd is None:
            time.sleep(timeout_s)
            return ""
        readable, _, _ = select.select([self._fd], [], [], timeout_s)
        return os.read(self._fd, 1).decode(errors="replace") if readable else ""

    def close(self) -> None:
        if self._fd is not None and self._saved is not None:
            import termios

            termios.tcsetattr(self._fd, termios.TCSADRAIN, self._saved)
            self._saved = None


def register(app: typer.Typer) -> None:
    app.command("top")(top)
