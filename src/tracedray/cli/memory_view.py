"""Grouping, sorting and per-node store figures for ``tracedray memory`` (pure functions).

Rows are the ``memory_rows`` of ``tracedray.core.protocol.state_rows``: one per (object,
holder). Group summaries count each object's bytes once per group, however many
processes hold it.
"""

from __future__ import annotations

import collections
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tracedray.exceptions import ConfigError

if TYPE_CHECKING:
    from tracedray._proto.v1 import raylet_pb2

Row = dict[str, Any]

GROUP_BY = ("node", "stack-trace")
SORT_BY = ("pid", "size", "reference-type")
UNITS = ("B", "KB", "MB", "GB")
# Ray's spellings (`ray memory --group-by NODE_ADDRESS --sort-by OBJECT_SIZE`), any case.
RAY_SPELLINGS = {"node_address": "node", "stack_trace": "stack-trace", "object_size": "size",
                 "reference_type": "reference-type"}
REFERENCE_TYPES = ("LOCAL_REFERENCE", "PINNED_IN_MEMORY", "USED_BY_PENDING_TASK",
                   "CAPTURED_IN_OBJECT", "ACTOR_HANDLE")


@dataclass(frozen=True)
class Group:
    key: str  # node id, or call site for --group-by stack-trace
    rows: tuple[Row, ...]
    object_bytes: int  # distinct objects' sizes, each counted once
    reference_counts: tuple[tuple[str, int], ...]


def canonical(choice: str) -> str:
    """tracedray's spelling of a --group-by/--sort-by choice (Ray's are accepted)."""
    text = choice.strip().lower()
    return RAY_SPELLINGS.get(text.replace("-", "_"), text)


def sort_rows(rows: Iterable[Row], sort_by: str) -> list[Row]:
    sort_by = canonical(sort_by)
    if sort_by not in SORT_BY:
        raise ConfigError(f"--sort-by {sort_by!r}: choose one of {', '.join(SORT_BY)}")
    if sort_by == "size":
        return sorted(rows, key=lambda r: (-int(r["size"]), r["pid"], r["object_ref"]))
    if sort_by == "reference-type":
        order = {t: i for i, t in enumerate(REFERENCE_TYPES)}
        return sorted(rows, key=lambda r: (order.get(r["reference_type"], len(order)),
                                           r["pid"], r["object_ref"]))
    return sorted(rows, key=lambda r: (r["pid"], r["object_ref"]))


def group_rows(rows: Sequence[Row], group_by: str) -> list[Group]:
    """Groups in first-seen order of the (already sorted) rows."""
    group_by = canonical(group_by)
    if group_by not in GROUP_BY:
        raise ConfigError(f"--group-by {group_by!r}: choose one of {', '.join(GROUP_BY)}")
    field = "node_id" if group_by == "node" else "call_site"
    buckets: dict[str, list[Row]] = {}
    for row in rows:
        buckets.setdefault(str(row.get(field) or "(unknown)"), []).append(row)
    groups = []
    for key, members in buckets.items():
        sizes = {r["object_ref"]: max(0, int(r["size"])) for r in members}
        counts = collections.Counter(r["reference_type"] for r in members)
        groups.append(Group(key, tuple(members), sum(sizes.values()),
                            tuple(sorted(counts.items()))))
    return groups


def store_stats_row(stats: raylet_pb2.NodeStats) -> Row:
    """``--stats-only``: one node's store in numbers."""
    return {"node_id": stats.node_id, "ip": stats.ip, "store_used": stats.store_used,
            "store_capacity": stats.store_capacity, "objects": stats.num_objects,
            "spilled_bytes": stats.spilled_bytes, "spilled_objects": stats.spilled_count,
            "restored_bytes": stats.restored_bytes, "restored_objects": stats.restored_count,
            "freed_objects": stats.freed_count, "freed_bytes": stats.freed_bytes,
            # why they went: "released", "owner exited", "owner died"
            "freed_by_reason": dict(sorted(stats.freed_by_reason.items()))}


def check_units(units: str) -> str:
    upper = units.upper()
    if upper not in UNITS:
        raise ConfigError(f"--units {units!r}: choose one of {', '.join(UNITS)}")
    return upper
