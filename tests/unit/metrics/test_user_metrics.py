"""tracedray.util.metrics: Ray's signatures and checks, recorded in the process's
metrics."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tracedray.metrics import snapshot
from tracedray.util.metrics import Counter, Gauge, Histogram


@pytest.fixture(autouse=True)
def fresh_process_metrics(monkeypatch: pytest.MonkeyPatch) -> Iterator[snapshot.ProcessMetrics]:
    metrics = snapshot.ProcessMetrics()
    metrics.set_destination(lambda: None)
    monkeypatch.setattr(snapshot, "_process_metrics", metrics)
    yield metrics
    metrics.close()


def _values(metrics: snapshot.ProcessMetrics, name: str) -> dict[tuple[str, ...], object]:
    family = next(f for f in metrics.families() if f.name == name)
    if family.kind == snapshot.HISTOGRAM:
        return {k: (s.buckets, s.sum, s.count) for k, s in family.series.items()}
    return {k: s.value for k, s in family.series.items()}


def test_a_counter_counts_per_tag_values(
        fresh_process_metrics: snapshot.ProcessMetrics) -> None:
    requests = Counter("requests", description="served", tag_keys=("route", "code"))
    requests.set_default_tags({"code": "200"})
    requests.inc(tags={"route": "/a"})
    requests.inc(2, tags={"route": "/a"})
    requests.inc(tags={"route": "/b", "code": "500"})
    assert _values(fresh_process_metrics, "requests") == {("/a", "200"): 3, ("/b", "500"): 1}
    assert requests.info["default_tags"] == {"code": "200"}


def test_a_gauge_keeps_the_last_value(fresh_process_metrics: snapshot.ProcessMetrics) -> None:
    depth = Gauge("queue_depth")
    depth.set(4)
    depth.set(2.5)
    assert _values(fresh_process_metrics, "queue_depth") == {(): 2.5}


def test_a_histogram_counts_in_its_buckets(
        fresh_process_metrics: snapshot.ProcessMetrics) -> None:
    latency = Histogram("latency_s", boundaries=[0.1, 1.0])
    for value in (0.05, 0.5, 3.0):
        latency.observe(value)
    assert _values(fresh_process_metrics, "latency_s") == {(): ([1, 1, 1], 3.55, 3)}


@pytest.mark.parametrize(("make", "message"), [
    (lambda: Counter(""), "Empty name is not allowed"),
    (lambda: Counter("a-b"), "metric name 'a-b' is invalid"),
    (lambda: Counter("tracedray_tasks"), "reserved for tracedray's own metrics"),
    (lambda: Counter("c", tag_keys="route"), "tag_keys should be a tuple type"),
    (lambda: Histogram("h"), "boundaries argument should be provided"),
    (lambda: Histogram("h", boundaries=[1, 0]), "Use positive values"),
    (lambda: Histogram("h", boundaries=[2, 1]), "strictly increasing"),
])
def test_bad_declarations_say_what_is_wrong(make: object, message: str) -> None:
    with pytest.raises((ValueError, TypeError), match=message):
        make()  # type: ignore[operator]


def test_bad_calls_say_what_is_wrong() -> None:
    counter = Counter("calls", tag_keys=("route",))
    with pytest.raises(ValueError, match="Missing value for tag key"):
        counter.inc()
    with pytest.raises(ValueError, match="Unrecognized tag keys"):
        counter.inc(tags={"route": "/", "other": "x"})
    with pytest.raises(ValueError, match="value must be >0"):
        counter.inc(0)
    with pytest.raises(TypeError, match="Tag values must be str"):
        counter.inc(tags={"route": 1})  # type: ignore[dict-item]
    with pytest.raises(ValueError, match="Unrecognized tag key"):
        counter.set_default_tags({"nope": "x"})
