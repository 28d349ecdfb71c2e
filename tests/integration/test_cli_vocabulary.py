"""One --format vocabulary (default, table, json, yaml; text and pretty still accepted,
with a note) and Ray's spellings beside tracedray's (`get tasks`, `logs task --id`,
`logs worker --pid`, `logs cluster GLOB`, `memory --group-by STACK_TRACE`), against a
real cluster's indexed session and an unindexed copy of it (issue 24, item 6)."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from tracedray.cli.app import app
from tracedray.telemetry.trace_index import INDEX_NAME


def _cli(*args: str, code: int = 0) -> Any:
    result = CliRunner().invoke(app, list(args))
    assert result.exit_code == code, result.output
    return result


def test_formats_and_ray_spellings(ray: Any, tmp_path: Path,
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    cluster = ray.api.calls._require_cluster()
    address = cluster.gcs_address

    @ray.remote
    def speak(i: int) -> int:
        print("SPOKEN", i)
        return i

    ref = speak.remote(7)
    assert ray.get(ref) == 7
    kept = ray.put(b"x" * 200_000)
    ray.api.calls.global_worker().flush_background_work()
    task = ref.task_id().hex()
    where = ("--address", address)

    # json and yaml hold the same data; default and table are the same text. Listed by
    # this test's finished task: the shared cluster's other tasks may change state
    # between two calls.
    mine = ("--filter", f"task_id={task}")
    # Its worker's own report of its end comes on that worker's flush, which may be a
    # moment behind get(): wait for it, so that every format shows the same row.
    deadline = time.monotonic() + 30
    while True:
        listed = json.loads(_cli("list", "tasks", "--format", "json", *mine, *where).stdout)
        if [row["state"] for row in listed] == ["FINISHED"] or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert [(row["task_id"], row["state"]) for row in listed] == [(task, "FINISHED")]
    assert yaml.safe_load(_cli("list", "tasks", "--format", "yaml", *mine, *where).stdout) == \
        listed
    assert _cli("list", "tasks", "--format", "table", *mine, *where).stdout == \
        _cli("list", "tasks", *mine, *where).stdout
    story = json.loads(_cli("trace", task, "--format", "json", *where).stdout)
    assert yaml.safe_load(_cli("trace", task, "--format", "yaml", *where).stdout) == story
    old = _cli("trace", task, "--format", "text", *where)
    assert "deprecated" in old.stderr
    assert old.stdout == _cli("trace", task, "--format", "default", *where).stdout
    bad = _cli("list", "tasks", "--format", "xml", *where, code=2)
    assert "choose default, table, json or yaml" in bad.output

    # Ray's spellings give what tracedray's give
    assert _cli("get", "tasks", task[:12], "--format", "json", *where).stdout == \
        _cli("get", "task", task, "--format", "json", *where).stdout
    by_task = _cli("logs", "--task", task, *where).stdout
    assert "SPOKEN 7" in by_task
    assert _cli("logs", "task", "--id", task[:12], *where).stdout == by_task
    pid = json.loads(_cli("get", "task", task, "--format", "json", *where).stdout)["worker_pid"]
    assert _cli("logs", "worker", "--pid", str(pid), *where).stdout == \
        _cli("logs", "--worker", str(pid), *where).stdout
    assert "SPOKEN 7" in _cli("logs", "cluster", "worker-*", *where).stdout
    assert "SPOKEN 7" not in _cli("logs", "cluster", "driver-*", *where).stdout
    assert "SPOKEN 7" not in _cli("logs", "raylet*", *where).stdout  # Ray's alias
    assert "needs --id" in _cli("logs", "task", *where, code=1).stderr
    pretty = _cli("logs", "--task", task, "--format", "pretty", *where)
    assert "deprecated" in pretty.stderr and pretty.stdout == by_task
    assert _cli("memory", "--group-by", "STACK_TRACE", "--sort-by", "OBJECT_SIZE", "--format",
                "json", *where).stdout == _cli("memory", "--group-by", "stack-trace",
                                               "--sort-by", "size", "--format", "json",
                                               *where).stdout

    # An unindexed copy of the session: the same answers, read from every file
    copy = tmp_path / cluster.session.root.name
    shutil.copytree(cluster.session.root, copy, ignore=shutil.ignore_patterns(f"{INDEX_NAME}*"))
    monkeypatch.setenv("TRACEDRAY_TEMP_DIR", str(tmp_path))
    scanned = _cli("logs", "task", "--id", task, *where)
    assert "no trace index" in scanned.stderr and scanned.stdout == by_task
    assert yaml.safe_load(_cli("trace", task, "--format", "yaml", *where).stdout) == story
    del kept
