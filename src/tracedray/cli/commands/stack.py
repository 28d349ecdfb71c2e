"""``tracedray stack``: the Python stack of every thread of every worker, on every node.

Each alive raylet is asked at once (DumpNodeStacks); it asks its processes at once,
each with ``--timeout``, so the command answers within about that however many
processes are stuck. Every stack is labelled with the task it runs (``stack_view``).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

import typer

from tracedray.cli.output import ADDRESS_HELP, OutputFormat, format_option

if TYPE_CHECKING:
    from tracedray.cli.stack_view import NodeAnswer
    from tracedray.core.cluster_client import ClusterClient

# How much longer than a process's deadline the CLI waits for its raylet's answer.
RAYLET_MARGIN_S = 5.0


def collect(client: ClusterClient, *, node: str | None, timeout_s: float, drivers: bool,
            native: bool, breakpoints_only: bool = False) -> list[NodeAnswer]:
    """Every alive node's answer (or why it gave none), the head first."""
    from tracedray._proto.v1 import debug_pb2
    from tracedray.cli.stack_view import NodeAnswer
    from tracedray.core.protocol.raylet_client import RayletClient
    from tracedray.exceptions import ConfigError, RayError

    nodes = sorted(client.nodes(), key=lambda n: (not n.info.is_head, n.info.start_time))
    alive = [n for n in nodes if n.info.state == "ALIVE"]
    if node:
        alive = [n for n in alive if n.info.node_id.startswith(node.lower())]
        if not alive:
            known = ", ".join(n.info.node_id[:12] for n in nodes) or "none"
            raise ConfigError(f"--node {node}: no alive node's id starts with it "
                              f"(nodes: {known}); see `tracedray list nodes`")
    request = debug_pb2.DumpStacksRequest(timeout_s=timeout_s, include_drivers=drivers,
                                          native=native, breakpoints_only=breakpoints_only)

    def ask(n: object) -> NodeAnswer:
        info = n.info  # type: ignore[attr-defined]
        target = f"{info.raylet.ip}:{info.raylet.port}"
        try:
            # With --native, py-spy may take another deadline after each dump.
            dumps = RayletClient(target).dump_node_stacks(
                request, timeout=timeout_s * (2 if native else 1) + RAYLET_MARGIN_S)
        except RayError as exc:
            return NodeAnswer(info.node_id, info.raylet.ip, info.is_head, None,
                              f"its raylet at {target} did not answer: {exc}")
        return NodeAnswer(info.node_id, info.raylet.ip, info.is_head, dumps)

    if not alive:
        return []
    with ThreadPoolExecutor(max_workers=min(16, len(alive))) as pool:
        return list(pool.map(ask, alive))


def stack(
    address: str | None = typer.Option(None, "--address", help=ADDRESS_HELP),
    node: str | None = typer.Option(None, "--node", help="Only the node whose id starts so."),
    task: str | None = typer.Option(None, "--task",
                                    help="Only the thread running this task (an id prefix)."),
    actor: str | None = typer.Option(None, "--actor",
                                     help="Only the worker hosting this actor (an id prefix)."),
    drivers: bool = typer.Option(False, "--drivers", help="Drivers' stacks too."),
    all_threads: bool = typer.Option(False, "--all-threads",
                                     help="Show the runtime's idle threads and frames too "
                                          "(--format json always has them)."),
    native: bool = typer.Option(False, "--native",
                                help="Native frames from py-spy, where installed and allowed."),
    timeout: float = typer.Option(5.0, "--timeout", min=0.1, max=60.0,
                                  help="Seconds to wait for each process."),
    output_format: OutputFormat = format_option(),
) -> None:
    """The Python stack of every thread of every worker on every node, each labelled with
    the task it runs (id, function, attempt, actor, running time, trace id).

    No root or ptrace rights needed: each process dumps its own threads. A process that
    does not answer within --timeout (stopped, or stuck in native code holding the GIL)
    is reported as not answering; the command never waits on it."""
    from tracedray.cli import stack_view
    from tracedray.cli.output import fail, print_data, warn
    from tracedray.core.cluster_client import connect_cluster
    from tracedray.exceptions import RayError

    try:
        client = connect_cluster(address)
        rows = stack_view.node_rows(collect(client, node=node, timeout_s=timeout,
                                            drivers=drivers, native=native))
    except RayError as exc:
        raise fail(str(exc)) from exc
    for line in stack_view.unanswered(rows):
        warn(line)
    if task:
        rows = stack_view.only_task(rows, task)
        if not rows:
            raise fail(f"no running task's id starts with {task!r}: it may have finished or "
                       "not started yet; see `tracedray list tasks --filter state=RUNNING`")
    if actor:
        rows = stack_view.only_actor(rows, actor)
        if not rows:
            raise fail(f"no live worker hosts an actor whose id starts with {actor!r}; "
                       "see `tracedray list actors`")
    if output_format.structured:
        print_data(rows, output_format)
    else:
        typer.echo(stack_view.render(rows, all_threads))


def register(app: typer.Typer) -> None:
    app.command("stack")(stack)
