"""A real Prometheus server (Debian's ``prometheus`` package, installed by .ci/run) for
the metrics tests: it scrapes the targets of a session's ``prometheus_sd.json`` every
second, keeps its data in a temporary folder, and is stopped at the end."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

BINARY = "prometheus"


def prometheus_binary() -> str:
    found = shutil.which(BINARY)
    if found is None:
        pytest.skip("the prometheus binary is not installed (Debian: apt-get install -y "
                    "prometheus; .ci/run installs it)")
    return found


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Prometheus:
    url: str

    def query(self, promql: str) -> list[dict[str, Any]]:
        """An instant query's result vector (``[]`` until the series exist)."""
        address = f"{self.url}/api/v1/query?{urllib.parse.urlencode({'query': promql})}"
        with urllib.request.urlopen(address, timeout=5) as response:
            body = json.loads(response.read())
        assert body["status"] == "success", body
        return list(body["data"]["result"])

    def value(self, promql: str) -> float | None:
        result = self.query(promql)
        return float(result[0]["value"][1]) if result else None

    def targets(self) -> list[dict[str, Any]]:
        with urllib.request.urlopen(f"{self.url}/api/v1/targets", timeout=5) as response:
            return list(json.loads(response.read())["data"]["activeTargets"])


@contextmanager
def prometheus_scraping(sd_file: Path, workdir: Path) -> Iterator[Prometheus]:
    binary = prometheus_binary()
    config = workdir / "prometheus.yml"
    config.write_text(json.dumps({  # YAML is a superset of JSON
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s",
                   "scrape_timeout": "1s"},
        "scrape_configs": [{"job_name": "tracedray",
                            "file_sd_configs": [{"files": [str(sd_file)],
                                                 "refresh_interval": "1s"}]}]}))
    port = _free_port()
    log = (workdir / "prometheus.log").open("wb")
    process = subprocess.Popen(
        [binary, f"--config.file={config}", f"--storage.tsdb.path={workdir / 'data'}",
         f"--web.listen-address=127.0.0.1:{port}"],
        stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        server = Prometheus(f"http://127.0.0.1:{port}")
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"{server.url}/-/ready", timeout=2):
                    break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError("prometheus did not start:\n" + (
                        workdir / "prometheus.log").read_text()[-3000:]) from None
                time.sleep(0.2)
        yield server
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()
