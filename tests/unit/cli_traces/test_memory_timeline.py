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
