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


# --- pooling saved runs (--save, --pool)

def test_the_pooled_interval_holds_the_median_of_all_pairs_and_repeats() -> None:
    runs = [PAIRS, [value - 0.03 for value in PAIRS], [value + 0.02 for value in PAIRS]]
    low, high = bench.pooled_interval(runs)
    everything = [value for run in runs for value in run]
    assert low <= statistics.median(everything) <= high
    assert low < high
    assert bench.pooled_interval(runs) == (low, high)  # seeded


def test_runs_that_disagree_widen_the_pooled_interval_beyond_their_pairs_alone() -> None:
    # Three runs on three machines-worth of noise: each run's pairs agree within it,
    # the runs do not. Resampling runs says the pool cannot place the median closely;
    # treating every pair alike (what pairs alone would say) is far too sure.
    runs = [[center + 0.001 * i for i in range(16)] for center in (0.80, 0.88, 0.96)]
    low, high = bench.pooled_interval(runs)
    pairs_low, pairs_high = bench.median_interval([value for run in runs for value in run])
    assert high - low > 2 * (pairs_high - pairs_low)
    assert low < 0.85 < high and pairs_low > 0.85
    # Runs that agree pool to about what one long run would give.
    same_low, same_high = bench.pooled_interval([PAIRS, PAIRS[::-1]])
    one_low, one_high = bench.median_interval(PAIRS + PAIRS[::-1])
    assert abs((same_high - same_low) - (one_high - one_low)) < 0.03
    with pytest.raises(ValueError):
        bench.pooled_interval([[], []])


def test_a_saved_run_names_the_settings_the_clusters_ran_with(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRACEDRAY_TELEMETRY_AGENT_MAX_DEFER_S", "600")
    monkeypatch.setenv("HOME_OF_SOMETHING_ELSE", "x")
    saved = bench.saved_run(control=False, rounds=1, tasks=1, stolen=None,
                            ratios={bench.EMPTY: [0.9]}, runs={}, commit="abc")
    assert saved["environment"]["TRACEDRAY_TELEMETRY_AGENT_MAX_DEFER_S"] == "600"
    assert "HOME_OF_SOMETHING_ELSE" not in saved["environment"]
    assert saved["finished_at"].endswith("Z")


def _save(path: Path, ratios: dict[str, list[float]], *, control: bool = False) -> Path:
    runs = {name: {"on": [{"rate": 1.0, "cpu_us": 1.0}] * len(r),
                   "off": [{"rate": 1.0, "cpu_us": 1.0}] * len(r)} for name, r in ratios.items()}
    path.write_text(bench.json.dumps(bench.saved_run(
        control=control, rounds=len(next(iter(ratios.values()))), tasks=5000, stolen=0.2,
        ratios=ratios, runs=runs, commit="abc123")))
    return path


def test_pool_reads_saved_runs_and_gives_the_verdict_over_all_their_pairs(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    high = [0.90 + 0.005 * i for i in range(12)]
    paths = [_save(tmp_path / f"run{i}.json", {bench.EMPTY: high, bench.PUT_GET_SMALL: high})
             for i in range(3)]
    bench.pool(paths)
    out = capsys.readouterr().out
    assert "3 saved runs" in out and "20% stolen" in out and "abc123" in out
    assert "the goal of >= 0.85: meets" in out
    low = [0.70 + 0.005 * i for i in range(12)]
    paths.append(_save(tmp_path / "low.json", {bench.EMPTY: low}))
    paths.append(_save(tmp_path / "low2.json", {bench.EMPTY: low}))
    paths.append(_save(tmp_path / "low3.json", {bench.EMPTY: low}))
    bench.pool(paths)
    out = capsys.readouterr().out
    assert "the goal of >= 0.85: too close to call" in out  # three runs each way
    controls = [_save(tmp_path / f"control{i}.json", {bench.EMPTY: [1.0, 1.02],
                                                      bench.PUT_GET_SMALL: [0.9, 0.92]},
                      control=True) for i in range(2)]
    bench.pool(controls)
    out = capsys.readouterr().out
    assert "2 saved control runs" in out
    assert f"the median furthest from 1.00 is 0.91 ({bench.PUT_GET_SMALL})" in out
    assert "goal" not in out  # an A/A run says nothing about the goal


def test_pool_refuses_what_it_cannot_pool_with_a_message_that_names_the_file(
        tmp_path: Path) -> None:
    good = _save(tmp_path / "good.json", {bench.EMPTY: [0.9, 0.91]})
    control = _save(tmp_path / "control.json", {bench.EMPTY: [1.0, 0.99]}, control=True)
    not_json = tmp_path / "notes.txt"
    not_json.write_text("worst median 0.85\n")
    other = tmp_path / "other.json"
    other.write_text('{"benchmark": "core", "format": 1}')
    bad_ratios = tmp_path / "bad.json"
    bad_ratios.write_text(bench.json.dumps({**bench.json.loads(good.read_text()),
                                            "ratios": {bench.EMPTY: []}}))
    cases = {(good, control): "cannot pool --control runs with on/off runs",
             (good, not_json): "notes.txt: not JSON",
             (other,): "other.json: not a run of benchmarks/telemetry.py",
             (bad_ratios,): "bad.json: its \"ratios\" are not lists",
             (tmp_path / "missing.json",): "missing.json: cannot be read",
             (good, tmp_path / "." / "good.json"): "given twice"}
    for paths, message in cases.items():
        with pytest.raises(bench.SavedRunError, match=message.replace("(", r"\(")):
            bench.pool(list(paths))
