"""When a session's line files rotate, compress and go: pure decisions over a listing.

The node's telemetry agent (core/raylet/telemetry_agent.py, via rotation_io.py) lists
``logs/`` and ``traces/`` after each round and does what :func:`plan` says:

- ROTATE a current file (``worker-7.jsonl``) that holds ``rotation_bytes`` or more:
  it becomes the next part (``worker-7.000003.jsonl``, line_file.py) and the process's
  next lines start a new current file;
- COMPRESS a plain part nobody has written for ``compress_delay_s`` (a tool tailing the
  file, otelcol's filelog receiver or ``tail -F``, has finished it by then);
- DROP the parts of a file beyond its newest ``backup_count``, and then, while the two
  folders hold more than ``session_max_bytes``, the oldest parts of the session (by the
  time they were last written), never a current file.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from tracedray.telemetry.line_file import part_name


class Action(enum.Enum):
    ROTATE = "rotate"
    COMPRESS = "compress"
    DROP = "drop"


class Reason(enum.Enum):
    SIZE = "size"  # a current file reached the rotation size
    QUIET = "quiet"  # a plain part nobody wrote for the compression delay
    BACKUP_COUNT = "backup_count"  # more parts of one file than the backup count
    SESSION_MAX_BYTES = "session_max_bytes"  # the session is over its byte limit


@dataclass(frozen=True)
class Limits:
    rotation_bytes: int
    backup_count: int
    compress_delay_s: float
    session_max_bytes: int


@dataclass(frozen=True)
class FileFact:
    """One line file as listed: ``name`` is its plain name (line_file.parse_name)."""

    kind: str  # "logs" or "traces"
    name: str
    base: str  # the current file's name
    number: int  # part number; 0: the current file
    compressed: bool
    size: int  # bytes on disk
    mtime: float  # last written (seconds since the epoch)


@dataclass(frozen=True)
class Step:
    action: Action
    reason: Reason
    file: FileFact
    new_name: str = ""  # ROTATE: the part it becomes


def plan(files: Sequence[FileFact], now: float, limits: Limits, *,
         other_bytes: int = 0) -> list[Step]:
    """What to do now, in order: rotations, compressions, then drops.

    ``other_bytes``: what else in the two folders counts against the session limit
    (spools, the index). Sizes after a compression are not guessed: its saving counts
    from the next plan on.
    """
    steps: list[Step] = []
    newest: dict[tuple[str, str], int] = {}
    for fact in files:
        if fact.number:
            key = (fact.kind, fact.base)
            newest[key] = max(newest.get(key, 0), fact.number)
    for fact in files:
        if not fact.number and fact.size >= limits.rotation_bytes:
            number = newest.get((fact.kind, fact.base), 0) + 1
            newest[(fact.kind, fact.base)] = number
            steps.append(Step(Action.ROTATE, Reason.SIZE, fact, part_name(fact.base, number)))
    dropped = set()
    for drop in _over_backup_count(files, limits.backup_count):
        dropped.add((drop.kind, drop.name))
        steps.append(Step(Action.DROP, Reason.BACKUP_COUNT, drop))
    total = other_bytes + sum(fact.size for fact in files
                              if (fact.kind, fact.name) not in dropped)
    for drop in oldest_parts_over(files, total, limits.session_max_bytes, dropped):
        dropped.add((drop.kind, drop.name))
        steps.append(Step(Action.DROP, Reason.SESSION_MAX_BYTES, drop))
    compress = [Step(Action.COMPRESS, Reason.QUIET, fact) for fact in files
                if fact.number and not fact.compressed and (fact.kind, fact.name) not in dropped
                and now - fact.mtime >= limits.compress_delay_s]
    rotations = [step for step in steps if step.action is Action.ROTATE]
    drops = [step for step in steps if step.action is Action.DROP]
    return rotations + compress + drops


def _over_backup_count(files: Iterable[FileFact], backup_count: int) -> list[FileFact]:
    by_file: dict[tuple[str, str], list[FileFact]] = {}
    for fact in files:
        if fact.number:
            by_file.setdefault((fact.kind, fact.base), []).append(fact)
    drops = []
    for parts in by_file.values():
        parts.sort(key=lambda fact: fact.number)
        drops.extend(parts[:max(len(parts) - backup_count, 0)])
    return drops


def oldest_parts_over(files: Iterable[FileFact], total: int, max_bytes: int,
                      skip: set[tuple[str, str]] | None = None) -> list[FileFact]:
    """The oldest parts (last written first, then lowest number) whose removal brings
    ``total`` to ``max_bytes`` or under; as many as there are when that is not enough."""
    if total <= max_bytes:
        return []
    skip = skip or set()
    parts = sorted((fact for fact in files if fact.number and (fact.kind, fact.name) not in skip),
                   key=lambda fact: (fact.mtime, fact.number, fact.kind, fact.name))
    drops = []
    for fact in parts:
        if total <= max_bytes:
            break
        drops.append(fact)
        total -= fact.size
    return drops
