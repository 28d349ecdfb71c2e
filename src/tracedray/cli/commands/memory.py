"""``tracedray memory``: every live reference in the cluster, or the store over time.

Rows are one per (object, holder), collected from every alive raylet's view of
its core workers' reference tables. ``--stats-only`` prints each node's store
figures; ``--timeline`` replays the store's events of the session into a chart.
On a cluster that has stopped or died, the references and figures are the last
known ones, read from the session's files (``tracedray.cli.postmortem``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import typer

from tracedray.cli.output import (
    ADDRESS_HELP,
    SESSION_HELP,
    OutputFormat,
    format_option,
)

if TYPE_CHECKING:
    from tracedray.cli.progress import Progress


def memory(
    address: str | None = typer.Option(None, "--address", help=ADDRESS_HELP),
    group_by: str = typer.Option(
        "node", "--group-by",
        help="node or stack-trace (call site); Ray's NODE_ADDRESS, STACK_TRACE too."),
    sort_by: str = typer.Option(
        "pid", "--sort-by",
        help="pid, size or reference-type; Ray's PID, OBJECT_SIZE, REFERENCE_TYPE too."),
    units: str = typer.Option("B", "--units", help="B, KB, MB or GB for sizes in tables."),
    num_entries: int | None = typer.Option(None, "--num-entries", "-n",
                                           help="Show at most N rows (the rest are counted)."),
    stats_only: bool = typer.Option(False, "--stats-only",
                                    help="Per node: store used/capacity, objects, spills."),
    timeline: bool = typer.Option(False, "--timeline",
                                  help="Store use per node over time from the session's spans."),
    output: str | None = typer.Option(None, "--output", "-o",
                                      help="With --timeline: save a plot to FILE.png."),
    output_format: OutputFormat = format_option(),
    session: str | None = typer.Option(None, "--session", help=SESSION_HELP),
) -> None:
    """Who holds which object: ip, pid, call site, size, reference type, producing task status.

    On a stopped or dead cluster: the last known references, from its session's files."""
    from tracedray.cli.output import fail
    from tracedray.cli.progress import working
    from tracedray.exceptions import RayError

    what = ("replaying the object store's events" if timeline
            else "asking every node for its store" if stats_only
            else "collecting every reference from every node")
    try:
        with working(what, json_output=output_format.structured) as spin:
            if timeline:
                _timeline(address, session, output, output_format, spin)
            elif stats_only:
                _stats_only(address, session, output_format, spin)
            else:
                _references(address, session, group_by, sort_by, units, num_entries,
                            output_format, spin)
    except RayError as exc:
        raise fail(str(exc)) from exc


def _references(address: str | None, session: str | None, group_by: str, sort_by: str,
                units: str, num_entries: int | None, output_format: OutputFormat,
                spin: Progress) -> None:
    from tracedray.cli import memory_view, postmortem
    from tracedray.cli.output import (
        format_bytes,
        note,
        print_data,
        report_left_out,
        stdout_console,
    )
    from tracedray.core.protocol.state_rows import MEMORY_FIELDS
    from tracedray.exceptions import ConfigError
    from tracedray.util import state

    unit = memory_view.check_units(units)
    if num_entries is not None and num_entries < 0:
        raise ConfigError(f"--num-entries must be >= 0, got {num_entries}")
    client = postmortem.open_client(address, session)
    postmortem.announce(client)
    found = state.list_objects(address=client, limit=None)
    ordered = memory_view.sort_rows(found, sort_by)
    groups = memory_view.group_rows(ordered, group_by)  # before the cut: totals stay whole
    shown = ordered if num_entries is None else ordered[:num_entries]
    spin.stop()
    if output_format.structured:
        print_data(shown, output_format)
        report_left_out(len(shown), len(ordered), "references", "--num-entries")
        return
    if not ordered:
        note("no object was in a store when the session's files end"
             if isinstance(client, postmortem.PostmortemClient)
             else "no live object references in the cluster")
        return
    from tracedray.cli.output import build_table

    visible = {id(row) for row in shown}
    console = stdout_console()
    label = "node" if memory_view.canonical(group_by) == "node" else "call site"
    for group in groups:
        rows = [row for row in group.rows if id(row) in visible]
        counts = ", ".join(f"{n} {t}" for t, n in group.reference_counts)
        console.print(f"[bold]--- {label} {group.key} ---[/] objects "
                      f"{format_bytes(group.object_bytes, unit)}; references: {counts}",
                      highlight=False)
        if rows:
            console.print(build_table(rows, MEMORY_FIELDS,
                                      formatters={"size": lambda v: format_bytes(v, unit)}))
    report_left_out(len(shown), len(ordered), "references", "--num-entries")


def _stats_only(address: str | None, session: str | None, output_format: OutputFormat,
                spin: Progress) -> None:
    from tracedray.cli import memory_view, postmortem
    from tracedray.cli.output import format_bytes, print_rows, warn

    client = postmortem.open_client(address, session)
    postmortem.announce(client)
    views = client.node_views()
    rows = [memory_view.store_stats_row(v.stats) for v in views if v.stats is not None]
    spin.stop()
    for view in views:
        if view.stats is None:
            warn(f"node {view.node_id}: {view.error}")
    byte_columns = ("store_used", "store_capacity", "spilled_bytes", "restored_bytes")
    formatters: dict[str, Any] = {c: format_bytes for c in byte_columns}
    print_rows(rows, ("node_id", "ip", "store_used", "store_capacity", "objects", "spilled_bytes",
                      "spilled_objects", "restored_bytes", "restored_objects"), output_format,
               title="object store per node", what="nodes answering", formatters=formatters)


def _timeline(address: str | None, session_path: str | None, output: str | None,
              output_format: OutputFormat, spin: Progress) -> None:
    from pathlib import Path

    from tracedray.cli.commands.trace import resolve_session
    from tracedray.cli.memory_timeline import render_terminal_chart, replay_store, save_png
    from tracedray.cli.output import note, print_data, warn
    from tracedray.cli.postmortem import session_at
    from tracedray.cli.tracestore.sources import SessionFileSource

    session = session_at(session_path) if session_path else resolve_session(address)
    batch = SessionFileSource(session).store_events()
    for warning in batch.warnings:
        warn(warning)
    nodes = replay_store(batch.spans)  # once: the series and the peaks
    series = {node: replay.series for node, replay in nodes.items()}
    peaks = {node: replay.peak for node, replay in nodes.items() if replay.peak is not None}
    spin.stop()
    if output_format.structured:
        # A point per store event: JSON on one line (the C encoder), not indented.
        print_data({node: {"series": [{"time_ns": t, "used": u} for t, u in points],
                           "peak": _peak_json(peaks.get(node))}
                    for node, points in series.items()}, output_format, compact=True)
    else:
        typer.echo(render_terminal_chart(series, peaks))
    if output:
        path = save_png(series, peaks, Path(output))
        note(f"saved the plot to {path}")


def _peak_json(peak: Any) -> dict[str, Any] | None:
    if peak is None:
        return None
    return {"time_ns": peak.time_ns, "used": peak.used_bytes, "capacity": peak.capacity_bytes,
            "top_call_sites": [{"call_site": u.call_site, "bytes": u.bytes,
                                "objects": u.objects} for u in peak.top_call_sites]}


def register(app: typer.Typer) -> None:
    app.command("memory")(memory)
