"""deploy/otel-collector.yaml and deploy/jaeger-compose.yml parse and line up with each other."""

from __future__ import annotations

from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import urlsplit

import pytest

yaml = pytest.importorskip("yaml")

DEPLOY = Path(__file__).resolve().parents[3] / "deploy"
TRACEDRAY_SERVICES = ("head", "worker-1", "worker-2", "demo")


@pytest.fixture(scope="module")
def collector() -> dict[str, Any]:
    return yaml.safe_load((DEPLOY / "otel-collector.yaml").read_text())


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return yaml.safe_load((DEPLOY / "jaeger-compose.yml").read_text())


def host_port(endpoint: str) -> tuple[str, int]:
    if "://" in endpoint:
        parts = urlsplit(endpoint)
        assert parts.hostname and parts.port, endpoint
        return parts.hostname, parts.port
    host, _, port = endpoint.rpartition(":")
    return host, int(port)


def container_ports(service: dict[str, Any]) -> set[int]:
    ports = {int(str(p).split(":")[-1].split("/")[0]) for p in service.get("ports", [])}
    return ports | {int(str(p).split("/")[0]) for p in service.get("expose", [])}


def mounts(service: dict[str, Any]) -> dict[str, str]:
    """Named volume → mount path in the container."""
    result = {}
    for entry in service.get("volumes", []):
        source, target = str(entry).split(":")[:2]
        result[source] = target
    return result


def test_every_pipeline_references_defined_components(collector):
    pipelines = collector["service"]["pipelines"]
    assert {"traces", "logs"} <= pipelines.keys()
    for name, pipeline in pipelines.items():
        for kind in ("receivers", "processors", "exporters"):
            for component in pipeline.get(kind, []):
                assert component in (collector.get(kind) or {}), f"{name}: {kind} {component}"
    for extension in collector["service"].get("extensions", []):
        assert extension in collector["extensions"]


def test_memory_limiter_first_then_batch(collector):
    for name, pipeline in collector["service"]["pipelines"].items():
        assert pipeline["processors"][:2] == ["memory_limiter", "batch"], name


def test_traces_go_to_jaeger_over_otlp_grpc(collector, compose):
    (exporter,) = collector["service"]["pipelines"]["traces"]["exporters"]
    assert exporter.split("/")[0] == "otlp_grpc"  # the name since Collector v0.144.0
    host, port = host_port(collector["exporters"][exporter]["endpoint"])
    assert host in compose["services"]
    assert port in container_ports(compose["services"][host])
    assert compose["services"][host]["image"].startswith("jaegertracing/jaeger:2.")


def test_receivers_listen_on_all_interfaces_with_otlp_ports(collector, compose):
    protocols = collector["receivers"]["otlp"]["protocols"]
    assert host_port(protocols["grpc"]["endpoint"]) == ("0.0.0.0", 4317)
    assert host_port(protocols["http"]["endpoint"]) == ("0.0.0.0", 4318)
    service = compose["services"]["otel-collector"]
    assert "contrib" in service["image"]  # filelog and file exporter are contrib components
    config_mount = next(v for v in service["volumes"] if "otel-collector.yaml" in v)
    assert config_mount.split(":")[1] == "/etc/otelcol-contrib/config.yaml"
    assert (DEPLOY / config_mount.split(":")[0]).resolve() == DEPLOY / "otel-collector.yaml"


def test_tracedray_services_export_to_the_collectors_receiver(collector, compose):
    grpc_port = host_port(collector["receivers"]["otlp"]["protocols"]["grpc"]["endpoint"])[1]
    for name in TRACEDRAY_SERVICES:
        env = compose["services"][name]["environment"]
        host, port = host_port(env["OTEL_EXPORTER_OTLP_ENDPOINT"])
        assert (host, port, env["OTEL_EXPORTER_OTLP_PROTOCOL"]) == (
            "otel-collector", grpc_port, "grpc"), name


def test_cluster_commands_and_addresses(compose):
    services = compose["services"]
    head = services["head"]["command"]
    assert head[:3] == ["tracedray", "start", "--head"] and "--block" in head
    head_port = head[head.index("--port") + 1]
    for name in ("worker-1", "worker-2"):
        command = services[name]["command"]
        assert command[command.index("--address") + 1] == f"head:{head_port}"
        assert "--block" in command
    assert services["demo"]["command"] == ["python", "-m", "tracedray.demo"]
    assert services["demo"]["environment"]["TRACEDRAY_ADDRESS"] == f"head:{head_port}"
    jaeger_host, jaeger_port = host_port(services["demo"]["environment"]["TRACEDRAY_JAEGER_URL"])
    assert jaeger_port in container_ports(services[jaeger_host]) and jaeger_port == 16686


def test_filelog_reads_the_tracedray_log_volume(collector, compose):
    includes = collector["receivers"]["filelog/tracedray"]["include"]
    collector_mounts = mounts(compose["services"]["otel-collector"])
    for name in TRACEDRAY_SERVICES:
        service = compose["services"][name]
        temp_dir = PurePosixPath(service["environment"]["TRACEDRAY_TEMP_DIR"])
        volume, node_mount = next((v, p) for v, p in mounts(service).items()
                                  if temp_dir.is_relative_to(p))
        assert volume in compose["volumes"] and volume in collector_mounts, name
        # Where this node's log file appears inside the collector container.
        seen = (PurePosixPath(collector_mounts[volume]) / temp_dir.relative_to(node_mount)
                / "session_2026-01-01_00-00-00_7" / "logs" / "worker-1234.jsonl")
        assert any(seen.match(pattern) for pattern in includes), (name, seen)
    operators = collector["receivers"]["filelog/tracedray"]["operators"]
    assert [op["type"] for op in operators[:2]] == ["json_parser", "trace_parser"]
    parser = operators[0]
    assert parser["timestamp"]["parse_from"] == "attributes.timestamp"
    assert parser["severity"]["parse_from"] == "attributes.level"
    # The process's identity is the record's resource, under its spans' keys (what the
    # fields mean is checked with a real collector: tests/integration/test_otel_filelog.py).
    moved = {op["to"]: op["from"] for op in operators if op["type"] == "move"}
    assert moved["body"] == "attributes.event"
    assert {moved['resource["service.name"]'], moved['resource["host.name"]'],
            moved['resource["process.pid"]']} == {"attributes.service", "attributes.host",
                                                  "attributes.pid"}


def test_dockerfile_builds_the_image_compose_uses(compose):
    build = compose["x-tracedray"]["build"]
    assert (DEPLOY / build["context"] / build["dockerfile"]).resolve() == DEPLOY / "Dockerfile"
    assert "FROM python:3.11" in (DEPLOY / "Dockerfile").read_text()
