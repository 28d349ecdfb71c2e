"""``tracedray trace TASK_ID`` and ``tracedray timeline``: answers from the trace store.

Both read a session that may belong to a cluster that has already died: spans
come from Jaeger when a URL is configured (falling back to the session's files
when Jaeger does not answer) and from the session's OTLP JSON files otherwise.
Every node's spans and lines are moved onto the head's clock before they are
merged, with the offsets its raylet logged (``tracestore.clock``).
Heavy imports live inside the command bodies so ``tracedray --help`` stays fast.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from tracedray import config
from tracedray.cli.output import OutputFormat, format_option

if TYPE_CHECKING:
    from collections.abc import Sequence

    from rich.console import Console

    from tracedray.cli.progress import Progress
    from tracedray.cli.tracestore.clock import Clocks
    from tracedray.cli.tracestore.logs import LogBatch, LogRecord
    from tracedray.cli.tracestore.model import SpanRecord
    from tracedray.cli.tracestore.sources import SessionFileSource, SpanBatch, TraceSource
    from tracedray.cli.tracestore.timeline_filter import SpanFilter
    from tracedray.core.session import SessionPaths


ADDRESS_HELP = "GCS address (host:port) of the cluster; default: the newest session."
CLOCK_HELP = ("Move each node's spans and lines onto the head's clock (its offset, estimated at "
              "heartbeats) before merging; off: every node's own timestamps.")


def resolve_session(address: str | None) -> SessionPaths:
    """The session folder to read; ClusterConnectionError says where it looked."""
    from tracedray.core.session import latest_session, session_for_address, temp_root
    from tracedray.exceptions import ClusterConnectionError

    if not address:
        return latest_session()
    session = session_for_address(address)
    if session is None:
        raise ClusterConnectionError(
            f"no session folder for a cluster at {address} under {temp_root()} "
            f"(looked for session_*/address files naming it); is "
            f"{config.TEMP_DIR.name} the same as when the cluster was started?")
    return session


def _session_start_ns(session: SessionPaths) -> int | None:
    try:
        created = json.loads(session.info_file.read_text())["created"]
        return int(float(created) * 1e9)
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _clocks(console: Console, records: Sequence[LogRecord], enabled: bool) -> Clocks:
    """How to move each node's records onto the head's clock (nothing moves if disabled)."""
    from tracedray.cli.tracestore.clock import Clocks, clock_lines

    if not enabled:
        return Clocks()
    clocks, warnings = Clocks.from_logs(clock_lines(records))
    _warn(console, warnings)
    return clocks


def _fail(console: Console, message: str) -> typer.Exit:
    console.print(f"[bold red]error:[/] {message}", highlight=False, soft_wrap=True)
    return typer.Exit(code=1)


def _warn(console: Console, warnings: tuple[str, ...] | list[str]) -> None:
    for warning in warnings:
        console.print(f"[yellow]warning:[/] {warning}", highlight=False, markup=True,
                      soft_wrap=True)


def trace(
    task_id: str = typer.Argument(..., help="Task id (hex), as in `tracedray list tasks`."),
    address: str | None = typer.Option(None, "--address", help=ADDRESS_HELP),
    jaeger: str | None = typer.Option(
        None, "--jaeger", envvar=config.JAEGER_URL.name,
        help="Jaeger base URL (e.g. http://localhost:16686): read spans from its /api/v3 and "
             "print a link to the trace."),
    output_format: OutputFormat = format_option(),
    clock_correction: bool = typer.Option(True, "--clock-correction/--no-clock-correction",
                                          help=CLOCK_HELP),
) -> None:
    """Tell a task's story: submit, scheduling, dispatch, output, every attempt's end."""
    from tracedray.cli.progress import working

    with working("reading the task's spans and lines",
                 json_output=output_format.structured) as spin:
        _trace(task_id, address, jaeger, output_format, clock_correction, spin)


def _trace(task_id: str, address: str | None, jaeger: str | None, output_format: OutputFormat,
           clock_correction: bool, spin: Progress) -> None:
    from rich.console import Console
    from rich.markup import escape

    from tracedray.cli.output import print_data
    from tracedray.cli.tracestore.clock import applied_offsets, offsets_note
    from tracedray.cli.tracestore.render import print_story, story_json
    from tracedray.cli.tracestore.sources import (
        JaegerSource,
        SessionFileSource,
        SpanQuery,
    )
    from tracedray.cli.tracestore.story import (
        TaskStory,
        UnknownTask,
        known_task_ids,
        task_story,
        unique_prefix,
    )
    from tracedray.exceptions import RayError, RaySystemError
    from tracedray.telemetry.attributes import TASK_ID
    from tracedray.telemetry.index_reader import suggest_ids

    err = Console(stderr=True)
    try:
        session = resolve_session(address)
    except RayError as exc:
        raise _fail(err, escape(str(exc))) from exc
    jaeger_url = (jaeger or "").strip()
    sources: list[TraceSource] = []
    if jaeger_url:
        sources.append(JaegerSource(jaeger_url))
    sources.append(SessionFileSource(session))

    task_id, logs = _task_lines(session, task_id.strip())
    clocks = _clocks(err, logs.records, clock_correction)
    task_logs = clocks.logs(r for r in logs.records if str(r.get("task_id", "")) == task_id)
    start = _session_start_ns(session)
    query = SpanQuery(task_id=task_id.strip(),
                      start_min_ns=None if start is None else start - 60 * 10**9)
    # Jaeger is asked for one trace, the task's (its id from the index), not searched.
    trace_id = _indexed_trace_id(session, task_id) if jaeger_url else ""
    jaeger_query = SpanQuery(trace_id=trace_id) if trace_id else query
    seen: list[SpanRecord] = []
    result: TaskStory | UnknownTask | None = None
    for source in sources:
        try:
            batch = source.find_spans(jaeger_query if isinstance(source, JaegerSource)
                                      else query)
        except RaySystemError as exc:
            _warn(err, [f"{exc}; falling back to the session files"])
            continue
        _warn(err, batch.warnings)
        spans = clocks.spans(batch.spans)
        seen.extend(spans)
        result = task_story(spans, task_logs, task_id, jaeger_url)
        if isinstance(result, TaskStory):
            break
    _warn(err, logs.warnings)
    whole = None if isinstance(result, TaskStory) else unique_prefix(task_id, known_task_ids(seen))
    if whole is not None:  # a unique prefix, in a session without an index (it resolves them)
        task_id = whole
        task_logs = clocks.logs(r for r in logs.records if str(r.get("task_id", "")) == whole)
        result = task_story(seen, task_logs, task_id, jaeger_url)
    if not isinstance(result, TaskStory):
        # Suggestions come from every span any source returned, or the index's ids.
        result = task_story(seen, task_logs, task_id, jaeger_url)
        if isinstance(result, UnknownTask) and not result.suggestions:
            result = UnknownTask(task_id, tuple(suggest_ids(session.root, "task", task_id)))
    wanted = task_id.strip().lower()
    applied = applied_offsets([*(s for s in seen if str(s.get(TASK_ID, "")).lower() == wanted),
                               *task_logs])
    spin.stop()
    if output_format.structured:
        text = story_json(result, applied)
        if output_format is OutputFormat.json:
            typer.echo(text)
        else:
            print_data(json.loads(text), output_format)
        if isinstance(result, UnknownTask):
            raise typer.Exit(code=1)
        return
    if isinstance(result, UnknownTask):
        raise _fail(err, escape(result.message) + f" (searched {escape(session.root.name)})")
    print_story(result, Console(soft_wrap=True), offsets_note(applied))


def _task_lines(session: SessionPaths, task_id: str) -> tuple[str, LogBatch]:
    """The task's full id and the log lines `trace` needs: the task's and the clock lines
    (no task: the clock lines alone).

    With the session's index, a unique prefix of a task id stands for the task, and only
    the lines the index names are read; without one, every log file is.
    """
    from tracedray.cli.tracestore.logs import LogBatch, read_indexed_logs, read_logs
    from tracedray.telemetry.index_keys import CLOCK_KEY, key
    from tracedray.telemetry.index_reader import open_index

    index, note = open_index(session.root)
    if index is None:  # the span source says so
        return task_id, read_logs(session.logs_dir)
    try:
        task_id = index.resolve("task", task_id) if task_id else ""
        keys = [key("task", task_id), CLOCK_KEY] if task_id else [CLOCK_KEY]
        batch = read_indexed_logs(session.logs_dir, index, keys)
        # A corrupt index was rebuilt; retention dropped older parts.
        notes = tuple(text for text in (note, index.gone("logs")) if text)
        return task_id, LogBatch(batch.records, (*notes, *batch.warnings))
    finally:
        index.close()


def _indexed_trace_id(session: SessionPaths, task_id: str) -> str:
    """The trace of the task's submission (its first span's), found through the index;
    "" without an index or such a span here."""
    from tracedray.cli.tracestore.sources import SessionFileSource, SpanQuery

    source = SessionFileSource(session)
    batch = source.find_spans(SpanQuery(task_id=task_id))
    if not source.used_index or not batch.spans:
        return ""
    return min(batch.spans, key=lambda span: span.start_ns).trace_id


def _task_traces(source: SessionFileSource, task_id: str) -> SpanBatch:
    """Every span of the trace(s) ``task_id`` belongs to: through the index, the task's
    spans, then their traces'; without one, every span of the session (as before)."""
    from tracedray.cli.tracestore.sources import SpanBatch, SpanQuery

    first = source.find_spans(SpanQuery(task_id=task_id))
    if not source.used_index:
        return first
    spans = {(s.trace_id, s.span_id): s for s in first.spans}
    warnings = list(first.warnings)
    for trace_id in sorted({s.trace_id for s in first.spans}):
        found = source.find_spans(SpanQuery(trace_id=trace_id))
        spans.update(((s.trace_id, s.span_id), s) for s in found.spans)
        warnings.extend(found.warnings)
    return SpanBatch(tuple(spans.values()), tuple(warnings), first.source)


def timeline(
    output: str | None = typer.Option(
        None, "--output", "-o",
        help="File to write (default: tracedray-timeline-<session>.json here; '-' for "
             "stdout). A name ending in .perfetto-trace or .pftrace gets Perfetto's "
             "protobuf format, anything else Chrome JSON."),
    task: str | None = typer.Option(None, "--task", help="Only the trace of this task."),
    since: str | None = typer.Option(
        None, "--since", help="Only spans after this: ISO 8601 (UTC unless it says) or "
                              "-10m / -30s / -2h from now."),
    until: str | None = typer.Option(None, "--until", help="Only spans before this (as "
                                                           "--since)."),
    job: str | None = typer.Option(None, "--job", help="Only the traces of this job's tasks "
                                                       "(id or prefix)."),
    node: str | None = typer.Option(None, "--node", help="Only spans of this node (id or "
                                                         "prefix)."),
    address: str | None = typer.Option(None, "--address", help=ADDRESS_HELP),
    clock_correction: bool = typer.Option(True, "--clock-correction/--no-clock-correction",
                                          help=CLOCK_HELP),
) -> None:
    """Write a timeline (Chrome JSON or Perfetto protobuf): a row per node and per worker."""
    import time

    from tracedray.cli.output import fail
    from tracedray.cli.progress import working
    from tracedray.cli.tracestore.timeline_filter import SpanFilter, parse_moment
    from tracedray.exceptions import RayError

    now = time.time_ns()
    try:
        wanted = SpanFilter(
            since_ns=parse_moment(since, now, "--since") if since else None,
            until_ns=parse_moment(until, now, "--until") if until else None,
            job=(job or "").strip(), node=(node or "").strip())
    except RayError as exc:
        raise fail(str(exc)) from exc
    with working("reading the session's spans", json_output=output == "-") as spin:
        _timeline(output, (task or "").strip(), wanted, address, clock_correction, spin)


def _timeline(output: str | None, task_id: str, wanted: SpanFilter, address: str | None,
              clock_correction: bool, spin: Progress) -> None:
    from rich.console import Console
    from rich.markup import escape

    from tracedray.cli.tracestore.chrome_trace import layout, write_chrome_trace
    from tracedray.cli.tracestore.clock import applied_offsets, offsets_note
    from tracedray.cli.tracestore.perfetto import write_perfetto_trace
    from tracedray.cli.tracestore.sources import SessionFileSource
    from tracedray.cli.tracestore.story import (
        UnknownTask,
        close_matches,
        known_task_ids,
        unique_prefix,
    )
    from tracedray.exceptions import RayError
    from tracedray.telemetry.index_reader import suggest_ids

    err = Console(stderr=True)
    try:
        session = resolve_session(address)
    except RayError as exc:
        raise _fail(err, escape(str(exc))) from exc
    source = SessionFileSource(session)
    # The clock lines (and a task's) through the index; every log file without one.
    task_id, logs = _task_lines(session, task_id)
    if task_id:
        batch = _task_traces(source, task_id)
    else:  # a window reads the index's lines of that time; no window, every file
        batch = source.spans_in_window(wanted.since_ns, wanted.until_ns)
    _warn(err, batch.warnings)
    if task_id and task_id.lower() not in {i.lower() for i in known_task_ids(batch.spans)}:
        task_id = unique_prefix(task_id, known_task_ids(batch.spans)) or task_id
    if task_id and task_id.lower() not in {i.lower() for i in known_task_ids(batch.spans)}:
        known = known_task_ids(batch.spans) or suggest_ids(session.root, "task", task_id)
        unknown = UnknownTask(task_id, close_matches(task_id, known))
        raise _fail(err, escape(unknown.message))
    # The logs only give the clock offsets here: their own warnings belong to `tracedray logs`.
    clocks = _clocks(err, logs.records, clock_correction)
    spans = wanted.select(clocks.spans(batch.spans))
    perfetto = bool(output) and str(output).endswith((".perfetto-trace", ".pftrace"))
    path = Path(output) if output and output != "-" else \
        Path(f"tracedray-timeline-{session.session_id}.json")
    try:
        if output == "-":
            spin.stop()
            events, _ = write_chrome_trace(spans, sys.stdout, task_id=task_id)
        elif perfetto:
            with open(path, "wb") as handle:
                events = write_perfetto_trace(layout(spans, task_id=task_id), handle)
        else:
            with open(path, "w") as handle:
                events, _ = write_chrome_trace(spans, handle, task_id=task_id)
    except OSError as exc:
        raise _fail(err, escape(f"cannot write {path}: {exc}")) from exc
    spin.stop()
    clock_note = offsets_note(applied_offsets(spans))
    if clock_note:
        err.print(clock_note, highlight=False, markup=False, soft_wrap=True)
    if output == "-":
        return
    what = "packets" if perfetto else "events"
    err.print(f"wrote {events} {what} ({len(spans)} spans) to {escape(str(path))}; open it in "
              "https://ui.perfetto.dev" + ("" if perfetto else " or chrome://tracing"),
              highlight=False, soft_wrap=True)


def register(app: typer.Typer) -> None:
    app.command("trace")(trace)
    app.command("timeline")(timeline)
