"""Work that fits no node of the cluster says so on the driver's stderr, and keeps waiting."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from multinode_support import log_events, wait_for

pytestmark = pytest.mark.integration


def _stderr_until(capfd: pytest.CaptureFixture[str], text: str, timeout_s: float) -> str:
    seen = ""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        seen += capfd.readouterr().err
        if text in seen:
            return seen
        time.sleep(0.2)
    raise AssertionError(f"{text!r} not on stderr within {timeout_s}s; stderr was:\n{seen}")


def test_infeasible_task_and_actor_are_warned_about_on_the_driver(
        ray: Any, capfd: pytest.CaptureFixture[str]) -> None:
    @ray.remote(resources={"unicorn": 1})
    def needs_a_unicorn() -> int:
        return 1

    @ray.remote(num_gpus=1)
    class NeedsAGpu:
        def ping(self) -> str:
            return "pong"

    ref = needs_a_unicorn.remote()
    err = _stderr_until(capfd, "no node has enough unicorn", timeout_s=15)
    assert "task " in err and "needs_a_unicorn requires {'CPU': 1.0, 'unicorn': 1.0}" in err
    assert "no alive node" in err and "'CPU': 2.0" in err
    ready, _ = ray.wait([ref], timeout=0.1)
    assert not ready  # it still waits: a node with a unicorn may join

    actor = NeedsAGpu.remote()
    err = _stderr_until(capfd, "no node has enough GPU", timeout_s=15)
    assert "actor " in err and "NeedsAGpu requires {'GPU': 1.0}" in err

    from tracedray.api import calls as api

    root = api.current_session_dir()
    assert root is not None
    session = Path(root)
    events = wait_for(lambda: len(found := log_events(session, "task.infeasible")) >= 2 and found,
                      10, "two task.infeasible log lines")
    assert sorted(sorted(e["resources"]) for e in events) == [["CPU", "unicorn"], ["GPU"]]
    # The GCS looks for a node every second but says so once a minute.
    assert len(wait_for(lambda: log_events(session, "actor.infeasible"), 10,
                        "actor.infeasible")) == 1
    ray.kill(actor)
    ray.cancel(ref)
