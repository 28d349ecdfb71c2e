"""benchmarks/abba.py: before/after pairs of any benchmark, and their verdict."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]


def _abba() -> ModuleType:
    spec = importlib.util.spec_from_file_location("abba_benchmark",
                                                  ROOT / "benchmarks" / "abba.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


abba = _abba()


def test_figures_are_the_numbers_flattened_and_lists_count_as_their_median() -> None:
    raw = {"tracedray": {"tasks_per_s": [1, 5, 3], "rtt_ms": 0.5, "ok": True, "name": "x"},
           "load": 2}
    assert abba.figures_of(raw) == {"tracedray.tasks_per_s": 3.0, "tracedray.rtt_ms": 0.5,
                                    "load": 2.0}


def test_a_time_or_size_is_better_lower_and_a_rate_higher() -> None:
    assert abba.higher_is_better("tracedray.tasks_per_s")
    assert abba.higher_is_better("transfer_gbps")
    assert not abba.higher_is_better("actor_rtt_ms")
    assert not abba.higher_is_better("raylet_rss_mb")
    assert not abba.higher_is_better("elapsed_s")
    assert abba.higher_is_better("elapsed_s", higher=["elapsed_s"])
    assert not abba.higher_is_better("score", lower=["score"])


def test_pairs_alternate_which_side_goes_first() -> None:
    assert [abba.order_of(i) for i in range(4)] == [("before", "after"), ("after", "before"),
                                                     ("before", "after"), ("after", "before")]


def test_the_verdict_is_above_one_when_after_is_better_either_way() -> None:
    pairs = [{"load": 1.0, "before": {"rate_per_s": 100.0 + i, "rtt_ms": 2.0},
              "after": {"rate_per_s": 150.0 + i, "rtt_ms": 1.0}} for i in range(8)]
    lines = abba.summarize(pairs)
    rate = next(line for line in lines if line.startswith("rate_per_s"))
    rtt = next(line for line in lines if line.startswith("rtt_ms"))
    assert "after better in 8 of 8" in rate and "after better in 8 of 8" in rtt
    assert "after/before 2.000" in rtt


def test_a_run_on_two_trees_reads_each_side_from_its_own_src(tmp_path: Path) -> None:
    for side, speed in (("old", 10), ("new", 30)):
        package = tmp_path / side / "probe"
        package.mkdir(parents=True)
        (package / "__init__.py").write_text(f"SPEED = {speed}\n")
    bench = tmp_path / "bench.py"
    bench.write_text("import json, probe\nprint(json.dumps({'speed_per_s': probe.SPEED}))\n")
    out = tmp_path / "pairs.json"
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "abba.py"),
                           "--before", str(tmp_path / "old"), "--after", str(tmp_path / "new"),
                           "--pairs", "2", "--out", str(out), "--", sys.executable, str(bench)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    pairs = json.loads(out.read_text())
    assert [p["before"]["speed_per_s"] for p in pairs] == [10.0, 10.0]
    assert [p["after"]["speed_per_s"] for p in pairs] == [30.0, 30.0]
    assert "speed_per_s: before 10 after 30 after/before 3.000" in done.stdout
