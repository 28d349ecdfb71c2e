"""Three nodes on one machine for the multi-node tests: head, b and c, each with a
custom resource, separate raylets, ports and shared-memory stores; a driver
connected with init(address=...). Helpers read what the cluster recorded."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pytest

from tracedray.telemetry.append_file import read_data
from tracedray.telemetry.otlp_json import decode_attributes
from tracedray.telemetry.spool_convert import sync_traces_dir

T = TypeVar("T")
STORE = 300 << 20


@dataclass
class Cluster:
    ray: Any
    address: str
    session_dir: Path
    nodes: dict[str, Any]  # name -> NodeProcesses
    names: dict[str, str] = field(default_factory=dict)  # node id -> name

    def node_id(self, name: str) -> str:
        return str(self.nodes[name].node_id)

    def name_of(self, node_id: str) -> str:
        return self.names.get(node_id, node_id[:8])

    def raylet_pid(self, name: str) -> int:
        return int(self.nodes[name].processes[-1].pid)

    def runs_on(self, name: str) -> None:
        """A driver connects and runs a task on node ``name`` (it needs the resource of
        that name, as the nodes of started_nodes have), then leaves."""
        ray = self.ray
        ray.init(address=self.address)
        try:
            @ray.remote(resources={name: 1})
            def where() -> str:
                return str(ray.get_runtime_context().get_node_id())

            assert ray.get(where.remote(), timeout=60) == self.node_id(name)
        finally:
            ray.shutdown()

    def join(self, name: str, **kwargs: Any) -> Any:
        from tracedray.core.node import join_node
        from tracedray.core.session import SessionPaths

        processes = join_node(SessionPaths(self.session_dir), self.address,
                              object_store_memory=STORE, detach=False, **kwargs)
        self.nodes[name] = processes
        self.names[processes.node_id] = name
        return processes


def wait_for(predicate: Callable[[], T], timeout_s: float, what: str) -> T:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")


@contextmanager
def started_nodes(monkeypatch: pytest.MonkeyPatch, head: dict[str, Any],
                  joined: dict[str, dict[str, Any]], *,
                  death_timeout_s: float = 4.0) -> Iterator[Cluster]:
    """A head started with ``head`` (start_head's keywords) and the nodes ``joined``
    (name -> join_node's keywords), with heartbeats every 0.3 s and death after
    ``death_timeout_s``; no driver. All are stopped, and their shared memory removed,
    at the end."""
    import tracedray
    from tracedray.core.node import start_head
    from tracedray.core.session import create_session

    # Before any process starts: they inherit these (fast death detection for the tests).
    monkeypatch.setenv("TRACEDRAY_HEARTBEAT_INTERVAL_S", "0.3")
    monkeypatch.setenv("TRACEDRAY_NODE_DEATH_TIMEOUT_S", f"{death_timeout_s:g}")
    session = create_session()
    processes = start_head(session, object_store_memory=STORE, **head)
    cluster = Cluster(tracedray, processes.gcs_address, session.root, {"head": processes},
                      {processes.node_id: "head"})
    try:
        for name, options in joined.items():
            cluster.join(name, **options)
        yield cluster
    finally:
        for name in reversed(list(cluster.nodes)):
            cluster.nodes[name].stop()
        # A SIGKILLed raylet cannot remove its store's files; `tracedray stop` would.
        from tracedray.core.object_store.files import remove_orphans

        remove_orphans(Path("/dev/shm"), f"tracedray-{session.root.name[-24:]}")


@contextmanager
def three_nodes(monkeypatch: pytest.MonkeyPatch, *, c_cpus: int = 2) -> Iterator[Cluster]:
    """head (1 CPU, {"head": 1}), b (1 CPU, {"b": 1}), c (c_cpus, {"c": 1}), and a driver
    connected with init(address=...)."""
    with started_nodes(monkeypatch, {"num_cpus": 1, "resources": {"head": 1}},
                       {"b": {"num_cpus": 1, "resources": {"b": 1}},
                        "c": {"num_cpus": c_cpus, "resources": {"c": 1}}}) as cluster:
        cluster.ray.init(address=cluster.address)
        try:
            yield cluster
        finally:
            cluster.ray.shutdown()


def spans_named(session_dir: Path, name: str) -> list[dict[str, Any]]:
    """Attributes of every span called ``name`` in the session's OTLP JSON files."""
    out = []
    sync_traces_dir(session_dir / "traces")  # what every reader does first: spools -> lines
    for path in sorted((session_dir / "traces").glob("*.jsonl")):
        for line in _complete_lines(path):
            for resource_spans in json.loads(line)["resourceSpans"]:
                for scope_spans in resource_spans["scopeSpans"]:
                    for raw in scope_spans["spans"]:
                        if raw["name"] == name:
                            out.append(decode_attributes(raw.get("attributes")))
    return out


def log_events(session_dir: Path, event: str) -> list[dict[str, Any]]:
    out = []
    for path in sorted((session_dir / "logs").glob("*.jsonl")):
        for line in _complete_lines(path):
            if f'"{event}"' in line:
                record = json.loads(line)
                if record.get("event") == event:
                    out.append(record)
    return out


def _complete_lines(path: Path) -> list[str]:
    """Lines of a file other processes are appending to, without a half-written last one;
    what its writer's spool holds is copied in first (read_data), as any reader does."""
    text = read_data(path).decode()
    return text[: text.rfind("\n") + 1].splitlines()
