"""Figure 10b in miniature: with flushing, a long stream of finished entries keeps RSS flat."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ENTRIES = 200_000
BOUND = 24 * 1024 * 1024  # the payload alone is ~60 MB; with flushing, growth stays far below


def run_probe(session: Path, flush: bool) -> dict[str, int]:
    probe = Path(__file__).with_name("rss_probe.py")
    done = subprocess.run(
        [sys.executable, str(probe), str(session), str(ENTRIES), "1" if flush else "0"],
        capture_output=True, text=True, timeout=240, check=False,
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, int] = json.loads(done.stdout)
    return result


@pytest.mark.timeout(300)
def test_flushing_keeps_rss_bounded_and_entries_readable(tmp_path: Path) -> None:
    flushed = run_probe(tmp_path / "on", flush=True)
    assert flushed["readable"] and flushed["count"] == ENTRIES
    assert flushed["hot"] <= 10_000
    assert flushed["growth"] < BOUND, f"RSS grew {flushed['growth'] / 2**20:.1f} MiB with flushing"
    # The control shows the bound is meaningful: without flushing RSS grows past it.
    kept = run_probe(tmp_path / "off", flush=False)
    assert kept["hot"] == ENTRIES and kept["readable"]
    assert kept["growth"] > BOUND, f"RSS grew only {kept['growth'] / 2**20:.1f} MiB unflushed"
