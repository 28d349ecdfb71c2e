"""A GCS in this process for the table tests (modules that need another make their own)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tracedray.core.gcs.server import Gcs
from tracedray.core.gcs.storage import FlushPolicy


@pytest.fixture
def gcs(tmp_path: Path) -> Iterator[Gcs]:
    """Every finished entry leaves memory at the first flush."""
    server = Gcs(session_dir=tmp_path, storage_url="memory",
                 flush_policy=FlushPolicy(interval_s=60, max_hot_entries=0, min_age_s=0))
    try:
        yield server
    finally:
        server.stop()
