"""ruff and mypy stay clean (configured in pyproject.toml); CI fails otherwise."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _run(module: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", module, *args], cwd=ROOT, text=True,
                          capture_output=True, timeout=600)


def test_ruff_is_clean() -> None:
    result = _run("ruff", "check", "src", "tests", "benchmarks")
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy_is_clean() -> None:
    result = _run("mypy")
    assert result.returncode == 0, result.stdout[-5000:] + result.stderr[-2000:]
