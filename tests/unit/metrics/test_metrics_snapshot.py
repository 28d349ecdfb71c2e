"""Process snapshots: how the node's processes' metrics merge, and what survives a
process's exit."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tracedray.metrics.snapshot import (
    COUNTER,
    GAUGE,
    HISTOGRAM,
    Family,
    ProcessMetrics,
    Series,
    SnapshotReader,
    bucket_index,
    cumulative,
    merge,
)


def _family(kind: str, **series: Series) -> Family:
    family = Family("m", kind, "help", ("k",), (1.0, 2.0) if kind == HISTOGRAM else ())
    family.series = {(k,): s for k, s in series.items()}
    return family


def test_counters_add_up_across_processes() -> None:
    merged = merge([_family(COUNTER, a=Series(2)), _family(COUNTER, a=Series(3), b=Series(1))])
    assert {k: s.value for k, s in merged["m"].series.items()} == {("a",): 5, ("b",): 1}


def test_a_gauge_takes_the_value_set_last() -> None:
    merged = merge([_family(GAUGE, a=Series(7, at=20.0)), _family(GAUGE, a=Series(1, at=10.0))])
    assert merged["m"].series[("a",)].value == 7


def test_histograms_add_their_buckets() -> None:
    one = _family(HISTOGRAM, a=Series(buckets=[1, 0, 2], sum=9, count=3))
    two = _family(HISTOGRAM, a=Series(buckets=[0, 1, 0], sum=1.5, count=1))
    merged = merge([one, two])["m"].series[("a",)]
    assert (merged.buckets, merged.sum, merged.count) == ([1, 1, 2], 10.5, 4)


def test_a_family_two_processes_disagree_on_keeps_the_first() -> None:
    other = Family("m", GAUGE, "", ("k",))
    other.series[("a",)] = Series(100)
    merged = merge([_family(COUNTER, a=Series(1)), other])
    assert merged["m"].kind == COUNTER and merged["m"].series[("a",)].value == 1


def test_merging_copies_what_it_reads() -> None:
    source = _family(COUNTER, a=Series(1))
    merge([source, _family(COUNTER, a=Series(1))])
    assert source.series[("a",)].value == 1


def test_buckets_take_values_at_or_below_their_bound() -> None:
    assert [bucket_index((1.0, 2.0), v) for v in (0.5, 1.0, 1.5, 2.0, 3.0)] == [0, 0, 1, 1, 2]
    assert cumulative([1, 0, 2]) == [1, 1, 3]


@pytest.fixture
def new_metrics() -> Iterator[Callable[[], ProcessMetrics]]:
    """ProcessMetrics whose writer threads are stopped at the test's end."""
    made: list[ProcessMetrics] = []

    def make() -> ProcessMetrics:
        made.append(ProcessMetrics())
        return made[-1]

    yield make
    for metrics in made:
        metrics.close()


def test_close_stops_the_writer_after_a_last_write(tmp_path: Path) -> None:
    path = tmp_path / "metrics" / "node" / "worker-1.json"
    metrics = ProcessMetrics()
    metrics.set_destination(lambda: path)
    counter = metrics.declare("c", COUNTER, "", ())
    writer = metrics._thread
    assert writer is not None and writer.is_alive()
    metrics.add(counter, (), 3)
    metrics.close()
    assert not writer.is_alive()
    [family] = json.loads(path.read_text())["families"]
    assert Family.from_json(family).series[()].value == 3


def test_a_process_writes_its_snapshot_only_when_it_changed(tmp_path: Path,
        new_metrics: Callable[[], ProcessMetrics]) -> None:
    metrics = new_metrics()
    path = tmp_path / "metrics" / "node" / "worker-1.json"
    metrics.set_destination(lambda: path)
    counter = metrics.declare("c", COUNTER, "", ())
    metrics.add(counter, (), 2)
    assert metrics.write() is True
    assert metrics.write() is False
    written = json.loads(path.read_text())
    assert [Family.from_json(f).series[()].value for f in written["families"]] == [2]
    assert not list(path.parent.glob(".*.tmp"))


def test_a_write_after_the_session_was_removed_does_not_bring_it_back(tmp_path: Path,
        new_metrics: Callable[[], ProcessMetrics]) -> None:
    session = tmp_path / "session"
    path = session / "metrics" / "node" / "agent-1.json"
    metrics = new_metrics()
    metrics.set_destination(lambda: path)
    counter = metrics.declare("c", COUNTER, "", ())
    metrics.add(counter, (), 1)
    session.mkdir()
    assert metrics.write() is True  # metrics/<node>/ are made inside an existing session
    shutil.rmtree(session)
    metrics.add(counter, (), 1)
    assert metrics.write() is False
    assert not session.exists()
    assert metrics.statistics()["write_failures"] == 1


def test_a_name_is_declared_once_per_process(
        new_metrics: Callable[[], ProcessMetrics]) -> None:
    metrics = new_metrics()
    metrics.set_destination(lambda: None)
    metrics.declare("x", COUNTER, "", ("a",))
    assert metrics.declare("x", COUNTER, "", ("a",)) is not None
    with pytest.raises(ValueError, match="already declared in this process as a counter"):
        metrics.declare("x", GAUGE, "", ())


def _write(folder: Path, pid: int, *families: Family) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"worker-{pid}.json").write_text(json.dumps(
        {"pid": pid, "families": [f.to_json() for f in families]}))


def test_an_exited_process_keeps_its_counts_but_not_its_gauges(tmp_path: Path) -> None:
    alive = {1: True, 2: True}
    reader = SnapshotReader(tmp_path, lambda pid: alive[pid])
    gauge = Family("g", GAUGE, "", ())
    gauge.series[()] = Series(5, at=1.0)
    counter = Family("c", COUNTER, "", ())
    counter.series[()] = Series(3)
    _write(tmp_path, 1, counter, gauge)
    _write(tmp_path, 2, counter)
    assert reader.read().families["c"].series[()].value == 6
    alive[1] = False
    families = reader.read().families
    assert families["c"].series[()].value == 6
    assert "g" not in families
    assert not (tmp_path / "worker-1.json").exists()
    assert reader.read().families["c"].series[()].value == 6  # counted once


def test_a_bad_file_is_counted_and_skipped(tmp_path: Path) -> None:
    (tmp_path / "worker-9.json").write_text("{not json")
    counter = Family("c", COUNTER, "", ())
    counter.series[()] = Series(1)
    _write(tmp_path, 3, counter)
    result = SnapshotReader(tmp_path, lambda pid: True).read()
    assert (result.bad_files, result.families["c"].series[()].value) == (1, 1)


def test_the_last_write_goes_where_the_others_went(tmp_path: Path,
        new_metrics: Callable[[], ProcessMetrics]) -> None:
    """A driver's final write at exit comes after shutdown(): it no longer knows its
    cluster, and still writes its last counts to its node's folder."""
    metrics = new_metrics()
    where: list[Path | None] = [tmp_path / "driver-1.json"]
    metrics.set_destination(lambda: where[0])
    counter = metrics.declare("c", COUNTER, "", ())
    metrics.add(counter, (), 1)
    metrics.write()
    where[0] = None
    metrics.add(counter, (), 1)
    assert metrics.write() is True
    [family] = json.loads((tmp_path / "driver-1.json").read_text())["families"]
    assert Family.from_json(family).series[()].value == 2
