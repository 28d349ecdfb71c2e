from __future__ import annotations

import pytest

from tracedray.core.gcs.storage import FlushPolicy, HotEntry, select_flush
from tracedray.exceptions import ConfigError


def entry(key: str, finished_at: float | None) -> HotEntry:
    return HotEntry(key, size=10, finished_at=finished_at)


def test_only_finished_entries_old_enough_leave() -> None:
    policy = FlushPolicy(min_age_s=2.0, max_hot_entries=100)
    entries = [entry("live", None), entry("old", 1.0), entry("young", 9.5), entry("edge", 8.0)]
    assert select_flush(entries, now=10.0, policy=policy) == ["old", "edge"]


def test_over_the_cap_the_oldest_finished_go_even_if_young() -> None:
    policy = FlushPolicy(min_age_s=60.0, max_hot_entries=3)
    entries = [entry("live1", None), entry("c", 5.0), entry("a", 3.0), entry("b", 4.0),
               entry("live2", None), entry("d", 6.0)]
    # 6 hot, cap 3: the three oldest finished go, live entries never do.
    assert select_flush(entries, now=7.0, policy=policy) == ["a", "b", "c"]


def test_live_entries_stay_up_to_their_own_bound_whatever_the_hot_cap() -> None:
    policy = FlushPolicy(min_age_s=0.0, max_hot_entries=0, max_live_entries=5)
    entries = [entry(f"live{i}", None) for i in range(5)] + [entry("done", 1.0)]
    assert select_flush(entries, now=1.0, policy=policy) == ["done"]


def test_live_entries_beyond_their_bound_go_oldest_first() -> None:
    """A burst of submissions: live entries over ``max_live_entries`` leave memory, in
    the table's order (the oldest submitted first), after the finished ones."""
    policy = FlushPolicy(min_age_s=60.0, max_hot_entries=100, max_live_entries=3)
    entries = [entry(f"live{i}", None) for i in range(6)] + [entry("young", 9.0)]
    assert select_flush(entries, now=10.0, policy=policy) == ["live0", "live1", "live2"]
    unbounded = FlushPolicy(min_age_s=60.0, max_hot_entries=100, max_live_entries=0)
    assert select_flush(entries, now=10.0, policy=unbounded) == []


def test_nothing_to_do() -> None:
    assert select_flush([], now=0.0, policy=FlushPolicy()) == []
    assert select_flush([entry("young", 9.0)], now=10.0, policy=FlushPolicy()) == []


def test_policy_validation_and_config(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigError):
        FlushPolicy(interval_s=0)
    with pytest.raises(ConfigError):
        FlushPolicy(max_hot_entries=-1)
    with pytest.raises(ConfigError):
        FlushPolicy(min_age_s=-1)
    with pytest.raises(ConfigError):
        FlushPolicy(max_live_entries=-1)
    assert FlushPolicy.from_config({}) == FlushPolicy()
    env = {"TRACEDRAY_GCS_FLUSH_INTERVAL_S": "0.5", "TRACEDRAY_GCS_FLUSH_MAX_HOT_ENTRIES": "7",
           "TRACEDRAY_GCS_FLUSH_MIN_AGE_S": "0"}
    assert FlushPolicy.from_config(env) == FlushPolicy(0.5, 7, 0.0)
    assert FlushPolicy.from_config({"TRACEDRAY_GCS_FLUSH_MAX_LIVE_ENTRIES": "9"}
                                   ).max_live_entries == 9
    with pytest.raises(ConfigError, match="TRACEDRAY_GCS_FLUSH_MIN_AGE_S"):
        FlushPolicy.from_config({"TRACEDRAY_GCS_FLUSH_MIN_AGE_S": "-3"})
