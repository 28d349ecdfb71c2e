"""``tracedray top``: a live view of the cluster, refreshed every ``--interval`` seconds.

Each refresh asks every alive raylet for its stats and the GCS for its task table
(``top_view`` builds and draws the frame). ``--once`` prints one frame and exits.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import typer

from tracedray.cli.output import ADDRESS_HELP, FORMAT_HELP, OutputFormat

if TYPE_CHECKING:
    from tracedray.cli.cluster_client import ClusterClient
    from tracedray.cli.top_view import Frame


def snapshot(client: ClusterClient, *, sort: str, node: str | None,
             job: str | None) -> Frame:
    from tracedray.cli import top_view
    from tracedray.util._state_rows import task_row

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
    output_format: OutputFormat = typer.Option(OutputFormat.table, "--format",
                                               help=FORMAT_HELP + " (json: with --once)"),
) -> None:
    """The cluster now: each node's CPUs, memory, object store and workers; running tasks
    by function with the longest running time and slow flags; work waiting to run; recent
    failures. Refreshes until Ctrl-C; `tracedray stack --task ID` shows a task's stack."""
    from tracedray.cli import top_view
    from tracedray.cli.cluster_client import connect_cluster
    from tracedray.cli.output import fail, print_json, stdout_console
    from tracedray.exceptions import RayError

    if sort not in top_view.SORT_KEYS:
        raise fail(f"--sort {sort!r}: expected one of {', '.join(top_view.SORT_KEYS)}")
    if output_format is OutputFormat.json and not once:
        raise fail("--format json prints one frame: add --once")
    try:
        client = connect_cluster(address)

        def frame() -> Frame:
            return snapshot(client, sort=sort, node=node, job=job)

        if once:
            shown = frame()
            if output_format is OutputFormat.json:
                print_json(dataclasses.asdict(shown))
            else:
                stdout_console().print(top_view.render(shown, title=_title(client)))
            return
        _live(frame, client, interval)
    except RayError as exc:
        raise fail(str(exc)) from exc


def _title(client: ClusterClient) -> str:
    stamp = time.strftime("%H:%M:%S")
    return f"tracedray top: cluster {client.gcs_address} at {stamp} (Ctrl-C to quit)"


def _live(frame: Callable[[], Frame], client: ClusterClient, interval: float) -> None:
    from rich.live import Live

    from tracedray.cli import top_view
    from tracedray.cli.output import stdout_console

    with Live(console=stdout_console(), auto_refresh=False, screen=False) as live:
        try:
            while True:
                live.update(top_view.render(frame(), title=_title(client)), refresh=True)
                time.sleep(interval)
        except KeyboardInterrupt:
            return


def register(app: typer.Typer) -> None:
    app.command("top")(top)
