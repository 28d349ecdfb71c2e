from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from cli_traces_builders import T0, Recorder
from cli_traces_fake_jaeger import FakeJaeger

from tracedray.cli.tracestore.logs import LogRecord, read_logs
from tracedray.cli.tracestore.model import SpanRecord, parse_resource_spans
from tracedray.core.session import SessionPaths, create_session


@pytest.fixture
def parse():
    """Recorder → (spans, logs) through the real parsers (logs via files)."""

    def _parse(rec: Recorder, tmp_path) -> tuple[list[SpanRecord], list[LogRecord]]:
        spans, warnings = parse_resource_spans(rec.resource_spans())
        assert warnings == []
        logs_dir = tmp_path / "parsed-logs"
        rec.write_session(tmp_path / "parsed-traces", logs_dir)
        return spans, list(read_logs(logs_dir).records)

    return _parse


@pytest.fixture(params=["unindexed", "indexed"])
def session_root(request, tmp_path, monkeypatch) -> SessionPaths:
    """A fresh session folder under TRACEDRAY_TEMP_DIR=tmp_path (session_latest points to it),
    once as an older tracedray wrote it (no trace index: readers scan every file) and once
    with the (empty) index a node creates, which every reader brings up to date first."""
    root = tmp_path / "tracedray"
    monkeypatch.setenv("TRACEDRAY_TEMP_DIR", str(root))
    monkeypatch.delenv("TRACEDRAY_JAEGER_URL", raising=False)
    session = create_session(root)
    # The hand-made spans start at T0; the session began just before them.
    session.info_file.write_text(json.dumps({"session_id": session.session_id,
                                             "created": (T0 - 10**9) / 1e9}))
    session.address_file.write_text("127.0.0.1:6380")
    if request.param == "indexed":
        from tracedray.telemetry.trace_index import create_index

        assert create_index(session.root) == ""
    return session


@pytest.fixture
def jaeger() -> Iterator[FakeJaeger]:
    fake = FakeJaeger()
    fake.thread.start()
    try:
        yield fake
    finally:
        fake.server.shutdown()
        fake.server.server_close()
        fake.thread.join(timeout=10)
