"""The raylet's /metrics endpoint (metrics/deferred.py): its port is bound at start, its
code loads on the first connection, and it then serves what prometheus-client's own
server would."""

from __future__ import annotations

import socket
import urllib.request
from collections.abc import Iterator

import pytest
from prometheus_client.core import GaugeMetricFamily, Metric

from tracedray.exceptions import ConfigError
from tracedray.metrics.deferred import DeferredMetricsServer, open_deferred


class _One:
    def __init__(self) -> None:
        self.built = 0

    def collector(self) -> _One:
        self.built += 1
        return self

    def collect(self) -> Iterator[Metric]:
        family = GaugeMetricFamily("deferred_test_value", "A test gauge", labels=["k"])
        family.add_metric(["v"], 7.0)
        yield family


@pytest.fixture
def endpoint() -> Iterator[DeferredMetricsServer]:
    server = open_deferred("127.0.0.1", 0)
    try:
        yield server
    finally:
        server.stop()


def _scrape(server: DeferredMetricsServer, accept: str = "") -> tuple[str, str]:
    request = urllib.request.Request(f"http://127.0.0.1:{server.port}/metrics",
                                     headers={"Accept": accept} if accept else {})
    with urllib.request.urlopen(request, timeout=30) as response:
        return response.headers["Content-Type"], response.read().decode()


def test_collectors_are_built_on_the_first_scrape_and_served(
        endpoint: DeferredMetricsServer) -> None:
    one = _One()
    endpoint.add(one.collector)
    assert endpoint.port > 0
    assert not endpoint.loaded and one.built == 0
    kind, text = _scrape(endpoint)
    assert kind.startswith("text/plain; version=0.0.4")
    assert 'deferred_test_value{k="v"} 7.0' in text
    assert endpoint.loaded and one.built == 1
    kind, text = _scrape(endpoint, "application/openmetrics-text; version=1.0.0")
    assert kind.startswith("application/openmetrics-text") and text.endswith("# EOF\n")
    assert one.built == 1  # built once, read at every scrape


def test_a_collector_added_after_the_load_joins_at_once(
        endpoint: DeferredMetricsServer) -> None:
    endpoint.registry  # noqa: B018 - what the OTLP export does at start: loads now
    assert endpoint.loaded
    one = _One()
    endpoint.add(one.collector)
    assert one.built == 1
    assert "deferred_test_value" in _scrape(endpoint)[1]


def test_a_port_in_use_is_a_config_error() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        with pytest.raises(ConfigError, match="the port is in use"):
            open_deferred("127.0.0.1", port)
