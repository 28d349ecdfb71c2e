"""Every process of a node logs the node's advertised address: the driver once connected
and the node's telemetry agent too, not the address of the default route."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from multinode_support import wait_for

from tracedray.telemetry.append_file import read_data

pytestmark = pytest.mark.integration


def _lines(session: Path, component: str) -> list[dict[str, Any]]:
    import json

    out = []
    for path in sorted((session / "logs").glob(f"{component}-*.jsonl")):
        out.extend(json.loads(line) for line in read_data(path).decode().splitlines() if line)
    return out


def test_driver_and_agent_log_the_nodes_address(ray: Any) -> None:
    from tracedray.api import calls as api

    node_ip = ray.nodes()[0]["NodeManagerAddress"]
    session = Path(str(api.current_session_dir()))

    @ray.remote
    def noop() -> None:
        return None

    ray.get(noop.remote())
    driver = [r for r in _lines(session, "driver") if r["event"] == "task.submit"]
    assert driver and {r["ip"] for r in driver} == {node_ip}
    agent = wait_for(lambda: _lines(session, "agent"), 30, "the agent's log lines")
    assert {r["ip"] for r in agent} == {node_ip}
