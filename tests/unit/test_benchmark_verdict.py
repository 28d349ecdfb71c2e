"""The statistics behind benchmarks/telemetry.py's verdict on issue 3's cost goal."""

from __future__ import annotations

import importlib.util
import statistics
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _benchmark() -> ModuleType:
    spec = importlib.util.spec_from_file_location("telemetry_benchmark",
                                                  ROOT / "benchmarks" / "telemetry.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


bench = _benchmark()
PAIRS = [0.77, 0.81, 0.84, 0.85, 0.86, 0.86, 0.87, 0.88, 0.89, 0.90, 0.91, 0.92, 0.94,
         0.96, 0.80, 0.88]


def test_the_interval_holds_the_median_within_the_values_and_repeats() -> None:
    low, high = bench.median_interval(PAIRS)
    assert min(PAIRS) < low <= statistics.median(PAIRS) <= high < max(PAIRS)  # not the range
    assert low < high
    assert bench.median_interval(PAIRS) == (low, high)  # seeded


def test_the_interval_narrows_as_the_pairs_agree_and_is_a_point_when_they_all_do() -> None:
    low, high = bench.median_interval(PAIRS)
    center = statistics.median(PAIRS)
    tight = [center + (value - center) / 4 for value in PAIRS]
    tight_low, tight_high = bench.median_interval(tight)
    assert tight_high - tight_low < (high - low) / 2
    assert bench.median_interval([0.9] * 8) == (0.9, 0.9)
    with pytest.raises(ValueError):
        bench.median_interval([])


def test_the_verdict_says_meets_only_when_every_interval_clears_the_goal() -> None:
    assert bench.goal_verdict({"a": (0.86, 0.93), "b": (0.85, 0.99)}, 0.85) == "meets"
    assert bench.goal_verdict({"a": (0.86, 0.93), "b": (0.78, 0.84)}, 0.85) == "MISSES"
    # one interval straddling the goal: the run cannot tell
    assert bench.goal_verdict({"a": (0.86, 0.93), "b": (0.82, 0.90)},
                              0.85) == "too close to call"
    # one wholly below wins over one that straddles
    assert bench.goal_verdict({"a": (0.82, 0.90), "b": (0.70, 0.80)}, 0.85) == "MISSES"


def test_the_stolen_share_comes_from_proc_stats_steal_column() -> None:
    before = bench.cpu_ticks("cpu  100 0 50 800 10 0 0 40 0 0\ncpu0 1 2 3\n")
    after = bench.cpu_ticks("cpu  150 0 70 900 10 0 0 100 0 0\n")
    assert before == (1000, 40) and after == (1230, 100)
    assert bench.stolen_share(before, after) == 60 / 230
    assert bench.cpu_ticks("cpu  1 2 3 4\n") is None  # a kernel without the column
    assert bench.stolen_share(None, after) is None
    assert bench.stolen_share(after, after) is None
