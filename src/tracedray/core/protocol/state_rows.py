"""Pure conversions from the cluster's protos to the state API's rows (plain dicts).

Rows are JSON-ready dicts whose keys are the public field names of
``tracedray list``/``tracedray memory --format json`` and ``tracedray.util.state``.
Nothing here does I/O, so every rule (filters, limits, summaries, which size or
status a borrowed reference shows) is unit-testable on hand-built protos.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tracedray.exceptions import ConfigError

if TYPE_CHECKING:
    from tracedray._proto.v1 import core_worker_pb2, gcs_pb2, raylet_pb2

Row = dict[str, Any]

# `tracedray memory` / `list objects` fields, in display order (issue 4 names them).
MEMORY_FIELDS = ("ip", "pid", "type", "call_site", "object_ref", "size", "reference_type",
                 "status", "node_id")
TASK_FIELDS = ("task_id", "attempt_number", "name", "state", "type", "job_id", "actor_id",
               "node_id", "worker_id", "worker_pid", "error_type", "error_message", "call_site",
               "parent_task_id", "trace_id", "required_resources", "running_for_s", "slow")
ACTOR_FIELDS = ("actor_id", "class_name", "state", "name", "namespace", "job_id", "node_id", "pid",
                "num_restarts", "death_cause", "is_detached", "start_time", "end_time")
NODE_FIELDS = ("node_id", "ip", "state", "is_head", "resources", "resources_available", "pid",
               "hostname", "object_store_used", "object_store_capacity", "start_time",
               "end_time", "death_reason", "clock_offset_s", "clock_error_s",
               "version_drift")
WORKER_FIELDS = ("worker_id", "node_id", "ip", "pid", "state", "actor_id", "exit_code",
                 "exit_signal", "exit_meaning", "start_time", "end_time")
JOB_FIELDS = ("job_id", "state", "entrypoint", "namespace", "driver_ip", "driver_pid",
              "start_time", "end_time", "end_reason")


class StateList(list[Row]):
    """Rows of one listing, plus how many matched in all: a limit never cuts silently."""

    def __init__(self, rows: Iterable[Row], total: int) -> None:
        super().__init__(rows)
        self.total = total

    @property
    def left_out(self) -> int:
        return max(0, self.total - len(self))


@dataclass(frozen=True)
class Filter:
    key: str
    value: str
    negate: bool

    def matches(self, row: Mapping[str, Any]) -> bool:
        actual = row.get(self.key)
        text = "" if actual is None else str(actual)
        # States and kinds are upper case by convention; accept "running" for RUNNING.
        equal = text == self.value or text.lower() == self.value.lower()
        return equal != self.negate


def parse_filter(text: str) -> Filter:
    """``key=value`` or ``key!=value``, as in ``ray list tasks --filter``."""
    if "!=" in text:
        key, _, value = text.partition("!=")
        negate = True
    elif "=" in text:
        key, _, value = text.partition("=")
        negate = False
    else:
        raise ConfigError(f"--filter {text!r}: expected key=value or key!=value")
    if not key.strip():
        raise ConfigError(f"--filter {text!r}: the key is empty")
    return Filter(key.strip(), value.strip(), negate)


def apply_filters(rows: Iterable[Row], filters: Sequence[str | Filter],
                  fields: Sequence[str]) -> list[Row]:
    parsed = [f if isinstance(f, Filter) else parse_filter(f) for f in filters]
    for f in parsed:
        if f.key not in fields:
            raise ConfigError(f"cannot filter on {f.key!r}; known keys: {', '.join(fields)}")
    return [row for row in rows if all(f.matches(row) for f in parsed)]


def limit_rows(rows: Sequence[Row], limit: int | None) -> StateList:
    if limit is not None and limit < 0:
        raise ConfigError(f"limit must be >= 0, got {limit}")
    kept = rows if not limit else rows[:limit]
    return StateList(kept, total=len(rows))


# --- tasks
def attempt_timing(record: gcs_pb2.TaskRecord, now: float) -> tuple[float | None, bool]:
    """How long the task's latest attempt has been running (None unless it runs), and
    whether its worker flagged it slow (``task.slow``, core/worker/slow_tasks.py)."""
    started: float | None = None
    slow = False
    for event in record.events:
        if event.attempt != record.attempt:
            continue
        times = event.state_times
        if "RUNNING" in times:
            started = times["RUNNING"]
        slow = slow or "SLOW" in times
    running = record.state == "RUNNING" and started is not None
    return (round(max(now - started, 0.0), 3) if running and started else None), slow


def task_row(record: gcs_pb2.TaskRecord, detail: bool = False,
             now: float | None = None) -> Row:
    running_for_s, slow = attempt_timing(record, time.time() if now is None else now)
    row: Row = {
        "task_id": record.task_id.hex(), "attempt_number": record.attempt,
        "name": record.function_name, "state": record.state, "type": record.kind,
        "job_id": record.job_id.hex(), "actor_id": record.actor_id.hex(),
        "node_id": record.node_id, "worker_id": record.worker_id,
        "worker_pid": record.worker_pid, "error_type": record.error_type,
        "error_message": record.error_message, "call_site": record.call_site,
        "parent_task_id": record.parent_task_id.hex(), "trace_id": record.trace_id,
        "required_resources": dict(record.resources), "running_for_s": running_for_s,
        "slow": slow}
    if detail:
        row["events"] = state_transitions(record)
    return row


def state_transitions(record: gcs_pb2.TaskRecord) -> list[Row]:
    """Each state the task reached, in time order: an event carries every state its
    process saw in one flush (a worker's SUBMITTED_TO_WORKER, RUNNING and FINISHED), and
    each is listed, with the event's attempt and place. ``error_type`` (how the attempt
    ended, e.g. the GCS's OWNER_DIED verdict) goes with the event's own, last state."""
    rows = []
    seen = set()
    for e in record.events:
        for state, at in (e.state_times.items() or [(e.state, e.time)]):
            # One state reported twice (by each worker a task went to and came back
            # from unstarted, or by a worker and its caller's copy) is one transition.
            if (state, at, e.attempt) in seen:
                continue
            seen.add((state, at, e.attempt))
            rows.append({"state": state, "time": at, "attempt": e.attempt,
                         "node_id": e.node_id, "worker_pid": e.worker_pid,
                         "error_type": e.error_type if state == e.state else ""})
    # Stable: of two states at one moment, the one recorded first stays first.
    rows.sort(key=lambda r: r["time"])
    return rows


def summarize_tasks(rows: Iterable[Row]) -> list[Row]:
    """One row per function: how many tasks in each state (Ray's ``summary tasks``), and
    how many of the failed ones by error type (``OWNER_DIED``, ``ValueError``, …)."""
    groups: dict[str, collections.Counter[str]] = {}
    errors: dict[str, collections.Counter[str]] = {}
    kinds: dict[str, str] = {}
    for row in rows:
        name = row.get("name") or "(unknown)"
        state = row.get("state") or "UNKNOWN"
        groups.setdefault(name, collections.Counter())[state] += 1
        failed = errors.setdefault(name, collections.Counter())
        if state == "FAILED":
            failed[row.get("error_type") or "(none)"] += 1
        kinds.setdefault(name, row.get("type") or "")
    return [{"func_or_class_name": name, "type": kinds[name], "total": sum(counts.values()),
             "state_counts": dict(sorted(counts.items())),
             "error_type_counts": dict(sorted(errors[name].items()))}
            for name, counts in sorted(groups.items(), key=lambda kv: (-sum(kv[1].values()),
                                                                        kv[0]))]


# --- actors
def actor_row(info: gcs_pb2.ActorInfo) -> Row:
    return {"actor_id": info.actor_id.hex(), "class_name": info.class_name, "state": info.state,
            "name": info.name, "namespace": info.namespace, "job_id": info.job_id.hex(),
            "node_id": info.node_id, "pid": info.pid, "num_restarts": info.num_restarts,
            "death_cause": info.death_cause, "is_detached": info.detached,
            "start_time": info.start_time or None, "end_time": info.end_time or None}


def summarize_actors(rows: Iterable[Row]) -> list[Row]:
    groups: dict[str, collections.Counter[str]] = {}
    for row in rows:
        groups.setdefault(row.get("class_name") or "(unknown)",
                          collections.Counter())[row.get("state") or "UNKNOWN"] += 1
    return [{"class_name": name, "total": sum(c.values()), "state_counts": dict(sorted(c.items()))}
            for name, c in sorted(groups.items())]


# --- nodes and workers
def node_row(node: gcs_pb2.NodeWithLoad, stats: raylet_pb2.NodeStats | None) -> Row:
    info = node.info
    available = dict(stats.resources_available) if stats else dict(node.resources_available)
    return {"node_id": info.node_id, "ip": info.raylet.ip, "state": info.state,
            "is_head": info.is_head, "resources": dict(info.resources_total),
            "resources_available": available,
            "pid": (stats.pid if stats else 0) or info.raylet.pid,
            "hostname": info.hostname,
            "object_store_used": stats.store_used if stats else node.store_used,
            "object_store_capacity": (stats.store_capacity if stats else 0)
            or info.object_store_capacity,
            "start_time": info.start_time or None, "end_time": info.end_time or None,
            "death_reason": info.death_reason, "clock_offset_s": info.clock_offset_s,
            # The offset's error bound: half the round trip it was measured over.
            "clock_error_s": info.clock_rtt_s / 2,
            "version_drift": list(info.version_drift)}


def worker_rows(stats: raylet_pb2.NodeStats) -> list[Row]:
    return [{"worker_id": w.worker_id, "node_id": stats.node_id, "ip": stats.ip, "pid": w.pid,
             "state": w.state, "actor_id": w.actor_id, "exit_code": w.exit_code,
             "exit_signal": w.exit_signal, "exit_meaning": w.exit_meaning,
             "start_time": w.started_at or None, "end_time": w.ended_at or None}
            for w in stats.workers]


# --- jobs
def job_row(job: gcs_pb2.JobInfo) -> Row:
    return {"job_id": job.job_id.hex(), "state": job.state, "entrypoint": job.entrypoint,
            "namespace": job.namespace, "driver_ip": job.driver.ip, "driver_pid": job.driver.pid,
            "start_time": job.start_time or None, "end_time": job.end_time or None,
            "end_reason": job.end_reason}


# --- objects and references
def memory_rows(tables: Iterable[core_worker_pb2.ReferenceTable],
                stored: Iterable[raylet_pb2.StoredObjectRow] = ()) -> list[Row]:
    """One row per (object, holder) from every core worker's reference table.

    A borrower does not know an object's size or its producing task's status; the
    owner's row (or the store's entry) does, so borrowed rows take them from there.
    """
    tables = list(tables)
    sizes: dict[bytes, int] = {}
    statuses: dict[bytes, str] = {}
    for obj in stored:
        sizes.setdefault(obj.object_id, obj.size)
    for table in tables:
        for ref in table.rows:
            if ref.size >= 0:
                sizes[ref.object_id] = ref.size
            if ref.task_status:
                statuses[ref.object_id] = ref.task_status
    rows: list[Row] = []
    for table in tables:
        for ref in table.rows:
            size = ref.size if ref.size >= 0 else sizes.get(ref.object_id, -1)
            rows.append({"ip": table.ip or table.address.ip, "pid": table.address.pid,
                         "type": table.component, "call_site": ref.call_site,
                         "object_ref": ref.object_id.hex(), "size": size,
                         "reference_type": ref.reference_type,
                         "status": ref.task_status or statuses.get(ref.object_id, ""),
                         "node_id": ref.node_id})
    return rows


def summarize_objects(rows: Iterable[Row]) -> list[Row]:
    """Per call site: distinct objects, references, bytes (each object counted once)."""
    groups: dict[str, dict[str, Any]] = {}
    for row in rows:
        group = groups.setdefault(row.get("call_site") or "(unknown)",
                                  {"objects": {}, "references": 0,
                                   "reference_types": collections.Counter()})
        group["objects"][row["object_ref"]] = max(0, int(row.get("size") or 0))
        group["references"] += 1
        group["reference_types"][row.get("reference_type") or ""] += 1
    out = [{"call_site": site, "objects": len(g["objects"]), "references": g["references"],
            "total_size": sum(g["objects"].values()),
            "reference_types": dict(sorted(g["reference_types"].items()))}
           for site, g in groups.items()]
    return sorted(out, key=lambda r: (-r["total_size"], r["call_site"]))
