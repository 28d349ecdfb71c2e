"""``tracedray logs``: what tasks printed and what the runtime logged, from every node.

Reads the session's JSON log files, so it works after a node or the whole cluster
has died. Nodes on other machines that are alive now are asked for their files
through their raylet. Lines from all processes merge in time order, each node's
moved onto the head's clock first (its raylet's ``node.clock_offset`` lines, or the
live GCS node table for a node without them); stderr says which offsets moved lines.
"""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from tracedray.cli.output import ADDRESS_HELP, OutputFormat, format_option
from tracedray.cli.stop_request import StopRequest
from tracedray.telemetry.line_file import follow_rotations, line_files

if TYPE_CHECKING:
    from tracedray.cli.log_view import LogFilter
    from tracedray.cli.progress import Progress
    from tracedray.cli.tracestore.clock import Clocks
    from tracedray.cli.tracestore.logs import LogRecord
    from tracedray.core.session import SessionPaths

FOLLOW_POLL_S = 0.5
REMOTE_CONNECT_TIMEOUT_S = 1.0


@dataclass(frozen=True)
class RemoteLogs:
    records: list[LogRecord]
    warnings: list[str]
    # The GCS node table's clock offsets (node clock minus head clock); {} without a cluster.
    clock_offsets_s: dict[str, float]


def remote_logs(session: SessionPaths, address: str | None,
                keys: list[bytes] | None = None) -> RemoteLogs:
    """Log lines of alive nodes on other machines (asked through their raylets); with
    ``keys`` (a task's or actor's, and the clock lines) each node sends only those lines,
    found through its index."""
    import tempfile

    from tracedray.cli.tracestore.logs import read_logs
    from tracedray.core.cluster_client import connect_cluster
    from tracedray.exceptions import RayError

    try:
        client = connect_cluster(address or session.read_address(),
                                 timeout_s=REMOTE_CONNECT_TIMEOUT_S)
        nodes = client.nodes()
    except RayError:
        return RemoteLogs([], [], {})  # cluster not running: the local files are all there is
    offsets = {n.info.node_id: n.info.clock_offset_s for n in nodes}
    here = os.uname().nodename
    remote = [n for n in nodes if n.info.state == "ALIVE" and n.info.hostname != here]
    records: list[LogRecord] = []
    warnings: list[str] = []
    from tracedray.core import auth
    from tracedray.core.protocol.raylet_client import RayletClient

    for node in remote:
        target = f"{node.info.raylet.ip}:{node.info.raylet.port}"
        auth.remember(target, auth.client_token(client.gcs_address))
        with tempfile.TemporaryDirectory(prefix="tracedray-logs-") as folder:
            try:
                for chunk in RayletClient(target).read_session_files("logs", keys):
                    with open(Path(folder) / Path(chunk.name).name, "ab") as out:
                        out.write(chunk.data)
            except RayError as exc:
                warnings.append(f"node {node.info.node_id[:12]} at {target}: {exc}")
                continue
            batch = read_logs(Path(folder))
            records.extend(batch.records)
            warnings.extend(f"node {node.info.node_id[:12]}: {w}" for w in batch.warnings)
    return RemoteLogs(records, warnings, offsets)


def _print(records: list[LogRecord], output_format: OutputFormat) -> None:
    import json

    from tracedray.cli.log_view import format_pretty, record_json
    from tracedray.cli.output import print_data

    for record in records:
        if output_format is OutputFormat.json:
            typer.echo(json.dumps(record_json(record), default=str))
        elif output_format is OutputFormat.yaml:
            typer.echo("---")
            print_data(record_json(record), output_format)
        else:
            typer.echo(format_pretty(record))


def _note_offsets(records: list[LogRecord], noted: set[tuple[str, float]]) -> None:
    """Say (stderr) which clock offsets moved these lines, once per node and offset."""
    from tracedray.cli.output import note
    from tracedray.cli.tracestore.clock import applied_offsets, offsets_note

    fresh = {node: tuple(o for o in offsets if (node, o) not in noted)
             for node, offsets in applied_offsets(records).items()}
    fresh = {node: offsets for node, offsets in fresh.items() if offsets}
    if fresh:
        note(offsets_note(fresh))
        noted.update((node, o) for node, offsets in fresh.items() for o in offsets)


def _follow(session: SessionPaths, wanted: LogFilter, output_format: OutputFormat,
            seen: dict[str, int], clocks: Clocks | None,
            live_offsets_s: dict[str, float], noted: set[tuple[str, float]],
            stop: StopRequest) -> None:
    """Print lines as they are appended, until Ctrl-C or SIGTERM.

    Files only grow, so the n-th matching record of a file stays the n-th: per file
    we remember how many were printed. A half-written last line is skipped until
    it is complete, then printed. ``clocks`` None: no clock correction; otherwise it is
    rebuilt from each poll's lines (a node's estimate may have changed).
    """
    from tracedray.cli.log_view import select
    from tracedray.cli.tracestore.clock import Clocks, clock_lines
    from tracedray.cli.tracestore.logs import read_log_file

    try:
        while not stop.requested:
            time.sleep(FOLLOW_POLL_S)  # a signal interrupts it; the handler sets the flag
            if stop.requested:
                break
            fresh: list[LogRecord] = []
            lines: list[LogRecord] = []
            files = line_files(session.logs_dir)
            follow_rotations(seen, files)  # what was printed of a file that rotated
            for path in files:
                records, _ = read_log_file(path, {})
                lines.extend(clock_lines(records))
                matching = select(records, wanted)
                fresh.extend(matching[seen.get(path.name, 0):])
                seen[path.name] = len(matching)
            if clocks is not None:
                clocks, _ = Clocks.from_logs(lines, live_offsets_s)
                fresh = clocks.logs(fresh)
            fresh.sort(key=lambda r: r.time_ns)
            _print(fresh, output_format)
            _note_offsets(fresh, noted)
    except KeyboardInterrupt:
        pass


class LogKind(str, Enum):
    """Ray's `ray logs` subcommands, spelled as a first argument."""

    task = "task"
    actor = "actor"
    worker = "worker"
    cluster = "cluster"


def logs(
    kind: str | None = typer.Argument(
        None, metavar="[task|actor|worker|cluster]",
        help="Ray's spellings: `logs task --id ID`, `logs actor --id ID`, `logs worker "
             "--pid PID`, `logs cluster [GLOB]` (log files whose name matches, e.g. "
             "'raylet*'); a GLOB alone is `logs cluster GLOB`."),
    glob: str | None = typer.Argument(None, metavar="[GLOB]",
                                      help="With cluster: log files whose name matches."),
    item_id: str | None = typer.Option(None, "--id", help="With task or actor: its id."),
    pid: int | None = typer.Option(None, "--pid", help="With worker: its process id."),
    task: str | None = typer.Option(None, "--task", help="Everything this task printed and "
                                                         "logged, every attempt, any node."),
    actor: str | None = typer.Option(None, "--actor", help="Lines of this actor."),
    node: str | None = typer.Option(None, "--node", help="Lines of this node (id or prefix)."),
    worker: int | None = typer.Option(None, "--worker", help="Lines of this process id."),
    level: str | None = typer.Option(None, "--level",
                                     help="Lowest level shown: debug, info, warning, error."),
    tail_lines: int | None = typer.Option(None, "--tail", "-n", help="Only the last N lines."),
    follow: bool = typer.Option(False, "--follow", "-f", help="Keep printing new lines."),
    address: str | None = typer.Option(None, "--address", help=ADDRESS_HELP),
    output_format: OutputFormat = format_option(
        "default (or table) for people; json (one object per line) or yaml (one document "
        "per line) for scripts."),
    clock_correction: bool = typer.Option(
        True, "--clock-correction/--no-clock-correction",
        help="Move each node's lines onto the head's clock (its offset, estimated at "
             "heartbeats) before merging; off: every line keeps its node's timestamp."),
) -> None:
    """Print the session's log lines, merged across processes and nodes in time order."""
    from tracedray.cli.output import fail

    try:
        task, actor, worker, files = ray_spelling(kind, glob, item_id, pid, task, actor, worker)
    except ValueError as exc:
        raise fail(str(exc)) from exc
    # With --follow, SIGTERM ends the command cleanly (exit 0) from the first moment, also
    # while the lines already there are printed: a supervisor may stop it at any time.
    from tracedray.cli.progress import working

    with StopRequest() if follow else contextlib.nullcontext(StopRequest()) as stop, \
            working("reading the session's log lines",
                    json_output=output_format.structured) as spin:
        _logs(stop, LogRequest(task, actor, node, worker, level, files), tail_lines, follow,
              address, output_format, clock_correction, spin)


@dataclass(frozen=True)
class LogRequest:
    task: str | None
    actor: str | None
    node: str | None
    worker: int | None
    level: str | None
    files: str


def ray_spelling(kind: str | None, glob: str | None, item_id: str | None, pid: int | None,
                 task: str | None, actor: str | None, worker: int | None,
                 ) -> tuple[str | None, str | None, int | None, str]:
    """Ray's `logs KIND --id/--pid` and `logs [cluster] GLOB` as tracedray's options:
    (task, actor, worker pid, file glob). ValueError when they do not fit together."""
    if kind is None or kind not in LogKind.__members__:
        if glob is not None:
            raise ValueError(f"unexpected argument {glob!r}: one GLOB at most")
        if item_id is not None or pid is not None:
            raise ValueError("--id goes with `logs task` or `logs actor`, --pid with "
                             "`logs worker`")
        return task, actor, worker, kind or ""  # a glob alone: Ray's alias of cluster
    if glob is not None and kind != LogKind.cluster:
        raise ValueError(f"`logs {kind}` takes no GLOB (only `logs cluster GLOB` does)")
    if kind in (LogKind.task, LogKind.actor):
        if item_id is None:
            raise ValueError(f"`logs {kind}` needs --id ID")
        return (item_id, actor, worker, "") if kind == LogKind.task \
            else (task, item_id, worker, "")
    if kind == LogKind.worker:
        if pid is None:
            raise ValueError("`logs worker` needs --pid PID")
        return task, actor, pid, ""
    return task, actor, worker, glob or ""


def _logs(stop: StopRequest, request: LogRequest, tail_lines: int | None, follow: bool,
          address: str | None, output_format: OutputFormat, clock_correction: bool,
          spin: Progress) -> None:
    from tracedray.cli.commands.trace import resolve_session
    from tracedray.cli.log_view import LogFilter, select, tail
    from tracedray.cli.output import fail, warn
    from tracedray.cli.tracestore.clock import Clocks, clock_lines
    from tracedray.cli.tracestore.logs import read_log_file
    from tracedray.cli.tracestore.story import close_matches
    from tracedray.exceptions import RayError

    try:
        session = resolve_session(address)
        wanted = LogFilter(task_id=(request.task or "").strip(),
                           actor_id=(request.actor or "").strip(),
                           node_id=(request.node or "").strip().lower(), pid=request.worker,
                           min_level=(request.level or "").strip().lower(),
                           files=request.files)
        tail([], tail_lines)  # validates --tail before any reading
    except RayError as exc:
        raise fail(str(exc)) from exc
    if not session.logs_dir.is_dir():
        raise fail(f"no log folder at {session.logs_dir}")
    seen: dict[str, int] = {}
    indexed = None if follow else _indexed_lines(session, wanted)
    if indexed is not None:
        wanted, records, lines, warnings = indexed
    else:
        records, lines, warnings = [], [], []  # lines: what the clock offsets are read from
        for path in line_files(session.logs_dir):
            if not wanted.reads_file(path.name):
                continue
            file_records, file_warnings = read_log_file(path, {})
            lines.extend(clock_lines(file_records))
            matching = select(file_records, wanted)
            seen[path.name] = len(matching)
            records.extend(matching)
            warnings.extend(file_warnings)
    remote = remote_logs(session, address, None if follow else _remote_keys(wanted))
    lines.extend(clock_lines(remote.records))
    records.extend(select(remote.records, wanted))
    warnings.extend(remote.warnings)
    clocks: Clocks | None = None
    if clock_correction:
        clocks, clock_warnings = Clocks.from_logs(lines, remote.clock_offsets_s)
        warnings.extend(clock_warnings)
        records = clocks.logs(records)
    records.sort(key=lambda r: r.time_ns)
    for warning in warnings:
        warn(warning)
    if wanted.task_id and not records and not follow:
        known = _known_task_ids(session, wanted.task_id)
        suggestions = close_matches(wanted.task_id, known)
        hint = f"; did you mean {', '.join(suggestions)}?" if suggestions else ""
        raise fail(f"no task with id {wanted.task_id} in the logs of {session.root}{hint}")
    shown = tail(records, tail_lines)
    spin.stop()
    _print(shown, output_format)
    noted: set[tuple[str, float]] = set()
    _note_offsets(shown, noted)
    if follow:
        _follow(session, wanted, output_format, seen, clocks, remote.clock_offsets_s, noted,
                stop)


def _indexed_lines(session: SessionPaths, wanted: LogFilter,
                   ) -> tuple[LogFilter, list[LogRecord], list[LogRecord], list[str]] | None:
    """With the session's index, and a task, actor or process asked for: (the filter, a
    unique id prefix made whole; the matching lines; the clock lines; warnings), having
    read only those lines. None without an index (the caller reads every file and says
    so) or a filter the index cannot narrow."""
    import dataclasses

    from tracedray.cli.log_view import select
    from tracedray.cli.output import warn
    from tracedray.cli.tracestore.clock import clock_lines
    from tracedray.cli.tracestore.logs import read_indexed_logs, read_log_file
    from tracedray.telemetry.index_keys import CLOCK_KEY, key
    from tracedray.telemetry.index_reader import open_index

    if not (wanted.task_id or wanted.actor_id or wanted.pid is not None):
        return None
    index, why = open_index(session.root)
    if index is None:
        warn(f"{why}: reading every log file")
        return None
    if why:
        warn(why)
    gone = index.gone("logs")
    if gone:
        warn(gone)
    try:
        wanted = dataclasses.replace(wanted, task_id=index.resolve("task", wanted.task_id),
                                     actor_id=index.resolve("actor", wanted.actor_id))
        keys = [CLOCK_KEY]  # and the task's or actor's lines, in one pass
        if wanted.task_id or wanted.actor_id:
            keys.append(key("task", wanted.task_id) if wanted.task_id
                        else key("actor", wanted.actor_id))
        found = read_indexed_logs(session.logs_dir, index, keys)
        warnings = list(found.warnings)
        records = list(found.records)
        if not (wanted.task_id or wanted.actor_id):  # a process's lines are one file
            records = []
            for path in index.files_of_pid("logs", int(wanted.pid or 0)):
                file_records, file_warnings = read_log_file(path, {})
                records.extend(file_records)
                warnings.extend(file_warnings)
        return wanted, select(records, wanted), clock_lines(found.records), warnings
    finally:
        index.close()


def _remote_keys(wanted: LogFilter) -> list[bytes] | None:
    """What to ask other nodes for: a task's or actor's lines and the clock lines; None
    (every line) for other filters."""
    from tracedray.telemetry.trace_index import CLOCK_KEY, key

    if wanted.task_id:
        return [key("task", wanted.task_id), CLOCK_KEY]
    if wanted.actor_id:
        return [key("actor", wanted.actor_id), CLOCK_KEY]
    return None


def _known_task_ids(session: SessionPaths, task_id: str) -> set[str]:
    """Task ids to suggest for one that matched no line: from the index (ids sharing the
    first characters), or every file's."""
    from tracedray.cli.tracestore.logs import read_log_file
    from tracedray.telemetry.index_reader import suggest_ids
    from tracedray.telemetry.trace_index import index_path

    if index_path(session.root).exists():
        return set(suggest_ids(session.root, "task", task_id))
    return {str(r.get("task_id")) for path in line_files(session.logs_dir)
            for r in read_log_file(path, {})[0] if r.get("task_id")}


def register(app: typer.Typer) -> None:
    app.command("logs")(logs)
