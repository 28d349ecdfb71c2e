"""`memory --timeline` reads the object store's events from the session's index (rows the
index writer keeps per event, telemetry/memory_index.py), not from the trace lines that
hold them; a copy without the index, and one whose index predates those rows, give the
same answer by scanning, and say so (issue 24)."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import numpy as np
from typer.testing import CliRunner

from tracedray.cli.app import app
from tracedray.cli.tracestore.sources import SessionFileSource
from tracedray.core.session import SessionPaths
from tracedray.telemetry.spool_convert import sync_traces_dir
from tracedray.telemetry.trace_index import INDEX_NAME, catch_up

MB = 1 << 20


def _timeline(session: Path) -> tuple[Any, str]:
    result = CliRunner().invoke(app, ["memory", "--timeline", "--session", str(session),
                                      "--format", "json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout), result.stderr


def test_timeline_from_the_index_equals_a_scan(ray: Any, tmp_path: Path) -> None:
    session: SessionPaths = ray.api.calls._require_cluster().session

    @ray.remote
    def make(megabytes: int) -> Any:
        return np.ones(megabytes * MB, dtype=np.uint8)

    kept = []
    for batch in range(4):  # a line (or more) per batch, as the agent writes them
        kept.append(ray.put(np.zeros(3 * MB, dtype=np.uint8)))
        kept.append(make.remote(2))
        ray.get(kept[-1])
        if batch % 2:
            del kept[0]  # freed: the store goes down too
        ray.api.calls.global_worker().flush_background_work()
        sync_traces_dir(session.traces_dir)
    assert catch_up(session.root) == ""

    source = SessionFileSource(session)
    batch = source.store_events()
    assert source.used_index and source.lines_parsed <= 2, source.lines_parsed
    names = {span.name for span in batch.spans}
    assert {"object.seal", "object.free"} <= names, names
    indexed, said = _timeline(session.root)
    (node,) = indexed.values()
    assert node["peak"]["used"] >= 2 * 5 * MB and len(node["series"]) >= 8
    assert "reading every" not in said

    # A copy without the index: every trace file is read, the same answer.
    bare = tmp_path / "bare" / session.root.name
    shutil.copytree(session.root, bare, ignore=shutil.ignore_patterns(f"{INDEX_NAME}*"))
    scanned, said = _timeline(bare)
    assert "no trace index" in said
    assert scanned == indexed

    # An index made before its store-event rows existed: not trusted for them.
    old = tmp_path / "old" / session.root.name
    shutil.copytree(session.root, old)
    with sqlite3.connect(old / INDEX_NAME) as conn:
        conn.execute("DROP TABLE store_events")
        conn.execute("DELETE FROM meta WHERE name='store_events'")
    older, said = _timeline(old)
    assert "keeps no object-store events" in said
    assert older == indexed
    del kept
