"""The raylet and the GCS write JSON lines only: they never load rich (structlog would)."""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.parametrize("module", ["tracedray.core.raylet.main", "tracedray.core.gcs.main"])
def test_server_processes_do_not_load_rich(module: str) -> None:
    code = (f"import sys, {module}, tracedray.logs; tracedray.logs.get_logger('x'); "
            "print(sorted(m for m, v in sys.modules.items() if m.startswith('rich') and v))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, check=True)
    assert out.stdout.strip() == "[]"
