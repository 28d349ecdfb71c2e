"""Bad ``--gcs-storage`` values fail fast, through ``init()`` and ``start_head``, naming the URL."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import tracedray
from tracedray.core import node, session
from tracedray.exceptions import ClusterConnectionError, ConfigError
from tracedray.telemetry.append_file import read_data
from tracedray.testing.redis_server import free_port


@pytest.fixture
def no_cluster_left(no_leaks: None) -> Iterator[None]:
    yield
    tracedray.shutdown()  # in case a start unexpectedly succeeded


def test_unreachable_redis_names_the_url(no_cluster_left: None,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    url = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there
    monkeypatch.setenv("TRACEDRAY_GCS_STORAGE", url)
    with pytest.raises(ClusterConnectionError) as caught:
        tracedray.init(num_cpus=1, object_store_memory=64 << 20)
    assert url in str(caught.value)
    assert "redis-server" in str(caught.value)  # says what to do about it


def test_unreachable_redis_password_is_masked(no_cluster_left: None) -> None:
    port = free_port()
    paths = session.create_session()
    with pytest.raises(ClusterConnectionError) as caught:
        node.start_head(paths, num_cpus=1, object_store_memory=64 << 20,
                        storage=f"redis://:hunter2@127.0.0.1:{port}/3")
    message = str(caught.value)
    assert f"redis://:***@127.0.0.1:{port}/3" in message
    assert "hunter2" not in message


@pytest.mark.parametrize("url, reason", [
    ("redis//127.0.0.1:6379", "no scheme"),
    ("mysql://127.0.0.1:3306", "unknown scheme"),
    ("redis://127.0.0.1:6379/zero", "database number"),
    ("redis://127.0.0.1:99999/0", "bad port"),
])
def test_malformed_url_is_a_config_error_before_any_process(
        no_cluster_left: None, monkeypatch: pytest.MonkeyPatch, url: str, reason: str) -> None:
    monkeypatch.setenv("TRACEDRAY_GCS_STORAGE", url)
    with pytest.raises(ConfigError) as caught:
        tracedray.init(num_cpus=1, object_store_memory=64 << 20)
    assert url in str(caught.value)
    assert reason in str(caught.value)


def test_a_gcs_that_cannot_start_exits_1_and_logs_it(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "tracedray.core.gcs.main", "--session-dir",
                           str(tmp_path), "--storage", "mysql://127.0.0.1:3306",
                           "--ready-file", str(tmp_path / "ready")],
                          capture_output=True, text=True, timeout=60, check=False,
                          env={**os.environ, "TRACEDRAY_AUTH_TOKEN": "storage-test-0123456789"})
    assert done.returncode == 1, done.stderr[-2000:]
    assert json.loads((tmp_path / "ready").read_text())["error_type"] == "ConfigError"
    (log,) = (tmp_path / "logs").glob("gcs-*.jsonl")
    last = json.loads(read_data(log).decode().splitlines()[-1])
    assert (last["event"], last["exit_code"], last["exit_code_source"]) == \
        ("process.exit", 1, "sys.exit")
