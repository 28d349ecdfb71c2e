"""deploy/prometheus.yml, deploy/grafana/ and the compose file's Prometheus and Grafana
line up with what the cluster exports: the file_sd path, the data source, every
dashboard query (parsed by Prometheus's promtool where it is installed) and the metric
names it uses."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path, PurePosixPath
from typing import Any

import pytest
import yaml

from tracedray.core.session import LATEST_LINK
from tracedray.metrics.discovery import SD_FILE

ROOT = Path(__file__).resolve().parents[3]
DEPLOY = ROOT / "deploy"
METRICS_SOURCES = ROOT / "src" / "tracedray" / "metrics"
COLLECTOR_SOURCES = [ROOT / "src" / "tracedray" / "core" / part / "metrics.py"
                     for part in ("raylet", "gcs")]


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return dict(yaml.safe_load((DEPLOY / "jaeger-compose.yml").read_text()))


@pytest.fixture(scope="module")
def dashboard() -> dict[str, Any]:
    return dict(json.loads((DEPLOY / "grafana" / "tracedray.json").read_text()))


def _exprs(dashboard: dict[str, Any]) -> list[str]:
    return [t["expr"] for p in dashboard["panels"] for t in p["targets"]]


def _exported_names() -> set[str]:
    """Every family name the metrics package and the raylet's and GCS's collectors
    declare, with the suffixes of its series."""
    names: set[str] = set()
    sources = [*METRICS_SOURCES.glob("*.py"), *COLLECTOR_SOURCES]
    for source in sources:
        for name in re.findall(r'"(tracedray_[a-z_]+)"', source.read_text()):
            names |= {name, f"{name}_total", f"{name}_bucket", f"{name}_count", f"{name}_sum"}
    return names


def test_prometheus_reads_the_heads_discovery_file(compose: dict[str, Any]) -> None:
    config = yaml.safe_load((DEPLOY / "prometheus.yml").read_text())
    [job] = config["scrape_configs"]
    [files] = [c["files"] for c in job["file_sd_configs"]]
    head_dir = PurePosixPath(compose["services"]["head"]["environment"]["TRACEDRAY_TEMP_DIR"])
    assert files == [str(head_dir / LATEST_LINK / SD_FILE)]
    prometheus = compose["services"]["prometheus"]
    mounted = dict(v.split(":")[:2][::-1] for v in prometheus["volumes"])
    assert mounted["/etc/prometheus/prometheus.yml"] == "./prometheus.yml"
    assert head_dir.is_relative_to(next(p for p, v in mounted.items()
                                        if v == "tracedray-sessions"))


def test_every_node_listens_where_prometheus_reaches_it(compose: dict[str, Any]) -> None:
    for name in ("head", "worker-1", "worker-2"):
        command = compose["services"][name]["command"]
        assert command[command.index("--node-ip-address") + 1] == name


def test_the_dashboard_queries_the_provisioned_data_source(dashboard: dict[str, Any]) -> None:
    provisioned = yaml.safe_load((DEPLOY / "grafana" / "provisioning" / "datasources" /
                                  "prometheus.yml").read_text())
    [source] = provisioned["datasources"]
    assert source["url"] == "http://prometheus:9090"
    assert dashboard["uid"] and dashboard["schemaVersion"] >= 36
    for panel in dashboard["panels"]:
        assert panel["datasource"]["uid"] == source["uid"], panel["title"]
        assert panel["targets"] and {"x", "y", "w", "h"} <= set(panel["gridPos"])
    assert len({p["id"] for p in dashboard["panels"]}) == len(dashboard["panels"])


def test_the_dashboard_shows_what_the_issue_asks_for(dashboard: dict[str, Any]) -> None:
    used = " ".join(_exprs(dashboard))
    for family in ("tracedray_object_store_used_bytes", "tracedray_tasks",
                   "tracedray_workers", "tracedray_spilled_bytes_total",
                   "tracedray_worker_exits_total", "tracedray_gcs_hot_entries"):
        assert family in used, family


def test_every_metric_the_dashboard_names_is_exported(dashboard: dict[str, Any]) -> None:
    exported = _exported_names()
    used = {name for expr in _exprs(dashboard) for name in re.findall(r"tracedray_[a-z_]+", expr)}
    assert used and used <= exported, used - exported


def test_promtool_parses_every_dashboard_query(dashboard: dict[str, Any],
                                               tmp_path: Path) -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool (Debian's prometheus package) is not installed")
    rules = {"groups": [{"name": "dashboard", "rules": [
        {"record": f"dashboard:query_{i}", "expr": expr.replace("$session", ".*")}
        for i, expr in enumerate(_exprs(dashboard))]}]}
    path = tmp_path / "rules.yml"
    path.write_text(yaml.safe_dump(rules))
    result = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    result = subprocess.run([promtool, "check", "config", str(DEPLOY / "prometheus.yml")],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
