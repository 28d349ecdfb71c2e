"""Answers about a cluster that has stopped or died, from its session files.

``tracedray memory`` (``--stats-only`` too), ``list``, ``get`` and ``summary`` ask a
running cluster; when its GCS does not answer, :func:`open_client` returns a
:class:`PostmortemClient` instead, which answers the same calls from the session
folder:

- ``gcs.sqlite3`` (opened read-only): tasks, actors, jobs and nodes as the GCS left
  them (a GCS that stops writes its whole tables there; one that was killed leaves
  what it had flushed);
- ``traces/``: every copy that entered or left each node's store (``object.seal``,
  ``object.put``, free, spill, restore, evict), who owned each object (its
  ``object.put``, or the ``task.submit`` of the task that returned it) and each
  worker's start and exit;
- ``logs/``: when each process ended (``process.exit``, the raylet's ``driver.exit``)
  and the stores' refusals (``object store full``).

The references are the last known ones: each object still in a store, held by its
owner. An owner that ended while holding objects (a driver that died of
ObjectStoreFullError) is shown holding them: the frees its end caused are not
counted. Borrowers are not recorded in the files, so each object has one row, its
owner's, with reference type ``OWNER``. A damaged file is a warning, never a crash.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tracedray._proto.v1 import common_pb2, core_worker_pb2, gcs_pb2, raylet_pb2
from tracedray.cli.memory_timeline import HeldObject, NodeReplay, replay_store
from tracedray.cli.tracestore.logs import LogRecord
from tracedray.cli.tracestore.model import SpanRecord
from tracedray.core.session import SessionPaths
from tracedray.exceptions import ClusterConnectionError, ConfigError, RaySystemError
from tracedray.telemetry import attributes as attr

if TYPE_CHECKING:
    from tracedray.core.cluster_client import ClusterClient, NodeView

OWNER_REFERENCE = "OWNER"  # the reference type of a post-mortem row: the object's owner
_PUT_INDEX_HEX = 8  # an object id is its task id and a 4-byte index (ids.object_id_for)
_PROBE_TIMEOUT_S = 1.0
_MAX_WARNINGS = 5
_MAX_HOLDERS = 5  # header lines naming who held the most


# --- pure: who owned what, who ended when ------------------------------------------
@dataclass(frozen=True)
class Owner:
    pid: int
    ip: str
    component: str  # driver | worker
    node_id: str


@dataclass(frozen=True)
class Ending:
    time_ns: int
    how: str  # "exited with code 1", "SIGKILL: killed ...", the raylet's words


@dataclass(frozen=True)
class Refusal:
    """A store that refused an object (ObjectStoreFullError)."""

    time_ns: int
    node_id: str
    size: int
    used: int
    capacity: int


@dataclass
class LastKnownState:
    """What the session's files say the cluster held when they were last written."""

    nodes: dict[str, NodeReplay]
    owners: dict[str, Owner]  # object id → its owner
    endings: dict[tuple[str, int], Ending]  # (node id, pid) → when and how it ended
    refusals: list[Refusal]
    as_of_ns: int  # the last event in the files
    task_states: dict[str, str] = field(default_factory=dict)  # task id hex → state

    def owner_of(self, object_id: str) -> Owner | None:
        return self.owners.get(object_id)

    def ending_of(self, owner: Owner) -> Ending | None:
        return self.endings.get((owner.node_id, owner.pid))

    def holders(self) -> list[tuple[Owner, Ending | None, int, int]]:
        """(owner, its end if recorded, objects, bytes) of every owner holding primary
        copies when the files end, the most bytes first."""
        totals: dict[Owner, list[int]] = {}
        for node in self.nodes.values():
            for held in node.held.values():
                owner = self.owners.get(held.object_id)
                if held.secondary or owner is None:
                    continue
                entry = totals.setdefault(owner, [0, 0])
                entry[0] += 1
                entry[1] += held.size
        return sorted(((o, self.ending_of(o), n, b) for o, (n, b) in totals.items()),
                      key=lambda item: (-item[3], item[0].pid))


def task_id_of(object_id: str) -> str:
    return object_id[:-_PUT_INDEX_HEX] if len(object_id) > _PUT_INDEX_HEX else ""


def _owner_from(span: SpanRecord) -> Owner:
    return Owner(span.pid or 0, span.host_ip, span.component or "unknown",
                 span.recorder_node_id)


def collect_owners(spans: Iterable[SpanRecord]) -> dict[str, Owner]:
    """Object id → owner for every object a put or a task made (keyed by task id for
    tasks: a task's returns are ``task id + index``; see :func:`owner_for`)."""
    owners: dict[str, Owner] = {}
    for span in spans:
        if span.name == "object.put":
            owners[str(span.get(attr.OBJECT_ID, ""))] = _owner_from(span)
        elif span.name == "task.submit" and span.get(attr.TASK_ID):
            owners.setdefault("task:" + str(span.get(attr.TASK_ID)), _owner_from(span))
    return owners


def owner_for(owners: Mapping[str, Owner], object_id: str) -> Owner | None:
    return owners.get(object_id) or owners.get("task:" + task_id_of(object_id))


def collect_endings(spans: Iterable[SpanRecord], records: Iterable[LogRecord]
                    ) -> dict[tuple[str, int], Ending]:
    """(node id, pid) → when the process ended (the first sign of it: its raylet freeing
    what it owned, the raylet's ``driver.exit`` line or ``worker.exit`` span, its own
    ``process.exit`` line) and how (the most telling of those signs). Keyed by node too:
    pids repeat across machines."""
    signs: dict[tuple[str, int], list[tuple[int, int, str]]] = {}  # → (rank, time, how)

    def note(node_id: Any, pid: Any, rank: int, time_ns: int, how: str) -> None:
        if isinstance(pid, int) and pid > 0:
            signs.setdefault((str(node_id or ""), pid), []).append((rank, time_ns, how))

    for record in records:
        node_id = record.get("node_id")
        if record.event == "process.exit":
            code, error = record.get("exit_code"), record.get("error_type")
            how = f"exited with code {code}" if code is not None else "exited"
            note(node_id, record.get("pid"), 0, record.time_ns,
                 how + (f", {error}" if error else ""))
        elif record.event == "driver.exit":
            note(node_id, record.get("driver_pid"), 2, record.time_ns,
                 str(record.get("why") or "its raylet saw it exit"))
        elif record.event == "objects.owner_gone":
            note(record.get("owner_node_id") or node_id, record.get("owner_pid"), 3,
                 record.time_ns,
                 f"{record.get('reason') or 'gone'}: {record.get('why') or '?'}")
    for span in spans:
        if span.name == "worker.exit":
            how = str(span.get(attr.EXIT_MEANING) or span.get(attr.EXIT_SIGNAL)
                      or f"exit code {span.get(attr.EXIT_CODE)}")
            note(span.node_id, span.int_attr(attr.WORKER_PID), 1, span.end_ns, how)
    return {pid: Ending(min(t for _, t, _ in found), min(found)[2])
            for pid, found in signs.items()}


def collect_refusals(records: Iterable[LogRecord]) -> list[Refusal]:
    def number(record: LogRecord, key: str) -> int:
        value = record.get(key)
        return value if isinstance(value, int) else 0

    return [Refusal(r.time_ns, str(r.get("node_id") or ""), number(r, "size"),
                    number(r, "used"), number(r, "capacity"))
            for r in records if r.event == "object store full"]


def last_known_state(spans: Sequence[SpanRecord], records: Sequence[LogRecord],
                     task_states: Mapping[str, str] | None = None) -> LastKnownState:
    """Replay the session: each node's store at the end, each object held by the owner
    that made it, an ended owner's objects as it left them."""
    flat = collect_owners(spans)
    endings = collect_endings(spans, records)
    store_ids = {str(s.get(attr.OBJECT_ID, "")) for s in spans
                 if s.name in ("object.seal", "object.put")}
    owners = {oid: owner for oid in store_ids if (owner := owner_for(flat, oid)) is not None}
    held_until = {oid: endings[(owner.node_id, owner.pid)].time_ns
                  for oid, owner in owners.items() if (owner.node_id, owner.pid) in endings}
    nodes = replay_store(spans, top=0, held_until=held_until)
    as_of = max([s.end_ns for s in spans] + [r.time_ns for r in records], default=0)
    return LastKnownState(nodes, owners, endings, collect_refusals(records), as_of,
                          dict(task_states or {}))


def reference_tables(state: LastKnownState) -> dict[str, list[core_worker_pb2.ReferenceTable]]:
    """Node id → the reference tables of the owners that ran there: one row per object
    still held (a primary copy, in memory or spilled), as ``tracedray memory`` shows."""
    tables: dict[tuple[str, Owner | None], core_worker_pb2.ReferenceTable] = {}
    for node_id, node in sorted(state.nodes.items()):
        for held in sorted(node.held.values(), key=lambda h: h.since_ns):
            if held.secondary:
                continue
            owner = state.owner_of(held.object_id)
            home = owner.node_id if owner is not None and owner.node_id else node_id
            table = tables.get((home, owner))
            if table is None:
                table = tables[(home, owner)] = _empty_table(owner, home)
            table.rows.add(object_id=_id_bytes(held.object_id), reference_type=OWNER_REFERENCE,
                           size=held.size, call_site=held.call_site,
                           task_status=_status(state, held), node_id=node_id,
                           local_refs=1)
    out: dict[str, list[core_worker_pb2.ReferenceTable]] = {}
    for (home, _), table in tables.items():
        out.setdefault(home, []).append(table)
    return out


def _empty_table(owner: Owner | None, node_id: str) -> core_worker_pb2.ReferenceTable:
    if owner is None:
        return core_worker_pb2.ReferenceTable(
            address=common_pb2.Address(node_id=node_id), component="unknown owner")
    return core_worker_pb2.ReferenceTable(
        address=common_pb2.Address(node_id=owner.node_id, ip=owner.ip, pid=owner.pid),
        component=owner.component, ip=owner.ip)


def _status(state: LastKnownState, held: HeldObject) -> str:
    if len(held.object_id) > _PUT_INDEX_HEX and held.object_id[-_PUT_INDEX_HEX] in "89abcdef":
        return "FINISHED"  # a put (its index has the high bit set): its value is there
    return state.task_states.get(task_id_of(held.object_id), "")


def _id_bytes(object_id: str) -> bytes:
    try:
        return bytes.fromhex(object_id)
    except ValueError:
        return object_id.encode()


def node_stats(node_id: str, node: NodeReplay | None, *, ip: str, pid: int,
               tables: Sequence[core_worker_pb2.ReferenceTable],
               workers: Sequence[raylet_pb2.WorkerRow]) -> raylet_pb2.NodeStats:
    stats = raylet_pb2.NodeStats(node_id=node_id, ip=ip, pid=pid)
    stats.workers.extend(workers)
    stats.reference_tables.extend(t.SerializeToString() for t in tables)
    if node is None:
        return stats
    # As the references show it: an ended owner's objects still count (the header says so).
    stats.store_used = node.used if not node.frees_after_owner_end else sum(
        h.size for h in node.held.values() if not h.spilled)
    stats.store_capacity = node.capacity or 0
    stats.num_objects = len(node.held)
    stats.spilled_bytes, stats.spilled_count = node.spilled_bytes, node.spilled_count
    stats.restored_bytes, stats.restored_count = node.restored_bytes, node.restored_count
    for held in node.held.values():
        stats.objects.add(object_id=_id_bytes(held.object_id), size=held.size,
                          call_site=held.call_site, spilled=held.spilled,
                          primary=not held.secondary)
    return stats


def worker_rows(spans: Iterable[SpanRecord]) -> dict[str, list[raylet_pb2.WorkerRow]]:
    """Node id → its workers as the raylet's worker.start/worker.exit spans left them."""
    rows: dict[str, dict[str, raylet_pb2.WorkerRow]] = {}
    for span in sorted(spans, key=lambda s: s.end_ns):
        if span.name not in ("worker.start", "worker.exit"):
            continue
        worker_id = str(span.get(attr.WORKER_ID, ""))
        node = rows.setdefault(span.node_id, {})
        row = node.setdefault(worker_id, raylet_pb2.WorkerRow(worker_id=worker_id,
                                                              state="ALIVE"))
        row.pid = span.int_attr(attr.WORKER_PID) or row.pid
        if span.name == "worker.start":
            row.started_at = span.start_ns / 1e9
        else:
            row.state = "DEAD"
            row.ended_at = span.end_ns / 1e9
            row.exit_code = span.int_attr(attr.EXIT_CODE) or 0
            row.exit_signal = str(span.get(attr.EXIT_SIGNAL, "") or "")
            row.exit_meaning = str(span.get(attr.EXIT_MEANING, "") or "")
    return {node: list(workers.values()) for node, workers in rows.items()}


def raylets(spans: Iterable[SpanRecord]) -> dict[str, tuple[str, int]]:
    """Node id → (ip, pid) of its raylet, from the resource of the raylet's spans."""
    found: dict[str, tuple[str, int]] = {}
    for span in spans:
        if span.component == "raylet" and span.recorder_node_id:
            found.setdefault(span.recorder_node_id, (span.host_ip, span.pid or 0))
    return found


_TERMINAL = ("FINISHED", "FAILED", "CANCELLED")


def executed_states(spans: Iterable[SpanRecord]) -> dict[str, tuple[int, str]]:
    """Task id → (attempt, FINISHED or FAILED) of its last ``task.execute`` span: how
    the worker's run ended, which its task events may not have told the GCS before the
    cluster stopped (they travel in batches)."""
    found: dict[str, tuple[int, str]] = {}
    for span in spans:
        if span.name != "task.execute" or not span.get(attr.TASK_ID):
            continue
        task_id = str(span.get(attr.TASK_ID))
        attempt = span.int_attr(attr.TASK_ATTEMPT) or 0
        if task_id not in found or attempt >= found[task_id][0]:
            found[task_id] = (attempt, "FAILED" if span.is_error else "FINISHED")
    return found


def reconcile_task(record: gcs_pb2.TaskRecord,
                   executed: Mapping[str, tuple[int, str]]) -> gcs_pb2.TaskRecord:
    """A task the GCS last saw unfinished, whose worker's span says how it ended, ends so."""
    ran = executed.get(record.task_id.hex())
    if record.state in _TERMINAL or ran is None or ran[0] < record.attempt:
        return record
    record.attempt, record.state = ran
    return record


def header_lines(session: Path, reason: str, state: LastKnownState,
                 gcs_note: str) -> list[str]:
    """What the reader must know first: this is the past, and as of when."""
    from tracedray.cli.output import format_bytes

    as_of = _clock(state.as_of_ns) if state.as_of_ns else "unknown (no events recorded)"
    lines = [f"post-mortem view of session {session.name}: {reason}",
             f"last known state as of {as_of} (the last event in its files); {gcs_note}"]
    holders = state.holders()
    for owner, ending, count, size in holders[:_MAX_HOLDERS]:
        who = f"{owner.component} pid {owner.pid}"
        if ending is not None:
            lines.append(f"{who} ended at {_clock(ending.time_ns)} ({ending.how}) holding "
                         f"{count} object(s), {format_bytes(size)}: shown as it left them")
        else:
            lines.append(f"{who} held {count} object(s), {format_bytes(size)}; no end of it "
                         "is recorded (killed with its cluster, or still running)")
    if len(holders) > _MAX_HOLDERS:
        lines.append(f"... and {len(holders) - _MAX_HOLDERS} more holders")
    if state.refusals:
        last = state.refusals[-1]
        lines.append(f"the object store refused {len(state.refusals)} object(s) "
                     f"(ObjectStoreFullError); the last at {_clock(last.time_ns)} on node "
                     f"{last.node_id[:12]}: {format_bytes(last.size)} with "
                     f"{format_bytes(last.used)} of {format_bytes(last.capacity)} used")
    return lines


def _clock(time_ns: int) -> str:
    seconds, millis = divmod(time_ns // 1_000_000, 1000)  # integers: no float rounding
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(seconds)) + f".{millis:03d} UTC"


# --- I/O: the session's GCS database ------------------------------------------------
class SessionGcs:
    """The GCS calls the state API makes, answered from ``gcs.sqlite3`` (read-only)."""

    def __init__(self, path: Path,
                 executed: Mapping[str, tuple[int, str]] | None = None) -> None:
        """``executed``: how tasks' runs ended by their spans (:func:`executed_states`)."""
        from tracedray.core.gcs.storage.sqlite import SqliteStorage

        self.path = path
        self._executed = dict(executed or {})
        self.warnings: list[str] = []
        self._tables: dict[str, list[bytes]] = {}
        self._storage: SqliteStorage | None = None
        try:
            self._storage = SqliteStorage.open_read_only(path)
        except RaySystemError as exc:
            self.warnings.append(f"{exc}; tasks, actors, jobs and nodes are not known")

    @property
    def readable(self) -> bool:
        return self._storage is not None

    def _values(self, table: str) -> list[bytes]:
        if table not in self._tables:
            values: list[bytes] = []
            if self._storage is not None:
                try:
                    values = [value for _, value in self._storage.scan(table)]
                except RaySystemError as exc:
                    self.warnings.append(f"the {table} table of {self.path} cannot be read: "
                                         f"{exc}")
            self._tables[table] = values
        return self._tables[table]

    def _parsed(self, table: str, message: Any) -> list[Any]:
        out = []
        for raw in self._values(table):
            try:
                out.append(message.FromString(raw))
            except Exception as exc:  # noqa: BLE001 - protobuf's DecodeError and friends
                self.warnings.append(f"a damaged {table} record in {self.path} was skipped: "
                                     f"{exc!r}")
        return out

    def get_tasks(self, task_ids: list[bytes] | None = None, limit: int = 0,
                  job_id: bytes = b"", **query: Any) -> gcs_pb2.GetTasksReply:
        from tracedray.core.gcs.task_query import query_tasks

        records = [reconcile_task(r, self._executed)
                   for r in self._parsed("tasks", gcs_pb2.TaskRecord)]
        request = gcs_pb2.GetTasksRequest(task_ids=task_ids or [], limit=limit, job_id=job_id,
                                          **query)
        return query_tasks(sorted(((r.task_id.hex(), r) for r in records),
                                  key=lambda entry: entry[0]),
                           request, parse=lambda record: record)

    def list_actors(self) -> list[gcs_pb2.ActorInfo]:
        return self._parsed("actors", gcs_pb2.ActorInfo)

    def get_jobs(self) -> list[gcs_pb2.JobInfo]:
        return self._parsed("jobs", gcs_pb2.JobInfo)

    def get_nodes(self) -> list[gcs_pb2.NodeWithLoad]:
        return [gcs_pb2.NodeWithLoad(info=info)
                for info in self._parsed("nodes", gcs_pb2.NodeInfo)]

    def close(self) -> None:
        if self._storage is not None:
            self._storage.close()


# --- the client -----------------------------------------------------------------------
class PostmortemClient:
    """A stopped cluster as the state API sees a live one (``gcs`` and ``node_views``)."""

    postmortem = True

    def __init__(self, session: SessionPaths, reason: str) -> None:
        from tracedray.cli.tracestore.logs import read_logs
        from tracedray.cli.tracestore.sources import SessionFileSource, SpanQuery
        from tracedray.core.gcs.storage.sqlite import DB_FILE_NAME

        self.session = session
        self.reason = reason
        batch = SessionFileSource(session).find_spans(SpanQuery())
        logs = read_logs(session.logs_dir)
        self.warnings = list(batch.warnings) + list(logs.warnings)
        self._spans = batch.spans
        self.gcs = SessionGcs(session.root / DB_FILE_NAME, executed_states(self._spans))
        task_states = {r.task_id.hex(): r.state for r in self.gcs.get_tasks().tasks}
        self.state = last_known_state(self._spans, logs.records, task_states)
        self.warnings.extend(self.gcs.warnings)

    @property
    def gcs_address(self) -> str:
        return f"session {self.session.root}"

    def header(self) -> list[str]:
        if self.gcs.readable:
            gcs_note = ("tasks, actors, jobs and nodes as its GCS left them in "
                        f"{self.gcs.path.name}")
        else:
            gcs_note = "its GCS database cannot be read"
        return header_lines(self.session.root, self.reason, self.state, gcs_note)

    def node_views(self, *, include_objects: bool = False,
                   include_references: bool = False) -> list[NodeView]:
        from tracedray.core.cluster_client import NodeView

        known = {n.info.node_id: n for n in self.gcs.get_nodes()}
        where = raylets(self._spans)
        for node_id in list(self.state.nodes) + list(where):
            if node_id and node_id not in known:
                ip, pid = where.get(node_id, ("", 0))
                known[node_id] = gcs_pb2.NodeWithLoad(info=gcs_pb2.NodeInfo(
                    node_id=node_id, state="UNKNOWN",
                    raylet=common_pb2.Address(node_id=node_id, ip=ip, pid=pid)))
        tables = reference_tables(self.state) if include_references else {}
        workers = worker_rows(self._spans)
        views = []
        for node_id, node in sorted(known.items(), key=lambda kv: (not kv[1].info.is_head,
                                                                    kv[1].info.start_time)):
            ip, pid = where.get(node_id, (node.info.raylet.ip, node.info.raylet.pid))
            replay = self.state.nodes.get(node_id)
            stats = node_stats(node_id, replay, ip=ip or node.info.raylet.ip,
                               pid=pid or node.info.raylet.pid,
                               tables=tables.get(node_id, ()),
                               workers=workers.get(node_id, ()))
            if not include_objects:
                del stats.objects[:]
            node.store_used = stats.store_used
            views.append(NodeView(node, stats))
        return views

    def statistics(self) -> dict[str, Any]:
        return {"session": str(self.session.root), "spans": len(self._spans),
                "nodes": len(self.state.nodes), "warnings": len(self.warnings)}


# --- choosing live or post-mortem -----------------------------------------------------
def _listening(address: str) -> bool:
    """Whether anything accepts connections at ``address`` (a refused port answers at
    once, where gRPC would retry until its timeout)."""
    from tracedray.core.address import parse_host_port

    try:
        host, port = parse_host_port(address)
        with socket.create_connection((host, port), timeout=_PROBE_TIMEOUT_S):
            return True
    except (OSError, ValueError):
        return False


def session_at(path: str) -> SessionPaths:
    folder = Path(path).expanduser()
    if not folder.is_dir():
        raise ConfigError(f"--session {path}: no such folder")
    if not (folder / "logs").is_dir() and not (folder / "traces").is_dir():
        raise ConfigError(f"--session {path}: not a tracedray session folder (it has no "
                          "logs/ or traces/ folder)")
    return SessionPaths(folder.resolve())


def open_client(address: str | None, session: str | None = None
                ) -> ClusterClient | PostmortemClient:
    """The running cluster, or, when its GCS does not answer, its session's files.

    ``session`` (a session folder) picks the cluster by its folder; otherwise the
    address is resolved as for every command (``--address``, ``TRACEDRAY_ADDRESS``,
    ``session_latest``) and the session is the one whose address file names it.
    """
    from tracedray.core.cluster_client import connect_cluster, resolve_address

    if session is not None:
        paths = session_at(session)
        try:
            gcs_address = paths.read_address()
        except ClusterConnectionError:
            return PostmortemClient(paths, "it has no address file (its head never started)")
        if not _listening(gcs_address):
            return PostmortemClient(paths, f"no GCS answers at {gcs_address}")
        try:
            return connect_cluster(gcs_address)
        except ClusterConnectionError as exc:
            return PostmortemClient(paths, str(exc))
    resolved = resolve_address(address)
    if resolved.session is None:
        return connect_cluster(address)  # nothing on this machine to read instead
    if not _listening(resolved.gcs_address):
        return PostmortemClient(resolved.session, f"the cluster is not running: no GCS "
                                                  f"answers at {resolved.gcs_address}")
    try:
        return connect_cluster(address)
    except ClusterConnectionError as exc:
        return PostmortemClient(resolved.session, str(exc))


def announce(client: Any) -> None:
    """On stderr, before any row: a post-mortem view says so, and what it could not read."""
    from rich.markup import escape

    from tracedray.cli.output import note, stderr_console, warn

    if not isinstance(client, PostmortemClient):
        return
    console = stderr_console()
    lines = client.header()
    console.print(f"[bold yellow]{escape(lines[0])}[/]", highlight=False)
    for line in lines[1:]:
        console.print(escape(line), highlight=False)
    for warning in client.warnings[:_MAX_WARNINGS]:
        warn(warning)
    if len(client.warnings) > _MAX_WARNINGS:
        note(f"... and {len(client.warnings) - _MAX_WARNINGS} more warnings about "
             "unreadable lines")
