"""A task's story, reconstructed from its spans and log lines (pure: no I/O).

``task_story`` answers "what happened to this task?": who submitted it from which
line, each scheduling decision, each dispatch, what it printed, how every attempt
ended (returned, raised with a traceback, or its worker died with exit code,
signal and meaning), the retries and the final state. It works the same on spans
from the session files and from Jaeger.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from types import MappingProxyType
from typing import Any

from tracedray.cli.tracestore.logs import LogRecord
from tracedray.cli.tracestore.model import SpanRecord
from tracedray.telemetry import attributes as attr

# Ray's task state names, so `trace` agrees with `list tasks`.
FINISHED = "FINISHED"
FAILED = "FAILED"
RUNNING = "RUNNING"
SUBMITTED_TO_WORKER = "SUBMITTED_TO_WORKER"
PENDING_NODE_ASSIGNMENT = "PENDING_NODE_ASSIGNMENT"

# How an attempt ended.
RETURNED = "returned"
RAISED = "raised"
WORKER_DIED = "worker_died"
DISPATCH_FAILED = "dispatch_failed"
JOB_ENDED = "job_ended"  # the GCS failed it: its job ended first (task.job_end)
NO_OUTCOME = "unfinished"

_SHORT = {RETURNED: "returned", RAISED: "raised", WORKER_DIED: "lost its worker",
          DISPATCH_FAILED: "could not be dispatched", JOB_ENDED: "ended with its job",
          NO_OUTCOME: "did not finish"}

_EMPTY: Mapping[str, Any] = MappingProxyType({})


@dataclass(frozen=True)
class StoryEvent:
    time_ns: int
    kind: str  # submitted | scheduled | dispatched | started | output | ended | job_end
    # | retry | final | slow | breakpoint
    summary: str
    attempt: int | None = None
    duration_ns: int | None = None
    details: Mapping[str, Any] = field(default_factory=lambda: _EMPTY)
    traceback: str = ""


@dataclass(frozen=True)
class AttemptOutcome:
    attempt: int
    outcome: str
    time_ns: int
    summary: str


@dataclass(frozen=True)
class TaskStory:
    task_id: str
    function: str
    trace_id: str
    final_state: str
    attempts: tuple[AttemptOutcome, ...]
    events: tuple[StoryEvent, ...]
    start_ns: int
    end_ns: int
    jaeger_link: str = ""


@dataclass(frozen=True)
class UnknownTask:
    task_id: str
    suggestions: tuple[str, ...]

    @property
    def message(self) -> str:
        text = f"no task with id {self.task_id}"
        if self.suggestions:
            text += "; did you mean: " + ", ".join(self.suggestions) + "?"
        return text


def utc_text(time_ns: int) -> str:
    moment = datetime.fromtimestamp(time_ns / 1e9, tz=timezone.utc)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def duration_text(duration_ns: int) -> str:
    seconds = duration_ns / 1e9
    if seconds < 1:
        return f"{seconds * 1000:.1f} ms"
    if seconds < 60:
        return f"{seconds:.2f} s"
    minutes, rest = divmod(int(seconds), 60)
    return f"{minutes}m{rest:02d}s"


def known_task_ids(spans: Iterable[SpanRecord], logs: Iterable[LogRecord] = ()) -> set[str]:
    ids = {str(span.get(attr.TASK_ID)) for span in spans if span.get(attr.TASK_ID)}
    ids.update(str(record.get("task_id")) for record in logs if record.get("task_id"))
    return ids


def unique_prefix(query: str, known: Iterable[str], minimum: int = 4) -> str | None:
    """The one id of ``known`` that ``query`` (``minimum`` characters at least) begins;
    None when none or several do."""
    wanted = query.strip().lower()
    found = {k for k in known if len(wanted) >= minimum and k.lower().startswith(wanted)}
    return found.pop() if len(found) == 1 else None


def close_matches(query: str, known: Iterable[str], limit: int = 5) -> tuple[str, ...]:
    """Ids sharing a prefix with ``query`` first (a cut or over-long paste), then lookalikes."""
    wanted = query.strip().lower()
    candidates = sorted(set(known))
    picked: list[str] = []
    if wanted:
        picked = [c for c in candidates if c.startswith(wanted) or wanted.startswith(c)]
    for match in difflib.get_close_matches(wanted, candidates, n=limit, cutoff=0.6):
        if match not in picked:
            picked.append(match)
    return tuple(picked[:limit])


def _origin(span: SpanRecord) -> str:
    who = span.component or "process"
    where = f" on {span.host}" if span.host else ""
    if span.host_ip:
        where += f" ({span.host_ip})"
    return f"{who} pid {span.pid if span.pid is not None else '?'}{where}"


def _short(node_id: str) -> str:
    return node_id[:12] if node_id else "?"


def exit_description(span: SpanRecord) -> str:
    """E.g. "SIGKILL (exit 137): killed by the OS, often the OOM killer; node memory was 96%
    used"."""
    code = span.int_attr(attr.EXIT_CODE)
    signal_name = span.get(attr.EXIT_SIGNAL)
    meaning = span.get(attr.EXIT_MEANING)
    head = str(signal_name) if signal_name else "exited"
    if code is not None:
        head += f" (exit {code})"
    text = head + (f": {meaning}" if meaning else "")
    memory = span.get(attr.NODE_MEMORY_PERCENT)
    if isinstance(memory, int | float) and not isinstance(memory, bool):
        text += f"; node memory was {memory:.0f}% used"
    return text


def _exception_details(span: SpanRecord) -> tuple[str, str, str]:
    for event in span.events:
        if event.name == "exception":
            return (str(event.attributes.get("exception.type", span.get("error.type", ""))),
                    str(event.attributes.get("exception.message", "")),
                    str(event.attributes.get("exception.stacktrace", "")))
    return str(span.get("error.type", "Error")), span.status_message, ""


@dataclass
class _Attempt:
    number: int
    schedules: list[SpanRecord] = field(default_factory=list)
    dispatches: list[SpanRecord] = field(default_factory=list)
    executes: list[SpanRecord] = field(default_factory=list)
    exits: list[SpanRecord] = field(default_factory=list)
    job_ends: list[SpanRecord] = field(default_factory=list)

    def spans(self) -> list[SpanRecord]:
        return self.schedules + self.dispatches + self.executes + self.exits + self.job_ends

    def first_ns(self) -> int:
        return min((s.start_ns for s in self.spans()), default=0)


def _group_attempts(task_spans: Sequence[SpanRecord]) -> dict[int, _Attempt]:
    attempts: dict[int, _Attempt] = {}
    unnumbered_exits: list[SpanRecord] = []
    for span in task_spans:
        number = span.int_attr(attr.TASK_ATTEMPT)
        if span.name == "worker.exit" and number is None:
            unnumbered_exits.append(span)
            continue
        if number is None:
            continue
        bucket = attempts.setdefault(number, _Attempt(number))
        target = {"task.schedule": bucket.schedules, "task.dispatch": bucket.dispatches,
                  "task.execute": bucket.executes, "worker.exit": bucket.exits,
                  "task.job_end": bucket.job_ends}.get(span.name)
        if target is not None:
            target.append(span)
    for exit_span in unnumbered_exits:
        # A worker exit without an attempt belongs to the latest attempt begun before it.
        started = [a for a in attempts.values() if a.first_ns() <= exit_span.start_ns]
        if started:
            max(started, key=lambda a: a.first_ns()).exits.append(exit_span)
    for bucket in attempts.values():
        for spans in (bucket.schedules, bucket.dispatches, bucket.executes, bucket.exits,
                      bucket.job_ends):
            spans.sort(key=lambda s: s.start_ns)
    return attempts


def _attempt_events(attempt: _Attempt) -> tuple[list[StoryEvent], AttemptOutcome]:
    events: list[StoryEvent] = []
    n = attempt.number
    for span in attempt.schedules:
        chosen = str(span.get(attr.SCHEDULING_CHOSEN_NODE) or span.node_id)
        reason = span.get(attr.SCHEDULING_REASON) or "no reason recorded"
        details = {"chosen_node": chosen, "reason": reason, "recorded_by": _origin(span),
                   "candidates": span.get(attr.SCHEDULING_CANDIDATES, []),
                   "local_bytes": span.get(attr.SCHEDULING_LOCAL_BYTES, []),
                   "queue_lengths": span.get(attr.SCHEDULING_QUEUE_LENGTHS, [])}
        events.append(StoryEvent(span.start_ns, "scheduled",
                                 f"scheduled on node {_short(chosen)}: {reason}",
                                 n, span.duration_ns, MappingProxyType(details)))
    for span in attempt.dispatches:
        ip = span.get(attr.NODE_IP, "?")
        wpid = span.get(attr.WORKER_PID, "?")
        details = {"node_id": span.get(attr.NODE_ID, ""), "node_ip": ip, "worker_pid": wpid,
                   "worker_id": span.get(attr.WORKER_ID, ""), "status": span.status_code}
        events.append(StoryEvent(span.start_ns, "dispatched",
                                 f"dispatched to worker pid {wpid} on node {ip}", n,
                                 span.duration_ns, MappingProxyType(details)))
    for span in attempt.executes:
        details = {"node_id": span.node_id, "worker_id": span.get(attr.WORKER_ID, ""),
                   "worker_pid": span.pid, "host": span.host}
        events.append(StoryEvent(span.start_ns, "started",
                                 f"started in worker pid {span.pid} on {span.host or '?'}", n,
                                 span.duration_ns, MappingProxyType(details)))
        events.extend(_live_debugging_events(span, n))
    if not attempt.executes:
        events.extend(_killed_start(span, n) for span in attempt.exits
                      if span.int_attr(attr.TASK_STARTED) is not None)
    outcome, end_event = _attempt_end(attempt)
    if end_event is not None:
        events.append(end_event)
    if attempt.job_ends and outcome.outcome in (WORKER_DIED, DISPATCH_FAILED):
        # It failed on its own as its job ended: the GCS's verdict, which `list tasks`
        # shows, is said too.
        events.append(_job_end_event(attempt.job_ends[-1], n, "job_end",
                                     "the GCS recorded it failed"))
    return events, outcome


def _live_debugging_events(span: SpanRecord, attempt: int) -> list[StoryEvent]:
    """A task.execute's ``task.slow`` (core/worker/slow_tasks.py) and ``debugger.waiting``
    (core/worker/remote_debugger.py) events, as the story's."""
    out = []
    for event in span.events:
        a = event.attributes
        if event.name == "task.slow":
            details = {"running_for_s": a.get("tracedray.task.running_for_s"),
                       "median_s": a.get("tracedray.task.median_s"),
                       "stack": a.get("tracedray.task.stack", "")}
            out.append(StoryEvent(event.time_ns, "slow",
                                  f"flagged slow after {a.get('tracedray.task.running_for_s')}s "
                                  f"(its function's median: {a.get('tracedray.task.median_s')}s)",
                                  attempt, 0, MappingProxyType(details)))
        elif event.name == "debugger.waiting":
            where = a.get("tracedray.debugger.location", "?")
            out.append(StoryEvent(event.time_ns, "breakpoint",
                                  f"paused at a breakpoint ({where}) for `tracedray debug`",
                                  attempt, 0, MappingProxyType(dict(a))))
    return out


def _job_end_event(span: SpanRecord, attempt: int, kind: str, what: str) -> StoryEvent:
    reason = str(span.get(attr.TASK_FAILURE_REASON) or span.status_message)
    error_type = str(span.get(attr.ERROR_TYPE, ""))
    return StoryEvent(span.start_ns, kind, f"{what}: {reason}", attempt, None,
                      MappingProxyType({"outcome": JOB_ENDED, "error_type": error_type,
                                        "reason": reason, "recorded_by": _origin(span)}))


def _killed_start(exit_span: SpanRecord, attempt: int) -> StoryEvent:
    """The start of an attempt whose worker died before its task.execute span could end,
    as the raylet read it from the worker's flight recorder (worker.exit)."""
    started_ns = exit_span.int_attr(attr.TASK_STARTED) or exit_span.start_ns
    wpid = exit_span.get(attr.WORKER_PID, "?")
    details = {"node_id": exit_span.node_id, "worker_id": exit_span.get(attr.WORKER_ID, ""),
               "worker_pid": wpid, "host": exit_span.host, "recorded_by": _origin(exit_span)}
    return StoryEvent(started_ns, "started", f"started in worker pid {wpid} on "
                      f"{exit_span.host or '?'} (read from its flight recorder after it died)",
                      attempt,
                      max(0, exit_span.start_ns - started_ns), MappingProxyType(details))


def _attempt_end(attempt: _Attempt) -> tuple[AttemptOutcome, StoryEvent | None]:
    n = attempt.number
    execute = attempt.executes[-1] if attempt.executes else None
    dispatch = attempt.dispatches[-1] if attempt.dispatches else None
    # Its caller got the worker's reply: the span ended after it began, and not because
    # the task went back unstarted (a note says why it ended without a reply).
    replied = (dispatch is not None and dispatch.end_ns > dispatch.start_ns
               and not dispatch.get(attr.DISPATCH_NOTE))
    if execute is not None and not execute.is_error:
        summary = f"attempt {n} returned"
        return (AttemptOutcome(n, RETURNED, execute.end_ns, summary),
                StoryEvent(execute.end_ns, "ended", summary, n, execute.duration_ns,
                           MappingProxyType({"outcome": RETURNED})))
    if execute is not None:
        error_type, message, traceback = _exception_details(execute)
        summary = f"attempt {n} raised {error_type}: {message}".rstrip(": ")
        return (AttemptOutcome(n, RAISED, execute.end_ns, summary),
                StoryEvent(execute.end_ns, "ended", summary, n, execute.duration_ns,
                           MappingProxyType({"outcome": RAISED, "error_type": error_type,
                                             "message": message}), traceback))
    if attempt.exits:
        exit_span = attempt.exits[-1]
        wpid = exit_span.get(attr.WORKER_PID, "?")
        summary = f"attempt {n}: worker pid {wpid} died: {exit_description(exit_span)}"
        details = {"outcome": WORKER_DIED, "worker_pid": wpid,
                   "exit_code": exit_span.int_attr(attr.EXIT_CODE),
                   "signal": exit_span.get(attr.EXIT_SIGNAL),
                   "meaning": exit_span.get(attr.EXIT_MEANING),
                   "node_memory_percent": exit_span.get(attr.NODE_MEMORY_PERCENT),
                   "node_id": exit_span.node_id}
        return (AttemptOutcome(n, WORKER_DIED, exit_span.start_ns, summary),
                StoryEvent(exit_span.start_ns, "ended", summary, n, None,
                           MappingProxyType(details)))
    if dispatch is not None and dispatch.is_error:
        summary = f"attempt {n} failed: {dispatch.status_message or 'dispatch error'}"
        return (AttemptOutcome(n, DISPATCH_FAILED, dispatch.end_ns, summary),
                StoryEvent(dispatch.end_ns, "ended", summary, n, dispatch.duration_ns,
                           MappingProxyType({"outcome": DISPATCH_FAILED})))
    if attempt.job_ends and not replied:
        # The GCS's verdict, as in `list tasks`: an end of the task's own (above, or a
        # reply its caller got, below) beats it.
        event = _job_end_event(attempt.job_ends[-1], n, "ended",
                               f"attempt {n} failed by the GCS")
        return AttemptOutcome(n, JOB_ENDED, event.time_ns, event.summary), event
    if dispatch is not None and replied:
        # The caller got a reply but the worker's execute span is not here (e.g. a
        # remote node's files were not read): the caller's view still says "returned".
        summary = f"attempt {n} returned (reply received; the worker's execute span is missing)"
        return (AttemptOutcome(n, RETURNED, dispatch.end_ns, summary),
                StoryEvent(dispatch.end_ns, "ended", summary, n, None,
                           MappingProxyType({"outcome": RETURNED})))
    return AttemptOutcome(n, NO_OUTCOME, attempt.first_ns(), f"attempt {n} has not ended"), None


def _final_state(submit: SpanRecord | None, outcomes: Sequence[AttemptOutcome],
                 attempts: Mapping[int, _Attempt]) -> str:
    if submit is not None and submit.get(attr.TASK_STATE):
        return str(submit.get(attr.TASK_STATE))
    if not outcomes:
        return PENDING_NODE_ASSIGNMENT
    last = outcomes[-1]
    if last.outcome == RETURNED:
        return FINISHED
    if last.outcome in (RAISED, WORKER_DIED, DISPATCH_FAILED, JOB_ENDED):
        return FAILED
    current = attempts[last.attempt]
    if current.executes:
        return RUNNING
    return SUBMITTED_TO_WORKER if current.dispatches else PENDING_NODE_ASSIGNMENT


def _output_attempt(record: LogRecord, attempts: Mapping[int, _Attempt]) -> int | None:
    span_id = record.get("span_id")
    for attempt in attempts.values():
        if any(span.span_id == span_id for span in attempt.executes):
            return attempt.number
    for attempt in sorted(attempts.values(), key=lambda a: a.first_ns(), reverse=True):
        if attempt.first_ns() <= record.time_ns:
            return attempt.number
    return None


def _output_events(logs: Iterable[LogRecord], task_id: str,
                   attempts: Mapping[int, _Attempt]) -> list[StoryEvent]:
    events = []
    for record in logs:
        if record.get("task_id") != task_id or record.event != "task.output":
            continue
        stream = str(record.get("stream", "stdout"))
        line = str(record.get("line", ""))
        events.append(StoryEvent(record.time_ns, "output", f"{stream}: {line}",
                                 _output_attempt(record, attempts), None,
                                 MappingProxyType({"stream": stream, "line": line,
                                                   "pid": record.get("pid")})))
    return events


def _submit_event(submit: SpanRecord) -> StoryEvent:
    call_site = submit.get(attr.TASK_CALL_SITE) or "an unknown line"
    details = {"component": submit.component, "pid": submit.pid, "host": submit.host,
               "ip": submit.host_ip, "call_site": submit.get(attr.TASK_CALL_SITE, ""),
               "function": submit.get(attr.TASK_FUNCTION, ""),
               "kind": submit.get(attr.TASK_KIND, ""), "job_id": submit.get(attr.JOB_ID, ""),
               "actor_id": submit.get(attr.ACTOR_ID, ""),
               "max_retries": submit.int_attr(attr.TASK_MAX_RETRIES)}
    return StoryEvent(submit.start_ns, "submitted",
                      f"submitted by {_origin(submit)} from {call_site}", None,
                      submit.duration_ns, MappingProxyType(details))


def task_story(spans: Sequence[SpanRecord], logs: Sequence[LogRecord], task_id: str,
               jaeger_url: str = "") -> TaskStory | UnknownTask:
    wanted = task_id.strip().lower()
    task_spans = [span for span in spans if str(span.get(attr.TASK_ID, "")).lower() == wanted]
    if not task_spans:
        return UnknownTask(task_id, close_matches(task_id, known_task_ids(spans, logs)))
    submits = sorted((s for s in task_spans if s.name == "task.submit"), key=lambda s: s.start_ns)
    submit = submits[0] if submits else None
    attempts = _group_attempts(task_spans)

    events: list[StoryEvent] = []
    if submit is not None:
        events.append(_submit_event(submit))
    outcomes: list[AttemptOutcome] = []
    max_retries = submit.int_attr(attr.TASK_MAX_RETRIES) if submit is not None else None
    for number in sorted(attempts):
        attempt_events, outcome = _attempt_events(attempts[number])
        if outcomes:
            of = f" of {max_retries + 1}" if max_retries is not None else ""
            events.append(StoryEvent(attempts[number].first_ns(), "retry",
                                     f"retry: attempt {number}{of} after attempt "
                                     f"{outcomes[-1].attempt} {_SHORT[outcomes[-1].outcome]}",
                                     number))
        events.extend(attempt_events)
        outcomes.append(outcome)
    events.extend(_output_events(logs, task_spans[0].get(attr.TASK_ID), attempts))

    order = {"submitted": 0, "retry": 1, "scheduled": 2, "dispatched": 3, "started": 4,
             "output": 5, "ended": 6, "job_end": 7}
    events.sort(key=lambda e: (e.time_ns, order.get(e.kind, 9)))
    start_ns = min(span.start_ns for span in task_spans)
    end_ns = max([span.end_ns for span in task_spans] + [e.time_ns for e in events])
    state = _final_state(submit, outcomes, attempts)
    tries = len(outcomes)
    events.append(StoryEvent(end_ns, "final",
                             f"final state {state} after {tries} attempt{'s' * (tries != 1)}",
                             None, end_ns - start_ns))
    trace_id = (submit or task_spans[0]).trace_id
    function = str((submit or task_spans[0]).get(attr.TASK_FUNCTION) or
                   next((s.get(attr.TASK_FUNCTION) for s in task_spans
                         if s.get(attr.TASK_FUNCTION)), ""))
    link = f"{jaeger_url.rstrip('/')}/trace/{trace_id}" if jaeger_url else ""
    return TaskStory(task_id=str(task_spans[0].get(attr.TASK_ID)), function=function,
                     trace_id=trace_id, final_state=state, attempts=tuple(outcomes),
                     events=tuple(events), start_ns=start_ns, end_ns=end_ns, jaeger_link=link)

