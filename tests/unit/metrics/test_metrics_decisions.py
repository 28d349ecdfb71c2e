"""The pure decisions of the metrics: worker exit reasons, when the GCS counts its task
table again, the file_sd document, task counts, and the exposition of merged families."""

from __future__ import annotations

from types import SimpleNamespace

from prometheus_client import generate_latest
from prometheus_client.registry import CollectorRegistry

from tracedray._proto.v1 import gcs_pb2
from tracedray.core.gcs.metrics import count_tasks, rescan_due
from tracedray.core.raylet import exit_meaning
from tracedray.core.raylet.metrics import exit_reason
from tracedray.metrics.discovery import Target, file_sd, node_targets
from tracedray.metrics.exposition import SafeCollector, to_prometheus
from tracedray.metrics.snapshot import COUNTER, HISTOGRAM, Family, Series


def test_exit_reasons() -> None:
    assert exit_reason(-9, "SIGKILL", exit_meaning.CGROUP_OOM, False) == "OOM"
    assert exit_reason(-9, "SIGKILL", exit_meaning.NODE_OOM, False) == "OOM"
    assert exit_reason(-9, "SIGKILL", exit_meaning.NOT_OOM, True) == "SIGKILL"
    assert exit_reason(0, "", "", False) == "normal"
    assert exit_reason(-15, "SIGTERM", "", True) == "normal"  # reaped as idle
    assert exit_reason(-15, "SIGTERM", "", False) == "error"
    assert exit_reason(1, "", "", False) == "error"


def test_the_task_table_is_counted_again_at_a_bounded_cost() -> None:
    assert rescan_due(100.0, None, 0.0)
    assert not rescan_due(100.5, 100.0, 0.001)  # at most once a second
    assert rescan_due(101.0, 100.0, 0.001)
    assert not rescan_due(105.0, 100.0, 0.5)  # a 0.5 s count: not before 10 s
    assert rescan_due(110.0, 100.0, 0.5)


def test_task_counts_by_state_and_function() -> None:
    records = [gcs_pb2.TaskRecord(state="FINISHED", function_name="f").SerializeToString(),
               gcs_pb2.TaskRecord(state="FINISHED", function_name="f").SerializeToString(),
               gcs_pb2.TaskRecord(state="FAILED", function_name="g").SerializeToString(),
               gcs_pb2.TaskRecord(function_name="g").SerializeToString()]
    assert count_tasks(iter(records)) == {("FINISHED", "f"): 2, ("FAILED", "g"): 1,
                                          ("PENDING", "g"): 1}


def _node(node_id: str, state: str, port: int) -> SimpleNamespace:
    info = gcs_pb2.NodeInfo(node_id=node_id, state=state, metrics_export_port=port)
    info.raylet.ip = "10.0.0.2"
    return SimpleNamespace(info=info)


def test_the_discovery_file_lists_the_gcs_and_the_alive_nodes_that_serve() -> None:
    targets = node_targets([_node("b", "ALIVE", 9001), _node("c", "DEAD", 9002),
                            _node("d", "ALIVE", 0)])
    document = file_sd([*targets, Target("10.0.0.1", 9000, "a", "gcs")], "session_x")
    assert document == [
        {"targets": ["10.0.0.1:9000"], "labels": {"node_id": "a", "ip": "10.0.0.1",
                                                  "session": "session_x", "component": "gcs"}},
        {"targets": ["10.0.0.2:9001"], "labels": {"node_id": "b", "ip": "10.0.0.2",
                                                  "session": "session_x",
                                                  "component": "raylet"}}]


def test_merged_families_in_the_prometheus_text_format() -> None:
    counter = Family("jobs_total", COUNTER, "jobs", ("kind",))
    counter.series[("a",)] = Series(3)
    histogram = Family("wait_s", HISTOGRAM, "waits", (), (0.5, 1.0))
    histogram.series[()] = Series(buckets=[1, 0, 2], sum=4.0, count=3)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SafeCollector("test", lambda: to_prometheus([counter, histogram],
                                                                  {"node_id": "n1"})))
    text = generate_latest(registry).decode()
    assert 'jobs_total{kind="a",node_id="n1"} 3.0' in text
    assert 'wait_s_bucket{le="0.5",node_id="n1"} 1.0' in text
    assert 'wait_s_bucket{le="+Inf",node_id="n1"} 3.0' in text
    assert 'wait_s_sum{node_id="n1"} 4.0' in text


def test_a_failing_collector_costs_its_families_not_the_scrape() -> None:
    def broken() -> list[object]:
        raise RuntimeError("gone")

    collector = SafeCollector("broken", broken)
    assert list(collector.collect()) == []
    assert collector.failures == 1


def test_otlp_is_asked_for_by_otel_metrics_exporter() -> None:
    from tracedray.metrics.otlp import protocol, wanted

    assert wanted({"OTEL_METRICS_EXPORTER": "console, otlp"})
    assert not wanted({"OTEL_METRICS_EXPORTER": "none"})
    assert not wanted({})
    assert protocol({}) == "grpc"
    assert protocol({"OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
                     "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL": "grpc"}) == "grpc"


def test_each_prometheus_family_becomes_observable_instruments() -> None:
    from tracedray.metrics.otlp import instruments_of

    assert instruments_of("counter", "x") == [("x_total", "counter", "_total")]
    assert instruments_of("gauge", "y") == [("y", "gauge", "")]
    assert [name for name, _, _ in instruments_of("histogram", "z")] == [
        "z_bucket", "z_count", "z_sum"]


def test_the_discovery_file_is_rewritten_on_change_and_emptied_at_the_end(tmp_path) -> None:
    import json

    from tracedray.metrics.discovery import DiscoveryWriter

    nodes = [_node("b", "ALIVE", 9001)]
    writer = DiscoveryWriter(tmp_path, lambda: nodes, lambda: Target("h", 9000, "a", "gcs"))
    assert writer.update() is True
    assert writer.update() is False  # nothing changed: not rewritten
    nodes[0].info.state = "DEAD"
    assert writer.update() is True
    assert [g["labels"]["component"] for g in json.loads(writer.path.read_text())] == ["gcs"]
    writer.close()
    assert json.loads(writer.path.read_text()) == []
    assert writer.update() is False
    assert json.loads(writer.path.read_text()) == []
