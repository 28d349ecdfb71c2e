"""What a running raylet has loaded (benchmarks/footprint.py): the code of ``/metrics``
(prometheus-client and the ``http.server``, ``wsgiref`` and ``email`` modules it brings,
and the raylet's collector) only once something scrapes it, and never
``importlib.metadata``; the first scrape is answered all the same. Its telemetry agent,
exporting nowhere, has not loaded the OTLP export's code.

The processes' own ``sys.modules`` are read through a ``sitecustomize`` on their
``PYTHONPATH`` (as test_worker_register_timeout.py hooks a worker's start): a thread in
the raylet and one in the agent write the names of their modules when the test asks for
them with a file.
"""

from __future__ import annotations

import json
import os
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from multinode_support import wait_for

pytestmark = pytest.mark.integration

REPORTER = '''
import os, sys, threading, time

def _answer(folder, role):
    while True:
        time.sleep(0.05)
        for name in os.listdir(folder):
            if name.startswith(role + "-") and name.endswith(".ask"):
                answer = os.path.join(folder, name[:-4] + ".json")
                with open(answer + ".tmp", "w") as out:
                    out.write(repr(sorted(m for m, v in list(sys.modules.items()) if v)))
                os.replace(answer + ".tmp", answer)
                os.unlink(os.path.join(folder, name))

_command = open("/proc/self/cmdline", "rb").read()
for _module, _role in ((b"tracedray.core.raylet.main", "raylet"),
                       (b"tracedray.core.raylet.telemetry_agent", "agent")):
    if _module in _command:
        threading.Thread(target=_answer, args=(os.environ["FOOTPRINT_TEST_DIR"], _role),
                         daemon=True).start()
'''

# Modules an idle raylet must not need: the exposition code of /metrics, and the parser
# of package metadata (the environment fingerprint reads the dist-info folders' names).
NOT_AT_START = ("prometheus_client", "tracedray.metrics.exposition",
                "tracedray.core.raylet.metrics", "http.server", "wsgiref", "email",
                "importlib.metadata")
# The node's telemetry agent exporting nowhere: not the OTLP export's code, nor the
# urllib.request, http.client and email modules it brings.
AGENT_NOT_WITHOUT_EXPORT = ("tracedray.telemetry.agent_export", "urllib.request",
                            "http.client", "email")


def _modules(folder: Path, role: str, name: str) -> set[str]:
    """The modules the node's ``role`` process ("raylet", "agent") has loaded now."""
    (folder / f"{role}-{name}.ask").write_text("")
    answer = folder / f"{role}-{name}.json"
    wait_for(answer.exists, 30, f"the {role}'s modules ({name})")
    modules: list[str] = eval(answer.read_text())  # noqa: S307 - our own repr of a list
    return set(modules)


def _loaded(modules: set[str], names: tuple[str, ...] = NOT_AT_START) -> list[str]:
    return sorted(m for m in names if m in modules)


def test_the_raylet_loads_the_metrics_code_on_the_first_scrape(
        no_leaks: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import tracedray
    from tracedray.api.calls import current_session_dir

    hook, answers = tmp_path / "hook", tmp_path / "answers"
    hook.mkdir()
    answers.mkdir()
    (hook / "sitecustomize.py").write_text(REPORTER)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        [str(hook), *filter(None, [os.environ.get("PYTHONPATH")])]))
    monkeypatch.setenv("FOOTPRINT_TEST_DIR", str(answers))
    for name in [n for n in os.environ if n.startswith("OTEL_") and "EXPORTER" in n]:
        monkeypatch.delenv(name)  # no export: the agent must not load its code
    tracedray.init(num_cpus=1)
    try:
        @tracedray.remote
        def one() -> int:
            return 1

        assert tracedray.get([one.remote() for _ in range(20)]) == [1] * 20
        started = _modules(answers, "raylet", "started")
        assert "tracedray.core.raylet.server" in started  # the hook reads the raylet
        assert _loaded(started) == []
        agent = _modules(answers, "agent", "started")
        assert "tracedray.telemetry.spool_convert" in agent  # the hook reads the agent
        assert _loaded(agent, AGENT_NOT_WITHOUT_EXPORT) == []

        session_dir = current_session_dir()
        assert session_dir is not None

        def raylet_target() -> str | None:
            path = session_dir / "prometheus_sd.json"
            groups: list[dict[str, Any]] = json.loads(path.read_text()) if path.exists() else []
            return next((g["targets"][0] for g in groups
                         if g["labels"]["component"] == "raylet"), None)

        target = wait_for(raylet_target, 30, "the raylet in prometheus_sd.json")
        with urllib.request.urlopen(f"http://{target}/metrics", timeout=30) as response:
            kind, text = response.headers["Content-Type"], response.read().decode()
        assert kind.startswith("text/plain; version=0.0.4")
        assert "tracedray_object_store_capacity_bytes" in text
        assert 'tracedray_rpc_server_latency_seconds_count{' in text  # timed since start
        scraped = _modules(answers, "raylet", "scraped")
        assert "prometheus_client" in scraped and "tracedray.core.raylet.metrics" in scraped
        assert "importlib.metadata" not in scraped
    finally:
        tracedray.shutdown()
