"""Which hot entries leave memory: a pure decision over explicit state."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from tracedray import config
from tracedray.exceptions import ConfigError


@dataclass(frozen=True)
class FlushPolicy:
    """When finished GCS entries move from memory to the storage.

    ``min_age_s``: a finished entry stays hot at least this long, because the
    driver usually asks about a task right after it finishes.
    ``max_hot_entries``: per table, once more entries than this are hot, the oldest
    finished ones go regardless of age, so a burst cannot grow memory unboundedly.
    ``max_live_entries``: live (unfinished) entries are still being updated, so they
    stay hot up to this many; beyond it the oldest go too (a burst of 100,000
    submissions is that many live entries), and their next update reads them back
    from the storage. 0: no bound.
    """

    interval_s: float = 1.0
    max_hot_entries: int = 10_000
    min_age_s: float = 2.0
    max_live_entries: int = 5_000

    def __post_init__(self) -> None:
        if self.interval_s <= 0:
            raise ConfigError(f"flush interval must be positive, got {self.interval_s}")
        if self.max_hot_entries < 0:
            raise ConfigError(f"max_hot_entries must be >= 0, got {self.max_hot_entries}")
        if self.min_age_s < 0:
            raise ConfigError(f"min_age_s must be >= 0, got {self.min_age_s}")
        if self.max_live_entries < 0:
            raise ConfigError(f"max_live_entries must be >= 0, got {self.max_live_entries}")

    @classmethod
    def from_config(cls, environ: Mapping[str, str] | None = None) -> FlushPolicy:
        """The policy the ``TRACEDRAY_GCS_FLUSH_*`` variables describe."""
        return cls(
            interval_s=config.GCS_FLUSH_INTERVAL_S.get(environ),
            max_hot_entries=config.GCS_FLUSH_MAX_HOT_ENTRIES.get(environ),
            min_age_s=config.GCS_FLUSH_MIN_AGE_S.get(environ),
            max_live_entries=config.GCS_FLUSH_MAX_LIVE_ENTRIES.get(environ),
        )


@dataclass(frozen=True)
class HotEntry:
    key: str
    size: int  # value bytes
    finished_at: float | None  # clock reading when it was put finished; None while live


def select_flush(entries: Sequence[HotEntry], now: float, policy: FlushPolicy) -> list[str]:
    """Keys to move out of memory: finished ones oldest first, then live ones beyond
    ``max_live_entries`` in the order given (the table's insertion order: oldest first).

    Every finished entry at least ``min_age_s`` old goes; then, if the table would
    still hold more than ``max_hot_entries``, the next-oldest finished ones too.
    """
    finished = sorted(
        (e for e in entries if e.finished_at is not None),
        key=lambda e: e.finished_at,  # type: ignore[arg-type, return-value]
    )
    aged = 0
    for entry in finished:  # sorted oldest first, so the aged ones are a prefix
        if now - entry.finished_at < policy.min_age_s:  # type: ignore[operator]
            break
        aged += 1
    excess = len(entries) - policy.max_hot_entries
    take = max(aged, min(excess, len(finished)))
    chosen = [entry.key for entry in finished[:take]]
    live = [entry for entry in entries if entry.finished_at is None]
    if policy.max_live_entries and len(live) > policy.max_live_entries:
        chosen.extend(entry.key for entry in live[:len(live) - policy.max_live_entries])
    return chosen
