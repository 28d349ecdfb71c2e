"""Hand-built OTLP JSON spans and structlog lines in the runtime's on-disk contract.

The scenarios mirror what the runtime records for one task: a driver submits,
a raylet schedules, the driver dispatches, a worker executes (or is SIGKILLed and
the raylet records worker.exit), and the worker's prints become task.output lines.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from tracedray.telemetry import attributes as attr

T0 = 1_767_225_600_000_000_000  # 2026-01-01T00:00:00Z in ns
MS = 1_000_000
NODE_A = "a" * 28 + "0001"  # head node
NODE_B = "b" * 28 + "0002"
TASK = "c0ffee00" * 3
TRACE = "1234567890abcdef1234567890abcdef"


def value(v: Any) -> dict[str, Any]:
    if isinstance(v, bool):
        return {"boolValue": v}
    if isinstance(v, int):
        return {"intValue": str(v)}  # OTLP JSON: 64-bit ints are strings
    if isinstance(v, float):
        return {"doubleValue": v}
    if isinstance(v, list | tuple):
        return {"arrayValue": {"values": [value(i) for i in v]}}
    return {"stringValue": str(v)}


def kvs(mapping: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"key": k, "value": value(v)} for k, v in mapping.items()]


@dataclass(frozen=True)
class Proc:
    component: str
    pid: int
    node_id: str
    host: str
    ip: str

    def resource(self) -> dict[str, Any]:
        return {"attributes": kvs({
            "service.name": f"tracedray-{self.component}", "host.name": self.host,
            "host.ip": self.ip, "process.pid": self.pid, attr.RESOURCE_NODE_ID: self.node_id,
            attr.RESOURCE_SESSION_ID: "session_test", attr.RESOURCE_COMPONENT: self.component})}


DRIVER = Proc("driver", 100, NODE_A, "head", "10.0.0.1")
RAYLET_A = Proc("raylet", 50, NODE_A, "head", "10.0.0.1")
RAYLET_B = Proc("raylet", 60, NODE_B, "node-b", "10.0.0.2")
WORKER_1 = Proc("worker", 201, NODE_B, "node-b", "10.0.0.2")
WORKER_2 = Proc("worker", 202, NODE_B, "node-b", "10.0.0.2")


@dataclass
class Recorder:
    """Collects spans per process (like the per-process trace files) and log lines."""

    spans: dict[Proc, list[dict[str, Any]]] = field(default_factory=dict)
    logs: dict[Proc, list[dict[str, Any]]] = field(default_factory=dict)
    _next_span: int = 1

    def span(self, proc: Proc, name: str, start_ms: float, end_ms: float,
             attributes: dict[str, Any], *, parent: str = "", trace: str = TRACE,
             error: str | None = None, events: list[dict[str, Any]] | None = None) -> str:
        span_id = f"{self._next_span:016x}"
        self._next_span += 1
        raw: dict[str, Any] = {
            "traceId": trace, "spanId": span_id, "name": name, "kind": 1,
            "startTimeUnixNano": str(T0 + int(start_ms * MS)),
            "endTimeUnixNano": str(T0 + int(end_ms * MS)),
            "attributes": kvs(attributes), "status": {}}
        if parent:
            raw["parentSpanId"] = parent
        if error is not None:
            raw["status"] = {"code": 2, "message": error}
        if events:
            raw["events"] = events
        self.spans.setdefault(proc, []).append(raw)
        return span_id

    def log(self, proc: Proc, at_ms: float, event: str, **fields: Any) -> None:
        moment = datetime.fromtimestamp((T0 + int(at_ms * MS)) / 1e9, tz=timezone.utc)
        line = {"timestamp": moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ"), "level": "info",
                "event": event, "component": proc.component, "host": proc.host,
                "ip": proc.ip, "pid": proc.pid, "node_id": proc.node_id, **fields}
        self.logs.setdefault(proc, []).append(line)

    def resource_spans(self) -> list[dict[str, Any]]:
        return [{"resource": proc.resource(), "scopeSpans": [{"scope": {"name": "tracedray"},
                                                               "spans": spans}]}
                for proc, spans in self.spans.items()]

    def write_session(self, traces_dir: Path, logs_dir: Path) -> None:
        """One file per process, one span per line (what the runtime's writer does)."""
        traces_dir.mkdir(parents=True, exist_ok=True)
        logs_dir.mkdir(parents=True, exist_ok=True)
        for proc, spans in self.spans.items():
            with open(traces_dir / f"{proc.component}-{proc.pid}.jsonl", "a") as handle:
                for raw in spans:
                    line = {"resourceSpans": [{"resource": proc.resource(), "scopeSpans": [
                        {"scope": {"name": "tracedray"}, "spans": [raw]}]}]}
                    handle.write(json.dumps(line) + "\n")
        for proc, lines in self.logs.items():
            with open(logs_dir / f"{proc.component}-{proc.pid}.jsonl", "a") as handle:
                for line in lines:
                    handle.write(json.dumps(line) + "\n")


def _submit(rec: Recorder, task: str = TASK, max_retries: int = 3, end_ms: float = 5) -> str:
    return rec.span(DRIVER, "task.submit", 0, end_ms, {
        attr.TASK_ID: task, attr.TASK_FUNCTION: "demo.work", attr.TASK_KIND: "normal",
        attr.TASK_CALL_SITE: "demo.py:12 in main", attr.JOB_ID: "01000000",
        attr.TASK_MAX_RETRIES: max_retries})


def _schedule(rec: Recorder, parent: str, attempt: int, at_ms: float,
              task: str = TASK) -> None:
    rec.span(RAYLET_A, "task.schedule", at_ms, at_ms + 1, {
        attr.TASK_ID: task, attr.TASK_ATTEMPT: attempt,
        attr.SCHEDULING_CANDIDATES: [NODE_A, NODE_B], attr.SCHEDULING_LOCAL_BYTES: [0, 1048576],
        attr.SCHEDULING_QUEUE_LENGTHS: [3, 0],
        attr.SCHEDULING_REASON: "node holds the most input bytes (1.0 MB)",
        attr.SCHEDULING_CHOSEN_NODE: NODE_B}, parent=parent)


def _dispatch(rec: Recorder, parent: str, attempt: int, worker: Proc, start_ms: float,
              end_ms: float, error: str | None = None, task: str = TASK) -> None:
    rec.span(DRIVER, "task.dispatch", start_ms, end_ms, {
        attr.TASK_ID: task, attr.TASK_ATTEMPT: attempt, attr.NODE_ID: worker.node_id,
        attr.NODE_IP: worker.ip, attr.WORKER_ID: f"w{worker.pid}", attr.WORKER_PID: worker.pid},
        parent=parent, error=error)


def _execute(rec: Recorder, parent: str, attempt: int, worker: Proc, start_ms: float,
             end_ms: float, task: str = TASK, **kwargs: Any) -> str:
    return rec.span(worker, "task.execute", start_ms, end_ms, {
        attr.TASK_ID: task, attr.TASK_FUNCTION: "demo.work", attr.TASK_ATTEMPT: attempt,
        attr.NODE_ID: worker.node_id, attr.WORKER_ID: f"w{worker.pid}"}, parent=parent, **kwargs)


def _output(rec: Recorder, worker: Proc, at_ms: float, line: str, span_id: str = "",
            task: str = TASK, stream: str = "stdout") -> None:
    rec.log(worker, at_ms, "task.output", stream=stream, line=line, task_id=task,
            trace_id=TRACE, span_id=span_id, job_id="01000000", worker_id=f"w{worker.pid}")


def success_scenario(rec: Recorder | None = None) -> Recorder:
    rec = rec or Recorder()
    submit = _submit(rec)
    _schedule(rec, submit, 0, 1)
    _dispatch(rec, submit, 0, WORKER_1, 2, 30)
    execute = _execute(rec, submit, 0, WORKER_1, 5, 25)
    _output(rec, WORKER_1, 10, "hello from work", execute)
    return rec


TRACEBACK = ('Traceback (most recent call last):\n  File "demo.py", line 7, in work\n'
             '    raise ValueError("bad input 42")\nValueError: bad input 42\n')


def raised_scenario(rec: Recorder | None = None) -> Recorder:
    rec = rec or Recorder()
    submit = _submit(rec, max_retries=0)
    _schedule(rec, submit, 0, 1)
    _dispatch(rec, submit, 0, WORKER_1, 2, 30)
    execute = _execute(
        rec, submit, 0, WORKER_1, 5, 25, error="ValueError: bad input 42",
        events=[{"timeUnixNano": str(T0 + 24 * MS), "name": "exception", "attributes": kvs({
            "exception.type": "ValueError", "exception.message": "bad input 42",
            "exception.stacktrace": TRACEBACK})}])
    _output(rec, WORKER_1, 20, "about to fail", execute, stream="stderr")
    return rec


def sigkill_retry_scenario(rec: Recorder | None = None) -> Recorder:
    """Attempt 0's worker is SIGKILLed (no execute span); attempt 1 succeeds elsewhere."""
    rec = rec or Recorder()
    submit = _submit(rec, end_ms=200)
    _schedule(rec, submit, 0, 1)
    _dispatch(rec, submit, 0, WORKER_1, 2, 60, error="worker died: SIGKILL")
    _output(rec, WORKER_1, 10, "attempt zero starting")  # no span id: matched by time
    rec.span(RAYLET_B, "worker.exit", 55, 55.5, {
        attr.WORKER_PID: 201, attr.WORKER_ID: "w201", attr.EXIT_CODE: 137,
        attr.EXIT_SIGNAL: "SIGKILL", attr.EXIT_MEANING: "killed by the OS, often the OOM killer",
        attr.NODE_MEMORY_PERCENT: 96.0, attr.TASK_ID: TASK, attr.TASK_ATTEMPT: 0},
        parent=submit)
    _schedule(rec, submit, 1, 70)
    _dispatch(rec, submit, 1, WORKER_2, 72, 150)
    execute = _execute(rec, submit, 1, WORKER_2, 80, 140)
    _output(rec, WORKER_2, 90, "attempt one starting", execute)
    _output(rec, WORKER_2, 130, "done", execute)
    return rec
