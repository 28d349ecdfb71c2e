"""Metrics on a real cluster: every target of ``prometheus_sd.json`` serves the
families, a real Prometheus scrapes them through the file, discovery follows nodes
joining and dying, users' metrics reach the node's endpoint."""

from __future__ import annotations

import json
import os
import signal
import socket
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from cli_support import run_json
from multinode_support import started_nodes, wait_for
from opentelemetry.proto.collector.metrics.v1 import (
    metrics_service_pb2,
    metrics_service_pb2_grpc,
)
from prometheus_client.parser import text_string_to_metric_families
from prometheus_support import prometheus_binary, prometheus_scraping

pytestmark = pytest.mark.integration

MB = 1 << 20
FAMILIES = {
    "raylet": ("tracedray_object_store_used_bytes", "tracedray_object_store_capacity_bytes",
               "tracedray_object_store_objects", "tracedray_spilled_bytes",
               "tracedray_restored_bytes", "tracedray_workers", "tracedray_resources",
               "tracedray_lease_requests_pending", "tracedray_node_heartbeat_late",
               "tracedray_worker_exits", "tracedray_rpc_server_latency_seconds",
               "tracedray_spans_converted"),
    "gcs": ("tracedray_tasks", "tracedray_actors", "tracedray_gcs_hot_entries",
            "tracedray_gcs_flush_seconds", "tracedray_rpc_server_latency_seconds"),
}


def _targets(session_dir: Path) -> list[dict[str, Any]]:
    path = session_dir / "prometheus_sd.json"
    return json.loads(path.read_text()) if path.exists() else []


def _scrape(target: str, accept: str = "") -> tuple[str, str]:
    request = urllib.request.Request(f"http://{target}/metrics",
                                     headers={"Accept": accept} if accept else {})
    with urllib.request.urlopen(request, timeout=10) as response:
        return response.headers["Content-Type"], response.read().decode()


def _samples(text: str) -> dict[str, list[Any]]:
    out: dict[str, list[Any]] = {}
    for family in text_string_to_metric_families(text):
        out[family.name] = list(family.samples)
    return out


def _value(samples: dict[str, list[Any]], family: str, **labels: str) -> float:
    return sum(s.value for s in samples.get(family, ())
               if all(s.labels.get(k) == v for k, v in labels.items())
               and not s.name.endswith(("_created", "_bucket", "_count", "_sum")))


def _workload(ray: Any) -> tuple[Any, Any]:
    from tracedray.util.metrics import Counter

    @ray.remote
    def square(x: int) -> int:
        from tracedray.util.metrics import Counter, Histogram

        Counter("squares", description="squares computed", tag_keys=("kind",)).inc(
            tags={"kind": "int"})
        Histogram("square_input", boundaries=[10, 100]).observe(x)
        return x * x

    @ray.remote
    class Holder:
        def ping(self) -> str:
            return "pong"

    actor = Holder.remote()
    assert ray.get([square.remote(i) for i in range(50)]) == [i * i for i in range(50)]
    assert ray.get(actor.ping.remote()) == "pong"
    held = ray.put(np.zeros(10 * MB, dtype=np.uint8))
    Counter("driver_events").inc(3)
    return actor, held


def test_every_target_in_the_discovery_file_serves_the_metrics(ray: Any) -> None:
    from tracedray.api.calls import current_session_dir

    session_dir = current_session_dir()
    assert session_dir is not None
    node_id = ray.get_runtime_context().get_node_id()
    actor, held = _workload(ray)

    def scraped() -> dict[str, dict[str, list[Any]]] | None:
        targets = {g["labels"]["component"]: g for g in _targets(session_dir)}
        if set(targets) != {"gcs", "raylet"}:
            return None
        found = {c: _samples(_scrape(g["targets"][0])[1]) for c, g in targets.items()}
        done = (_value(found["gcs"], "tracedray_tasks", state="FINISHED") >= 50
                and _value(found["raylet"], "squares", kind="int") >= 50
                and _value(found["raylet"], "driver_events") >= 3
                # The agent runs at the lowest priority: its first report may come late.
                and "tracedray_spans_converted" in found["raylet"])
        return found if done else None

    found = wait_for(scraped, 30, "the workload's numbers on both endpoints")
    for component, names in FAMILIES.items():
        missing = [n for n in names if n not in found[component]]
        assert not missing, f"{component} lacks {missing}"
        for samples in found[component].values():
            for sample in samples:
                assert sample.labels.get("node_id") == node_id, sample
    raylet, gcs = found["raylet"], found["gcs"]
    squares = [s for s in gcs["tracedray_tasks"] if s.labels["name"].endswith(".square")]
    assert [(s.labels["state"], s.value) for s in squares] == [("FINISHED", 50)]
    alive = [(s.labels["class_name"], s.value) for s in gcs["tracedray_actors"]
             if s.labels["state"] == "ALIVE"]
    assert [(name.rsplit(".", 1)[-1], count) for name, count in alive] == [("Holder", 1)]
    assert _value(raylet, "tracedray_object_store_used_bytes") >= 10 * MB
    assert _value(raylet, "tracedray_object_store_capacity_bytes") == 256 << 20
    assert _value(raylet, "tracedray_resources", resource="CPU", state="total") == 2
    assert _value(raylet, "tracedray_workers", state="ACTOR") == 1
    histogram = {s.labels["le"]: s.value for s in raylet["square_input"]
                 if s.name.endswith("_bucket")}
    assert histogram == {"10.0": 11, "100.0": 50, "+Inf": 50}
    # `tracedray status` shows the numbers the endpoint serves: one source (GetNodeStats).
    [row] = run_json("status")["nodes"]
    assert (row["object_store_used"], row["object_store_capacity"]) == (
        _value(raylet, "tracedray_object_store_used_bytes"),
        _value(raylet, "tracedray_object_store_capacity_bytes"))
    rpc = {s.labels["method"] for s in raylet["tracedray_rpc_server_latency_seconds"]}
    assert "RequestWorkerLease" in rpc
    # OpenMetrics when asked for, Prometheus text otherwise.
    target = next(g["targets"][0] for g in _targets(session_dir)
                  if g["labels"]["component"] == "raylet")
    kind, text = _scrape(target, "application/openmetrics-text; version=1.0.0")
    assert kind.startswith("application/openmetrics-text") and text.endswith("# EOF\n")
    kind, _ = _scrape(target)
    assert kind.startswith("text/plain; version=0.0.4")
    del actor, held


def test_a_real_prometheus_scrapes_the_cluster_through_the_discovery_file(
        ray: Any, tmp_path: Path) -> None:
    prometheus_binary()
    from tracedray.api.calls import current_session_dir

    session_dir = current_session_dir()
    assert session_dir is not None
    actor, held = _workload(ray)
    with prometheus_scraping(session_dir / "prometheus_sd.json", tmp_path) as prometheus:
        def answered() -> bool:
            tasks = prometheus.value('sum(tracedray_tasks{state="FINISHED"})')
            used = prometheus.value("sum(tracedray_object_store_used_bytes)")
            actors = prometheus.value('sum(tracedray_actors{state="ALIVE"})')
            return (tasks or 0) >= 50 and (used or 0) >= 10 * MB and (actors or 0) >= 1

        wait_for(answered, 60, "Prometheus's answers for the workload")
        targets = prometheus.targets()
        assert {t["labels"]["component"] for t in targets} == {"gcs", "raylet"}
        assert all(t["health"] == "up" for t in targets), targets
        session = session_dir.name
        assert all(t["labels"]["session"] == session for t in targets)
        by_node = prometheus.query("sum by (node_id) (tracedray_object_store_capacity_bytes)")
        assert [r["metric"]["node_id"] for r in by_node] == [
            ray.get_runtime_context().get_node_id()]
    del actor, held


def test_the_discovery_file_follows_nodes_joining_and_dying(
        monkeypatch: pytest.MonkeyPatch, no_leaks: None) -> None:
    with started_nodes(monkeypatch, {"num_cpus": 1}, {"b": {"num_cpus": 1}}) as cluster:
        def components(expected: int) -> list[dict[str, Any]] | None:
            groups = _targets(cluster.session_dir)
            return groups if len(groups) == expected else None

        groups = wait_for(lambda: components(3), 10, "the GCS and two nodes in the file")
        nodes = {g["labels"]["node_id"] for g in groups if g["labels"]["component"] == "raylet"}
        assert nodes == {cluster.node_id("head"), cluster.node_id("b")}
        for group in groups:  # each target answers
            _scrape(group["targets"][0])
        os.kill(cluster.raylet_pid("b"), signal.SIGKILL)
        groups = wait_for(lambda: components(2), 20, "node b gone from the file")
        assert cluster.node_id("b") not in {g["labels"]["node_id"] for g in groups}


def test_metrics_export_port_is_the_one_asked_for(no_leaks: None) -> None:
    import tracedray
    from tracedray.api.calls import current_session_dir
    from tracedray.exceptions import RaySystemError

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        taken = sock.getsockname()[1]
        sock.listen()
        with pytest.raises(RaySystemError, match=f"127.0.0.1:{taken}.*port is in use"):
            tracedray.init(num_cpus=1, _metrics_export_port=taken)
            tracedray.shutdown()  # not reached when the port is refused, as it must be
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    tracedray.init(num_cpus=1, _metrics_export_port=port)
    try:
        session_dir = current_session_dir()
        assert session_dir is not None
        groups = wait_for(lambda: [g for g in _targets(session_dir)
                                   if g["labels"]["component"] == "raylet"], 10, "the node")
        assert groups[0]["targets"] == [f"127.0.0.1:{port}"]
        assert "tracedray_object_store_used_bytes" in _scrape(f"127.0.0.1:{port}")[1]
    finally:
        tracedray.shutdown()
    assert _targets(session_dir) == []  # a stopped cluster: nothing left to scrape


class _MetricsSink(metrics_service_pb2_grpc.MetricsServiceServicer):
    """An OTLP/gRPC metrics receiver: the last value of each (metric, attributes)."""

    def __init__(self) -> None:
        self.values: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
        self.resources: list[dict[str, str]] = []

    def Export(self, request: Any, context: Any) -> Any:  # noqa: N802 - gRPC method name
        for resource_metrics in request.resource_metrics:
            self.resources.append({a.key: a.value.string_value
                                   for a in resource_metrics.resource.attributes})
            for scope in resource_metrics.scope_metrics:
                for metric in scope.metrics:
                    points = (metric.sum.data_points if metric.HasField("sum")
                              else metric.gauge.data_points)
                    for point in points:
                        key = tuple(sorted((a.key, a.value.string_value)
                                           for a in point.attributes))
                        value = point.as_double if point.HasField("as_double") else point.as_int
                        self.values[(metric.name, key)] = value
        return metrics_service_pb2.ExportMetricsServiceResponse()

    def value(self, name: str, **labels: str) -> float:
        return sum(v for (n, key), v in list(self.values.items())
                   if n == name and all((k, labels[k]) in key for k in labels))


def test_otel_metrics_exporter_otlp_sends_the_same_metrics(
        monkeypatch: pytest.MonkeyPatch, no_leaks: None) -> None:
    import grpc

    import tracedray

    sink = _MetricsSink()
    server = grpc.server(ThreadPoolExecutor(max_workers=4))
    metrics_service_pb2_grpc.add_MetricsServiceServicer_to_server(sink, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    for name, value in {"OTEL_METRICS_EXPORTER": "otlp", "OTEL_TRACES_EXPORTER": "none",
                        "OTEL_LOGS_EXPORTER": "none",
                        "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": f"http://127.0.0.1:{port}",
                        "OTEL_EXPORTER_OTLP_METRICS_INSECURE": "true",
                        "OTEL_METRIC_EXPORT_INTERVAL": "500"}.items():
        monkeypatch.setenv(name, value)
    tracedray.init(num_cpus=1, object_store_memory=128 << 20)
    try:
        node_id = tracedray.get_runtime_context().get_node_id()
        held = tracedray.put(np.zeros(10 * MB, dtype=np.uint8))

        @tracedray.remote
        def one() -> int:
            return 1

        assert tracedray.get([one.remote() for _ in range(5)]) == [1] * 5
        wait_for(lambda: sink.value("tracedray_object_store_used_bytes", node_id=node_id)
                 >= 10 * MB and sink.value("tracedray_tasks", state="FINISHED") >= 5,
                 30, "the store's bytes and the finished tasks over OTLP")
        assert sink.value("tracedray_object_store_capacity_bytes", node_id=node_id) == 128 << 20
        from tracedray.telemetry import attributes as A

        assert {r.get(A.RESOURCE_COMPONENT) for r in sink.resources} == {"raylet", "gcs"}
        del held
    finally:
        tracedray.shutdown()
        server.stop(grace=None)


def test_a_process_counts_outlive_it(ray: Any) -> None:
    """An actor counts, then its worker is stopped (SIGTERM, at once: before its periodic
    write): the node's endpoint still serves its counts."""
    from tracedray.api.calls import current_session_dir

    @ray.remote
    class Counting:
        def count(self, n: int) -> int:
            from tracedray.util.metrics import Counter

            for _ in range(n):
                Counter("actor_steps").inc()
            return os.getpid()

    pid = ray.get(Counting.remote().count.remote(7))
    os.kill(pid, signal.SIGTERM)
    session_dir = current_session_dir()
    assert session_dir is not None
    [target] = [g["targets"][0] for g in _targets(session_dir)
                if g["labels"]["component"] == "raylet"]

    def exited_and_counted() -> bool:
        from tracedray.core.process import process_alive

        return (not process_alive(pid)
                and _value(_samples(_scrape(target)[1]), "actor_steps") == 7)

    wait_for(exited_and_counted, 20, "the exited actor's 7 steps on its node's endpoint")
    # Counted once, whatever the scrapes since.
    assert _value(_samples(_scrape(target)[1]), "actor_steps") == 7
