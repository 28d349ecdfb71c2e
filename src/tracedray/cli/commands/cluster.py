"""``tracedray start``, ``tracedray stop`` and ``tracedray status``.

``start --head`` launches a detached GCS and raylet, writes the session's
``address`` file and returns once both are ready (``--block`` stays in the
foreground and stops the node on Ctrl-C/SIGTERM). ``start --address`` joins a
node to a running head. ``stop`` stops this machine's detached nodes and removes
their shared memory. ``status`` asks the GCS and every alive raylet.
"""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any

import typer

from tracedray import config
from tracedray.cli.output import ADDRESS_HELP, OutputFormat, format_option

if TYPE_CHECKING:
    from tracedray.core.auth import AuthSettings
    from tracedray.core.cluster_client import NodeView
    from tracedray.core.node import NodeProcesses
    from tracedray.core.session import SessionPaths


def _parse_resources(text: str | None) -> dict[str, float] | None:
    from tracedray.exceptions import ConfigError

    if not text:
        return None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"--resources must be JSON like '{{\"b\": 1}}', got {text!r}: {exc}") \
            from exc
    if not isinstance(value, dict):
        raise ConfigError(f"--resources must be a JSON object, got {text!r}")
    return value


def _block_until_signalled(processes: NodeProcesses) -> int:
    """Foreground mode: wait for Ctrl-C/SIGTERM or a node process exiting; then stop."""
    import time

    from tracedray.cli.output import note, warn
    from tracedray.cli.stop_request import StopRequest

    exit_code = 0
    try:
        with StopRequest() as stop:
            while not stop.requested:
                time.sleep(0.5)  # SIGTERM cuts it short
                exited = [p for p in processes.processes if p.poll() is not None]
                if exited and not stop.requested:
                    warn(f"a node process exited (pid {exited[0].pid}, code "
                         f"{exited[0].returncode}); stopping the node")
                    exit_code = 1
                    break
    except KeyboardInterrupt:
        pass
    finally:
        note("stopping the node")
        processes.stop(timeout_s=10.0)
    return exit_code


def start(
    head: bool = typer.Option(False, "--head", help="Start a head node (GCS + raylet)."),
    address: str | None = typer.Option(None, "--address",
                                       help="Join the cluster whose head is at HOST:PORT."),
    port: int = typer.Option(0, "--port", help="GCS port of a head node (0: pick a free one)."),
    node_ip_address: str = typer.Option("127.0.0.1", "--node-ip-address",
                                        help="IP the node's servers listen on and advertise."),
    num_cpus: float | None = typer.Option(None, "--num-cpus", help="CPUs (default: all)."),
    resources: str | None = typer.Option(None, "--resources",
                                         help='Custom resources as JSON, e.g. \'{"b": 1}\'.'),
    object_store_memory: int | None = typer.Option(
        None, "--object-store-memory", help="Object store capacity in bytes "
                                            "(default: 30% of RAM, capped by /dev/shm)."),
    gcs_storage: str | None = typer.Option(
        None, "--gcs-storage", help="memory or redis://host:port/db (head only; default "
                                    f"${config.GCS_STORAGE.name} or memory)."),
    object_spilling: bool = typer.Option(True, "--object-spilling/--no-object-spilling",
                                         help="Spill to the session's spill/ folder when full."),
    block: bool = typer.Option(False, "--block", help="Stay in the foreground; Ctrl-C stops."),
    metrics_export_port: int | None = typer.Option(
        None, "--metrics-export-port", min=0,
        help="Port of the node's Prometheus /metrics (default: "
             f"${config.METRICS_EXPORT_PORT.name} or 0, a free port)."),
    token: str | None = typer.Option(
        None, "--token", help="The cluster's auth token (default: $TRACEDRAY_AUTH_TOKEN; a "
                              "head makes one, a node on the head's machine reads it from "
                              "there). `tracedray get-auth-token` prints it."),
) -> None:
    """Start a head node, or join a node to a running cluster; returns once it is ready."""
    from tracedray.cli.output import fail
    from tracedray.exceptions import RayError

    if head == bool(address):
        raise fail("give exactly one of --head (start a cluster) or --address HOST:PORT "
                   "(join one)")
    try:
        settings = _auth_settings(token, head, address)
        _warn_if_open(settings, node_ip_address)
        extra = _parse_resources(resources)
        processes = _start_head(port, node_ip_address, num_cpus, extra, object_store_memory,
                                gcs_storage, object_spilling, metrics_export_port,
                                settings) if head else \
            _join(address or "", node_ip_address, num_cpus, extra, object_store_memory,
                  object_spilling, metrics_export_port, settings)
    except RayError as exc:
        raise fail(str(exc)) from exc
    _print_started(processes, head)
    if block:
        raise typer.Exit(code=_block_until_signalled(processes))


def _auth_settings(token: str | None, head: bool, address: str | None) -> AuthSettings:
    """The token this node's processes get (``core/auth.py`` says where it is found)."""
    from tracedray.core import auth
    from tracedray.core.cluster_client import normalize_address

    if not auth.enabled_by_config():
        return auth.AuthSettings(False, None)
    choice = auth.choose_for_new_cluster(token) if head else \
        auth.find_token(normalize_address(address or ""), token)
    return auth.AuthSettings(True, choice.token, choice.source)


def _warn_if_open(settings: AuthSettings, host: str) -> None:
    from tracedray import config
    from tracedray.cli.output import note
    from tracedray.core.rpc import is_loopback

    if not settings.enabled and not is_loopback(host):
        note(f"{config.AUTH_MODE.name}=disabled and the node listens on {host}: anyone who "
             "reaches its ports can run code as this user (docs/security.md)")


def _store_token(session: SessionPaths, settings: AuthSettings) -> None:
    """Owner-only copies for this user's drivers and CLIs on this machine: the session
    folder's and the per-user file (``$TRACEDRAY_TEMP_DIR/auth_token``)."""
    from tracedray.core import auth

    if settings.enabled and settings.token is not None:
        auth.store_token(settings.token, session.root, user_file=True)


def _start_head(port: int, host: str, num_cpus: float | None, resources: dict[str, float] | None,
                object_store_memory: int | None, storage: str | None,
                spilling: bool, metrics_export_port: int | None,
                settings: AuthSettings) -> NodeProcesses:
    from tracedray.core.node import start_head
    from tracedray.core.session import create_session

    session = create_session()
    _store_token(session, settings)
    return start_head(session, port=port, host=host, num_cpus=num_cpus, resources=resources,
                      object_store_memory=object_store_memory, spilling=spilling,
                      storage=storage or config.GCS_STORAGE.get(), parent_pid=0, detach=True,
                      metrics_export_port=metrics_export_port, auth_settings=settings)


def _join(address: str, host: str, num_cpus: float | None, resources: dict[str, float] | None,
          object_store_memory: int | None, spilling: bool,
          metrics_export_port: int | None, settings: AuthSettings) -> NodeProcesses:
    from tracedray.core.cluster_client import normalize_address
    from tracedray.core.node import join_node
    from tracedray.core.session import create_session, session_for_address

    gcs = normalize_address(address)
    # On the head's machine the node shares the head's session folder (one place for
    # logs and traces); elsewhere it gets its own.
    session = session_for_address(gcs) or create_session()
    processes = join_node(session, gcs, host=host, num_cpus=num_cpus, resources=resources,
                          object_store_memory=object_store_memory, spilling=spilling,
                          parent_pid=0, detach=True, metrics_export_port=metrics_export_port,
                          auth_settings=settings)
    _store_token(session, settings)  # once the cluster took it: a wrong token is never kept
    return processes


def _print_started(processes: NodeProcesses, head: bool) -> None:
    gcs = processes.gcs_address
    lines = [f"tracedray {'head node' if head else 'node'} started",
             f"  address:  {gcs}",
             f"  node id:  {processes.node_id}",
             f"  raylet:   {processes.raylet_address}",
             f"  session:  {processes.session.root}",
             "",
             f"Connect a driver:  tracedray.init(address=\"auto\")  or  tracedray.init(\"{gcs}\")",
             f"Add a node:        tracedray start --address {gcs} --token TOKEN",
             "  TOKEN:           `tracedray get-auth-token` here prints it (or "
             "TRACEDRAY_AUTH_TOKEN there)",
             "Look at it:        tracedray status",
             "Stop it:           tracedray stop"]
    if head:  # the GCS keeps it: every node's /metrics, for Prometheus (docs/metrics.md)
        lines.append(f"Metrics:           {processes.session.root / 'prometheus_sd.json'} "
                     "(Prometheus file_sd)")
    typer.echo("\n".join(lines))


def stop(
    force: bool = typer.Option(False, "--force", help="SIGKILL instead of SIGTERM."),
    grace: float = typer.Option(10.0, "--grace-period",
                                help="Seconds to wait after SIGTERM before SIGKILL."),
    all_clusters: bool = typer.Option(
        False, "--all", help="Also stop clusters that drivers started with tracedray.init()."),
) -> None:
    """Stop this machine's nodes started by `tracedray start` and free their shared memory."""
    from tracedray.cli import local_nodes
    from tracedray.cli.output import note
    from tracedray.core.session import temp_root

    root = temp_root()
    chosen = local_nodes.select_to_stop(local_nodes.scan(), root,
                                        include_drivers_clusters=all_clusters)
    report = local_nodes.stop(chosen, root, grace_s=grace, force=force)
    if not report.stopped:
        typer.echo(f"no running tracedray nodes under {root}")
    for process in report.stopped:
        typer.echo(f"stopped {process.component} pid {process.pid}"
                   f"{' node ' + process.node_id[:12] if process.node_id else ''}"
                   f" ({process.session_dir.name})")
    for process in report.killed:
        note(f"{process.component} pid {process.pid} ignored SIGTERM for {grace:g}s: killed")
    if report.shm_files_removed:
        typer.echo(f"removed {report.shm_files_removed} shared-memory file(s)")


def _workers_by_state(view: NodeView) -> dict[str, int]:
    counts: dict[str, int] = {}
    for worker in view.stats.workers if view.stats else ():
        counts[worker.state] = counts.get(worker.state, 0) + 1
    return dict(sorted(counts.items()))


def status_rows(views: list[NodeView]) -> list[dict[str, Any]]:
    """One JSON-ready row per node: its state row plus load, workers and reachability."""
    from tracedray.core.gcs import node_health
    from tracedray.core.protocol.state_rows import node_row

    out = []
    for view in views:
        row = node_row(view.node, view.stats)
        row["workers"] = _workers_by_state(view)
        row["pending"] = view.stats.pending_leases if view.stats else view.node.pending_leases
        row["infeasible"] = (view.stats.infeasible_leases if view.stats
                             else view.node.infeasible_leases)
        # Leases of processes that died holding them, taken back by the raylet.
        row["leases_reclaimed"] = view.stats.leases_reclaimed if view.stats else 0
        row["last_heartbeat"] = view.node.last_heartbeat or None
        silent_s = time.time() - view.node.last_heartbeat if view.node.last_heartbeat else 0.0
        # Late heartbeats: a stalled or partitioned node, not (yet) dead.
        row["suspect"] = row["state"] == "ALIVE" and node_health.suspect(
            silent_s, config.HEARTBEAT_INTERVAL_S.get())
        row["silent_s"] = round(silent_s, 1)
        row["error"] = view.error if view.alive else ""
        out.append(row)
    return out


def _used_of(row: dict[str, Any], name: str) -> str:
    from tracedray.cli.output import format_cell

    total = row["resources"].get(name, 0.0)
    used = total - row["resources_available"].get(name, total)
    return f"{format_cell('', used)}/{format_cell('', total)}"


def status(
    address: str | None = typer.Option(None, "--address", help=ADDRESS_HELP),
    output_format: OutputFormat = format_option(),
) -> None:
    """Nodes alive/dead, resources used/total, object store, workers, pending/infeasible work."""
    from tracedray.cli.output import fail, print_data
    from tracedray.core.cluster_client import connect_cluster
    from tracedray.exceptions import RayError

    try:
        client = connect_cluster(address)
        cluster = client.gcs.cluster_status()
        rows = status_rows(client.node_views())
    except RayError as exc:
        raise fail(str(exc)) from exc
    summary = {"address": client.gcs_address, "gcs_storage": cluster.storage,
               "actors": cluster.num_actors, "tasks": cluster.num_tasks,
               "pending": sum(r["pending"] for r in rows if r["state"] == "ALIVE"),
               "infeasible": sum(r["infeasible"] for r in rows if r["state"] == "ALIVE"),
               "leases_reclaimed": sum(r["leases_reclaimed"] for r in rows),
               "nodes": rows}
    if output_format.structured:
        print_data(summary, output_format)
        return
    _print_status(summary)


def _print_status(summary: dict[str, Any]) -> None:
    from rich.markup import escape
    from rich.table import Table

    from tracedray.cli.output import format_bytes, stdout_console

    rows = summary["nodes"]
    console = stdout_console()
    alive = [r for r in rows if r["state"] == "ALIVE"]
    console.print(f"cluster at {summary['address']}: {len(alive)} alive, "
                  f"{len(rows) - len(alive)} dead node(s); {summary['actors']} actor(s), "
                  f"{summary['tasks']} task(s) recorded; GCS storage "
                  f"{escape(summary['gcs_storage'])}", highlight=False)
    table = Table(title="nodes", title_justify="left")
    for column in ("node", "state", "CPU", "other resources", "object store", "workers",
                   "pending / infeasible"):
        table.add_column(column, overflow="fold")
    table.add_column("clock", no_wrap=True)  # "+1.2±0.3 ms": one reading, kept whole
    for row in rows:
        others = ", ".join(f"{name} {_used_of(row, name)}" for name in sorted(row["resources"])
                           if name not in ("CPU", "memory"))
        store = (f"{format_bytes(row['object_store_used'])} / "
                 f"{format_bytes(row['object_store_capacity'])}")
        workers = ", ".join(f"{n} {s}" for s, n in row["workers"].items())
        state = row["state"] + (" head" if row["is_head"] else "")
        if row["state"] != "ALIVE" and row["death_reason"]:
            state += f": {row['death_reason']}"
        elif row["suspect"]:
            state += f" SUSPECT: no heartbeat for {row['silent_s']:g}s"
        elif row["error"]:
            state += f" ({row['error']})"
        table.add_row(f"{row['node_id'][:12]} {row['ip']}", state, _used_of(row, "CPU"), others,
                      store, workers, f"{row['pending']} / {row['infeasible']}",
                      f"{row['clock_offset_s'] * 1000:+.1f}±{row['clock_error_s'] * 1000:.1f} ms")
    console.print(table)
    console.print(f"pending work: {summary['pending']} lease request(s) waiting; infeasible: "
                  f"{summary['infeasible']} (fits no node; see `tracedray list tasks`)",
                  highlight=False)
    if summary["leases_reclaimed"]:
        console.print(f"{summary['leases_reclaimed']} worker lease(s) reclaimed from processes "
                      "that died holding them (their workers were killed; see `tracedray "
                      "list workers`)", highlight=False)
    drifted = [r for r in rows if r["version_drift"]]
    if drifted:
        console.print("[bold yellow]version drift[/] (differs from the head node):")
        for row in drifted:
            console.print(f"  node {row['node_id'][:12]} ({row['ip']}): "
                          f"{escape('; '.join(row['version_drift']))}", highlight=False)


def register(app: typer.Typer) -> None:
    app.command("start")(start)
    app.command("stop")(stop)
    app.command("status")(status)
