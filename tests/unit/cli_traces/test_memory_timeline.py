from __future__ import annotations

from cli_traces_builders import MS, NODE_A, NODE_B, RAYLET_A, RAYLET_B, T0, Recorder

from tracedray.cli.memory_timeline import (
    render_terminal_chart,
    save_png,
    store_peaks,
    store_usage_series,
)
from tracedray.cli.tracestore.model import parse_resource_spans
from tracedray.telemetry import attributes as attr

MB = 1024 * 1024


def put(rec: Recorder, proc, at_ms: float, oid: str, size: int, site: str,
        used: int | None = None, location: str = "shm") -> None:
    attributes = {attr.OBJECT_ID: oid, attr.OBJECT_SIZE: size, attr.OBJECT_LOCATION: location,
                  attr.OBJECT_CALL_SITE: site, attr.NODE_ID: proc.node_id}
    if used is not None:
        attributes.update({attr.STORE_USED: used, attr.STORE_CAPACITY: 100 * MB})
    rec.span(proc, "object.put", at_ms, at_ms + 1, attributes)


def event(rec: Recorder, proc, name: str, at_ms: float, oid: str, size: int | None = None,
          used: int | None = None) -> None:
    attributes = {attr.OBJECT_ID: oid, attr.NODE_ID: proc.node_id}
    if size is not None:
        attributes[attr.OBJECT_SIZE] = size
    if used is not None:
        attributes[attr.STORE_USED] = used
    rec.span(proc, name, at_ms, at_ms + 1, attributes)


def scenario():
    rec = Recorder()
    put(rec, RAYLET_A, 0, "o1", 10 * MB, "main.py:3 in load")
    put(rec, RAYLET_A, 10, "o2", 30 * MB, "main.py:9 in features")
    put(rec, RAYLET_A, 20, "o3", 30 * MB, "main.py:9 in features")
    put(rec, RAYLET_A, 25, "tiny", 10, "main.py:1 in x", location="inline")  # not in the store
    event(rec, RAYLET_A, "object.spill", 30, "o2", 30 * MB)
    event(rec, RAYLET_A, "object.free", 40, "o2")  # already spilled: the store is unchanged
    event(rec, RAYLET_A, "object.free", 50, "o1")  # size taken from its put
    event(rec, RAYLET_A, "object.restore", 60, "o2", 30 * MB)
    # Node B reports the raylet's own figure, which wins over integration.
    put(rec, RAYLET_B, 5, "b1", 5 * MB, "worker.py:2 in f", used=7 * MB)
    event(rec, RAYLET_B, "object.free", 15, "b1", 5 * MB, used=2 * MB)
    spans, warnings = parse_resource_spans(rec.resource_spans())
    assert warnings == []
    return spans


def test_usage_series_integrates_sizes_and_prefers_store_used():
    series = store_usage_series(scenario())
    in_mb = {node: [((t - T0) // MS, used / MB) for t, used in points]
             for node, points in series.items()}
    assert in_mb[NODE_A] == [(1, 10), (11, 40), (21, 70), (31, 40), (41, 40), (51, 30), (61, 60)]
    assert in_mb[NODE_B] == [(6, 7), (16, 2)]


def test_peak_names_the_call_sites_holding_the_most():
    peaks = store_peaks(scenario())
    peak = peaks[NODE_A]
    assert (peak.time_ns - T0) // MS == 21 and peak.used_bytes == 70 * MB
    assert [(u.call_site, u.bytes // MB, u.objects) for u in peak.top_call_sites] == [
        ("main.py:9 in features", 60, 2), ("main.py:3 in load", 10, 1)]
    assert peaks[NODE_B].capacity_bytes == 100 * MB and peaks[NODE_B].used_bytes == 7 * MB


def test_terminal_chart_and_png(tmp_path):
    spans = scenario()
    series, peaks = store_usage_series(spans), store_peaks(spans)
    chart = render_terminal_chart(series, peaks, width=30)
    lines = chart.splitlines()
    assert lines[0].startswith("object store use, 0.06 s")
    assert f"node {NODE_A[:12]}" in lines[1] and "█" in lines[1]
    assert len(lines[1].split("|")[1]) == 30
    assert "peak 70.0 MB at +0.02 s; held by:" in chart
    assert "60.0 MB     2 obj  main.py:9 in features" in chart
    assert "peak 7.0 MB of 100.0 MB" in chart
    assert render_terminal_chart({}, {}).startswith("no object-store events")
    path = save_png(series, peaks, tmp_path / "memory.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def seal(rec: Recorder, proc, at_ms: float, oid: str, size: int, used: int, site: str = "",
         copy: str = "primary") -> None:
    rec.span(proc, "object.seal", at_ms, at_ms + 1, {
        attr.OBJECT_ID: oid, attr.OBJECT_SIZE: size, attr.NODE_ID: proc.node_id,
        attr.STORE_USED: used, attr.STORE_CAPACITY: 100 * MB, attr.OBJECT_CALL_SITE: site,
        attr.OBJECT_COPY: copy})


def returns_scenario():
    """A driver's put (its object.put and the raylet's object.seal), two task returns and an
    actor return sealed by the raylet only, and a pulled copy on the other node."""
    rec = Recorder()
    seal(rec, RAYLET_A, 0, "p1", 40 * MB, 40 * MB, "main.py:5 in main")
    put(rec, RAYLET_A, 1, "p1", 40 * MB, "main.py:5 in main")  # the same entry: counted once
    seal(rec, RAYLET_A, 10, "r1", 10 * MB, 50 * MB, "main.py:8 in main")  # f.remote()
    seal(rec, RAYLET_A, 20, "r2", 10 * MB, 60 * MB, "main.py:8 in main")
    seal(rec, RAYLET_A, 30, "a1", 15 * MB, 75 * MB, "main.py:11 in main")  # actor.m.remote()
    seal(rec, RAYLET_B, 35, "r1", 10 * MB, 10 * MB, copy="secondary")  # no call site of its own
    event(rec, RAYLET_A, "object.free", 40, "r2", 10 * MB, used=65 * MB)
    spans, warnings = parse_resource_spans(rec.resource_spans())
    assert warnings == []
    return spans


def test_returns_sealed_into_the_store_count_with_their_remote_call_sites():
    peaks = store_peaks(returns_scenario())
    peak = peaks[NODE_A]
    assert peak.used_bytes == 75 * MB and (peak.time_ns - T0) // MS == 31
    assert [(u.call_site, u.bytes // MB, u.objects) for u in peak.top_call_sites] == [
        ("main.py:5 in main", 40, 1), ("main.py:8 in main", 20, 2),
        ("main.py:11 in main", 15, 1)]
    # The pulled copy counts on its node, named by its primary's call site.
    assert [(u.call_site, u.bytes // MB) for u in peaks[NODE_B].top_call_sites] == [
        ("main.py:8 in main", 10)]


def test_an_object_put_and_its_seal_are_one_entry_without_store_used():
    rec = Recorder()
    put(rec, RAYLET_A, 0, "p1", 40 * MB, "main.py:5 in main")
    seal(rec, RAYLET_A, 1, "p1", 40 * MB, 40 * MB, "main.py:5 in main")
    put(rec, RAYLET_A, 2, "p2", 10 * MB, "main.py:6 in main")  # integrated: no seal seen
    spans, _ = parse_resource_spans(rec.resource_spans())
    assert [used // MB for _, used in store_usage_series(spans)[NODE_A]] == [40, 40, 50]


def test_held_until_keeps_what_an_owner_held_when_it_ended():
    from tracedray.cli.memory_timeline import replay_store

    spans = returns_scenario()
    node = replay_store(spans)[NODE_A]
    assert sorted(node.held) == ["a1", "p1", "r1"] and node.used == 65 * MB
    # r2's free came at or after its owner's end: the post-mortem view still shows it held.
    kept = replay_store(spans, held_until={"r2": T0 + 40 * MS})[NODE_A]
    assert sorted(kept.held) == ["a1", "p1", "r1", "r2"] and kept.frees_after_owner_end == 1
    assert kept.used == 65 * MB  # the usage series follows every event
    assert not kept.held["p1"].secondary and replay_store(spans)[NODE_B].held["r1"].secondary


def test_a_free_for_its_owner_s_end_keeps_the_object_held_post_mortem():
    from tracedray.cli.memory_timeline import replay_store

    rec = Recorder()
    seal(rec, RAYLET_A, 0, "p1", 40 * MB, 40 * MB, "main.py:5 in main")
    seal(rec, RAYLET_A, 1, "p2", 10 * MB, 50 * MB, "main.py:6 in main")
    for at, oid, reason, used in ((5, "p2", "released", 40), (9, "p1", "owner died", 0)):
        rec.span(RAYLET_A, "object.free", at, at + 1, {
            attr.OBJECT_ID: oid, attr.NODE_ID: NODE_A, attr.STORE_USED: used * MB,
            "tracedray.object.free_reason": reason})
    spans, _ = parse_resource_spans(rec.resource_spans())
    assert replay_store(spans)[NODE_A].held == {}
    node = replay_store(spans, held_until={})[NODE_A]  # no end known: the reason tells
    assert sorted(node.held) == ["p1"] and node.used == 0
