"""The state API: what the cluster is doing now, as plain dicts (``tracedray list`` in Python).

Every ``list_*`` returns a :class:`StateList` (a list of rows with ``.total`` and
``.left_out``) so a limit is never silent; ``get_*`` returns the row(s) for one id or
``None``/``[]``; ``summarize_*`` groups rows. ``address`` defaults to the cluster
this process is connected to, then ``TRACEDRAY_ADDRESS``, then the newest session.

    >>> from tracedray.util.state import list_tasks
    >>> list_tasks(filters=["state=FAILED"], limit=10)
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

from tracedray.core.protocol import state_rows as rows
from tracedray.core.protocol.state_rows import Row, StateList

if TYPE_CHECKING:
    from tracedray._proto.v1 import gcs_pb2
    from tracedray.core.cluster_client import NodeView

DEFAULT_LIMIT = 100
Filters = Sequence[str] | None


class StateTables(Protocol):
    """The GCS tables the state API reads."""

    def get_tasks(self, task_ids: list[bytes] | None = None, limit: int = 0,
                  job_id: bytes = b"", **query: Any) -> gcs_pb2.GetTasksReply: ...

    def list_actors(self) -> list[gcs_pb2.ActorInfo]: ...

    def get_jobs(self) -> list[gcs_pb2.JobInfo]: ...


class Source(Protocol):
    """What answers: a running cluster (``core.cluster_client.ClusterClient``), or what a
    stopped one left in its session folder (the CLI's ``PostmortemClient``)."""

    @property
    def gcs(self) -> StateTables: ...

    def node_views(self, *, include_objects: bool = False,
                   include_references: bool = False) -> list[NodeView]: ...


# The cluster's address ("host:port", "auto" or None), or a source already.
Address = str | None | Source

__all__ = [
    "DEFAULT_LIMIT", "StateList", "get_actor", "get_job", "get_node", "get_object", "get_task",
    "get_worker", "list_actors", "list_jobs", "list_nodes", "list_objects", "list_tasks",
    "list_workers", "summarize_actors", "summarize_objects", "summarize_tasks",
    "tasks_with_prefix",
]


def _client(address: Address) -> Source:
    """``address`` may be a client already: the CLI passes a post-mortem view of a stopped
    cluster (``tracedray.cli.postmortem``) where the cluster does not answer."""
    from tracedray.core.cluster_client import connect_cluster

    if address is not None and not isinstance(address, str):
        return address
    if not address:
        api = sys.modules.get("tracedray.api.calls")
        # A connected driver asks its own cluster, whatever the newest session is.
        if api is not None and api.is_initialized():
            address = api._context_info().get("address") or None
    return connect_cluster(address)


def _finish(all_rows: list[Row], filters: Filters, limit: int | None,
            fields: Sequence[str]) -> StateList:
    return rows.limit_rows(rows.apply_filters(all_rows, filters or (), fields), limit)


# --- tasks: filtered, ordered and paged where they are (core/gcs/task_query.py)
def _task_page(client: Source, detail: bool, filters: Filters = None,
               limit: int | None = None, id_prefix: str = "") -> StateList:
    """One page of tasks and how many matched; only the page travels. In order of their
    first event with ``detail``, by task id otherwise (as ``ray list tasks``)."""
    rows.apply_filters([], filters or (), rows.TASK_FIELDS)  # a bad filter: ConfigError here
    rows.limit_rows([], limit)  # a bad limit too
    reply = client.gcs.get_tasks(limit=limit or 0, filters=list(filters or ()),
                                 order="time" if detail else "task_id",
                                 id_prefix=id_prefix.strip().lower())
    return StateList([rows.task_row(record, detail) for record in reply.tasks],
                     total=reply.total)


# --- raw row sources (every row, no filter, no limit)


def _views(client: Source, *, objects: bool = False) -> list[NodeView]:
    return client.node_views(include_objects=objects, include_references=objects)


def _object_rows(client: Source) -> list[Row]:
    views = _views(client, objects=True)
    from tracedray._proto.v1 import core_worker_pb2

    tables = [core_worker_pb2.ReferenceTable.FromString(raw)
              for view in views if view.stats is not None
              for raw in view.stats.reference_tables]
    stored = [obj for view in views if view.stats is not None for obj in view.stats.objects]
    return rows.memory_rows(tables, stored)


def _node_rows(client: Source) -> list[Row]:
    return [rows.node_row(view.node, view.stats) for view in _views(client)]


def _worker_rows(client: Source) -> list[Row]:
    return [row for view in _views(client) if view.stats is not None
            for row in rows.worker_rows(view.stats)]


# --- list
def list_tasks(address: Address = None, filters: Filters = None,
               limit: int | None = DEFAULT_LIMIT, detail: bool = False) -> StateList:
    """Tasks of every job (latest attempt each); ``detail`` adds each state change."""
    return _task_page(_client(address), detail, filters, limit)


def list_actors(address: Address = None, filters: Filters = None,
                limit: int | None = DEFAULT_LIMIT, detail: bool = False) -> StateList:
    actors = [rows.actor_row(a) for a in _client(address).gcs.list_actors()]
    return _finish(actors, filters, limit, rows.ACTOR_FIELDS)


def list_objects(address: Address = None, filters: Filters = None,
                 limit: int | None = DEFAULT_LIMIT, detail: bool = False) -> StateList:
    """One row per (object, holder), the rows of ``tracedray memory``."""
    return _finish(_object_rows(_client(address)), filters, limit, rows.MEMORY_FIELDS)


def list_nodes(address: Address = None, filters: Filters = None,
               limit: int | None = DEFAULT_LIMIT, detail: bool = False) -> StateList:
    return _finish(_node_rows(_client(address)), filters, limit, rows.NODE_FIELDS)


def list_workers(address: Address = None, filters: Filters = None,
                 limit: int | None = DEFAULT_LIMIT, detail: bool = False) -> StateList:
    return _finish(_worker_rows(_client(address)), filters, limit, rows.WORKER_FIELDS)


def list_jobs(address: Address = None, filters: Filters = None,
              limit: int | None = DEFAULT_LIMIT, detail: bool = False) -> StateList:
    jobs = sorted((rows.job_row(j) for j in _client(address).gcs.get_jobs()),
                  key=lambda r: r["start_time"] or 0)
    return _finish(jobs, filters, limit, rows.JOB_FIELDS)


# --- get (exact id; the CLI adds close-match suggestions)
def _one(found: list[Row], key: str, wanted: str) -> Row | None:
    wanted = wanted.strip().lower()
    return next((row for row in found if str(row[key]).lower() == wanted), None)


def get_task(task_id: str, address: Address = None) -> Row | None:
    return _one(_task_page(_client(address), True, id_prefix=task_id), "task_id", task_id)


def tasks_with_prefix(prefix: str, address: Address = None, limit: int = 10) -> StateList:
    """Tasks whose id starts with ``prefix`` (every field), at most ``limit``."""
    return _task_page(_client(address), True, limit=limit, id_prefix=prefix)


def get_actor(actor_id: str, address: Address = None) -> Row | None:
    return _one([rows.actor_row(a) for a in _client(address).gcs.list_actors()], "actor_id",
                actor_id)


def get_node(node_id: str, address: Address = None) -> Row | None:
    return _one(_node_rows(_client(address)), "node_id", node_id)


def get_worker(worker_id: str, address: Address = None) -> Row | None:
    return _one(_worker_rows(_client(address)), "worker_id", worker_id)


def get_job(job_id: str, address: Address = None) -> Row | None:
    return _one([rows.job_row(j) for j in _client(address).gcs.get_jobs()], "job_id", job_id)


def get_object(object_id: str, address: Address = None) -> list[Row]:
    """Every holder of one object (an object has one row per process referencing it)."""
    wanted = object_id.strip().lower()
    return [row for row in _object_rows(_client(address)) if row["object_ref"] == wanted]


# --- summaries
def summarize_tasks(address: Address = None) -> list[Row]:
    """Counted where the tasks are: only a row per function travels."""
    reply = _client(address).gcs.get_tasks(summarize=True)
    return [{"func_or_class_name": entry.name, "type": entry.kind,
             "total": sum(entry.state_counts.values()),
             "state_counts": dict(sorted(entry.state_counts.items())),
             "error_type_counts": dict(sorted(entry.error_type_counts.items()))}
            for entry in reply.summary]


def summarize_actors(address: Address = None) -> list[Row]:
    return rows.summarize_actors(rows.actor_row(a) for a in _client(address).gcs.list_actors())


def summarize_objects(address: Address = None) -> list[Row]:
    return rows.summarize_objects(_object_rows(_client(address)))
