"""`tracedray trace`, `timeline` and spilling against a real cluster (issue 4's "Done when")."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

import numpy as np
from typer.testing import CliRunner

from tracedray.cli.app import app

runner = CliRunner()


def _cli(*args: str) -> Any:
    result = runner.invoke(app, list(args))
    assert result.exit_code == 0, result.output
    return result.output


def test_trace_shows_the_sigkill_and_the_successful_retry(ray: Any, tmp_path: Path) -> None:
    marker = tmp_path / "first-attempt-died"

    @ray.remote(max_retries=2)
    def flaky(path: str) -> str:
        print("attempt starting")
        if not os.path.exists(path):
            Path(path).write_text("x")
            os.kill(os.getpid(), signal.SIGKILL)
        return "second attempt ok"

    ref = flaky.remote(str(marker))
    assert ray.get(ref) == "second attempt ok"
    address = ray.api.calls._require_cluster().gcs_address  # type: ignore[attr-defined]
    ray.api.calls.global_worker().flush_background_work()  # type: ignore[attr-defined]

    story = json.loads(_cli("trace", ref.task_id().hex(), "--address", address,
                            "--format", "json"))
    assert story["final_state"] == "FINISHED"
    outcomes = [a["outcome"] for a in story["attempts"]]
    assert len(outcomes) == 2, story["attempts"]
    died = json.dumps(story["attempts"][0]) + json.dumps(story["events"])
    assert "SIGKILL" in died and "137" in died, died[:2000]
    assert story["trace_id"]
    text = _cli("trace", ref.task_id().hex(), "--address", address)
    assert "SIGKILL" in text and "attempt starting" in text


def test_timeline_writes_valid_chrome_trace(ray: Any, tmp_path: Path) -> None:
    @ray.remote
    def work(x: int) -> int:
        return x + 1

    assert ray.get([work.remote(i) for i in range(5)]) == [1, 2, 3, 4, 5]
    address = ray.api.calls._require_cluster().gcs_address  # type: ignore[attr-defined]
    out = tmp_path / "timeline.json"
    _cli("timeline", "--address", address, "--output", str(out))
    events = json.loads(out.read_text())
    events = events["traceEvents"] if isinstance(events, dict) else events
    complete = [e for e in events if e.get("ph") == "X"]
    assert complete and all({"name", "ts", "dur", "pid", "tid"} <= set(e) for e in complete)
    assert any(e.get("ph") == "s" for e in events) and any(e.get("ph") == "f" for e in events)


def test_full_store_spills_restores_and_reports_it(no_leaks: None, tmp_path: Path) -> None:
    import tracedray as ray

    ray.init(num_cpus=1, object_store_memory=96 << 20)
    try:
        arrays = [np.full(4 << 20, i, dtype=np.float64) for i in range(4)]  # 4 x 32 MiB
        refs = [ray.put(a) for a in arrays]
        for i, ref in enumerate(refs):
            value = ray.get(ref)
            assert value[0] == i and value[-1] == i
        address = ray.api.calls._require_cluster().gcs_address  # type: ignore[attr-defined]
        stats = json.loads(_cli("memory", "--stats-only", "--address", address,
                                "--format", "json"))
        rows = stats
        spilled = sum(int(r["spilled_objects"]) for r in rows)
        restored = sum(int(r["restored_objects"]) for r in rows)
        assert spilled >= 1 and restored >= 1, rows
    finally:
        ray.shutdown()
