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


def test_the_raylet_does_not_load_what_only_the_agent_or_a_query_uses() -> None:
    """sqlite (the trace index, the GCS's cold tier) and the telemetry agent's own code
    stay out of the raylet: an idle raylet uses neither (benchmarks/footprint.py)."""
    modules = ["tracedray.core.raylet.main", "tracedray.core.raylet.server",
               "tracedray.core.raylet.metrics", "tracedray.metrics.serve",
               "tracedray.core.gcs.launch", "tracedray.core.gcs.supervisor"]
    code = (f"import sys, {', '.join(modules)}; "
            "print(sorted(m for m in ('sqlite3', 'tracedray.core.raylet.telemetry_agent', "
            "'tracedray.telemetry.trace_index') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, check=True)
    assert out.stdout.strip() == "[]"


def test_the_telemetry_agent_does_not_load_rich_but_leaves_it_to_a_driver() -> None:
    """Run as the agent it sets rich aside, and the OTLP export's code waits for an export
    to be configured; imported (a driver's start_for_driver) it leaves rich alone, so a
    program that uses rich still can."""
    code = ("import contextlib, runpy, sys; sys.argv = ['agent', '--help']\n"
            "with contextlib.redirect_stdout(None), contextlib.suppress(SystemExit):\n"
            "    runpy.run_module('tracedray.core.raylet.telemetry_agent', run_name='__main__')\n"
            "print(sorted(m for m, v in sys.modules.items() if v and (m.startswith('rich') or "
            "m == 'tracedray.telemetry.agent_export')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, check=True)
    assert out.stdout.strip() == "[]"
    imported = subprocess.run(
        [sys.executable, "-c", "import tracedray.core.raylet.telemetry_agent, rich"],
        capture_output=True, text=True, timeout=60)
    assert imported.returncode == 0, imported.stderr


def test_the_environment_fingerprint_names_the_versions_importlib_metadata_names(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Read from the dist-info folders (no importlib.metadata in the raylet), the same
    versions as the package metadata gives."""
    from importlib import metadata

    from tracedray.core import environment

    monkeypatch.delenv("TRACEDRAY_FAKE_PACKAGE_VERSIONS", raising=False)
    environment.environment_fingerprint.cache_clear()
    try:
        found = environment.environment_fingerprint()
    finally:
        environment.environment_fingerprint.cache_clear()
    expected = {}
    for name in environment.WATCHED:
        try:
            expected[f"pkg:{name}"] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    assert "pkg:grpcio" in expected
    assert {k: v for k, v in found.items() if k.startswith("pkg:")} == expected
