"""Issue 21, point 4: every span in the session files reaches the OTLP endpoint.

Real clusters export to rotel (a real OpenTelemetry collector, the ``rotel`` wheel),
which forwards to a receiver in this test; the test compares, by span id, the spans
of the session's trace files with what came out of the collector. Export is the
node's telemetry agent's: it reads the files, so a SIGKILLed driver and an actor
worker ended with its job lose nothing, and a dead endpoint costs a driver's exit
nothing but one warning on its stderr.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from otlp_sink import OtlpSink, closed_port, otlp_sink, rotel_collector

from tracedray.telemetry.append_file import read_data
from tracedray.telemetry.otlp_json import decode_attributes, read_trace_dir
from tracedray.telemetry.otlp_requests import timestamp_ns
from tracedray.telemetry.spool_convert import sync_traces_dir

KILLED_DRIVER = textwrap.dedent('''
    import json, time
    import tracedray as ray

    info = ray.init(num_cpus=2, object_store_memory=64 << 20)

    @ray.remote
    def leaf(x):
        return x + 1

    @ray.remote
    class Keeper:
        def add(self, x):
            return x

    keeper = Keeper.remote()
    assert ray.get([keeper.add.remote(i) for i in range(20)]) == list(range(20))
    assert ray.get([leaf.remote(i) for i in range(100)]) == list(range(1, 101))
    queued = [leaf.remote(i) for i in range(300)]  # in flight when the driver dies
    print(json.dumps({"session_dir": info["session_dir"],
                      "actor": keeper._actor_id.hex()}), flush=True)
    time.sleep(600)
''')

REMOTE_DRIVER = textwrap.dedent('''
    import json, sys
    import tracedray as ray

    info = ray.init(address=sys.argv[1])

    @ray.remote
    def leaf(x):
        return x + 1

    assert ray.get([leaf.remote(i) for i in range(30)]) == list(range(1, 31))
    print(json.dumps({"session_dir": info["session_dir"]}), flush=True)
    ray.shutdown()
''')

LOCAL_MODE_DRIVER = textwrap.dedent('''
    import json
    import tracedray as ray

    info = ray.init(local_mode=True)

    @ray.remote
    def leaf(x):
        return x + 1

    assert ray.get([leaf.remote(i) for i in range(10)]) == list(range(1, 11))
    print(json.dumps({"session_dir": info["session_dir"]}), flush=True)
''')

TIMED_EXIT = textwrap.dedent('''
    import tracedray as ray

    ray.init(num_cpus=1, object_store_memory=64 << 20)

    @ray.remote
    def leaf(x):
        return x + 1

    assert ray.get([leaf.remote(i) for i in range(50)]) == list(range(1, 51))
    print("shutting down", flush=True)
    ray.shutdown()
''')


@pytest.fixture
def collector(tmp_path: Path) -> Iterator[tuple[OtlpSink, int]]:
    """(the receiver behind rotel, rotel's OTLP/gRPC port)."""
    with otlp_sink() as sink, rotel_collector(sink.port, tmp_path) as rotel:
        yield sink, rotel.grpc_port


def _env(root: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("OTEL_") and k != "TRACEDRAY_ADDRESS"}
    return {**env, "TRACEDRAY_TEMP_DIR": str(root), **extra}


def _file_spans(session: Path) -> dict[str, dict[str, Any]]:
    """Every span of the session's trace files, by span id (spools converted first)."""
    sync_traces_dir(session / "traces")
    entries, _ = read_trace_dir(session / "traces")
    spans = {}
    for entry in entries:
        for scope in entry["scopeSpans"]:
            for span in scope["spans"]:
                spans[span["spanId"]] = span
    return spans


def _agents_done(session: Path, count: int = 1) -> bool:
    stops = [line for path in (session / "logs").glob("agent-*.jsonl")
             for line in read_data(path).decode().splitlines()
             if '"telemetry.export_stop"' in line]
    return len(stops) >= count


def _wait_exported(session: Path, sink: OtlpSink) -> tuple[dict[str, Any], set[str]]:
    """The files' spans and the received span ids, once the agents have finished."""
    deadline = time.monotonic() + 90
    while True:
        if _agents_done(session):
            files = _file_spans(session)
            if sink.wait_until(lambda got, wanted=set(files): got.span_ids() >= wanted, 5):
                return files, sink.span_ids()
        assert time.monotonic() < deadline, (
            f"export unfinished: {len(sink.span_ids())} spans received, "
            f"agents done: {_agents_done(session)}")
        time.sleep(0.2)


def test_every_file_span_reaches_the_collector_after_the_driver_is_sigkilled(
        tmp_path: Path, collector: tuple[OtlpSink, int]) -> None:
    sink, port = collector
    driver = subprocess.Popen(
        [sys.executable, "-c", KILLED_DRIVER], stdout=subprocess.PIPE, text=True,
        env=_env(tmp_path / "root", OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{port}",
                 OTEL_LOGS_EXPORTER="otlp"))
    try:
        assert driver.stdout is not None
        ready = json.loads(driver.stdout.readline())
        driver.send_signal(signal.SIGKILL)
    finally:
        driver.kill()
        driver.wait()
    session = Path(ready["session_dir"])
    files, received = _wait_exported(session, sink)
    assert received == set(files), (len(received), len(files))
    assert len(sink.spans) == len(received)  # and each once
    by_id = {span.span_id: span for span in sink.spans}
    components = {span.resource["tracedray.component"] for span in sink.spans}
    assert {"driver", "gcs", "raylet", "worker"} <= components
    # The actor's worker was ended with the job: its method spans still arrived.
    actor_calls = [s for s in sink.spans if s.name == "task.execute"
                   and s.attributes.get("tracedray.actor.id") == ready["actor"]
                   and str(s.attributes["tracedray.task.function"]).endswith("add")]
    assert len(actor_calls) == 20
    # Log records: every line of the driver and the workers (all dead before the agent
    # stopped), each with its trace context where the line had one.
    lines = [json.loads(line) for path in (session / "logs").glob("*.jsonl")
             if path.name.startswith(("driver-", "worker-"))
             for line in read_data(path).decode().splitlines()]
    wanted = {(line["pid"], line["event"], timestamp_ns(line["timestamp"])) for line in lines}

    def received(got: OtlpSink) -> set[tuple[Any, str, int]]:
        return {(log.resource.get("process.pid"), log.body, log.time_ns) for log in got.logs}

    # The collector batches logs apart from spans: they may come a moment later.
    sink.wait_until(lambda got: wanted <= received(got), 30)
    missing = sorted(wanted - received(sink))
    assert not missing, missing[:10]
    executed = [log for log in sink.logs if log.body == "task.execute" and log.trace_id]
    assert executed
    for log in executed:
        span = by_id[log.span_id]
        assert span.trace_id == log.trace_id and span.name == "task.execute"
    assert decode_attributes(files[executed[0].span_id].get("attributes"))[
        "tracedray.task.id"] == executed[0].attributes["task_id"]


def test_a_driver_whose_node_runs_no_agent_for_it_has_its_spans_exported(
        tmp_path: Path, collector: tuple[OtlpSink, int], no_leaks: None) -> None:
    """A driver joining a head whose session folder is elsewhere (as on another machine)
    starts an agent for its own files; the head's agent exports nothing (no endpoint)."""
    from tracedray.core.node import start_head
    from tracedray.core.session import create_session

    sink, port = collector
    head = start_head(create_session(tmp_path / "cluster"), num_cpus=1,
                      object_store_memory=64 << 20)
    try:
        done = subprocess.run(
            [sys.executable, "-c", REMOTE_DRIVER, head.gcs_address], capture_output=True,
            text=True, timeout=120, check=False,
            env=_env(tmp_path / "driver", OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{port}",
                     # As on another machine: the head's token, given.
                     TRACEDRAY_AUTH_TOKEN=(head.session.root / "auth_token").read_text()))
        assert done.returncode == 0, done.stderr
        session = Path(json.loads(done.stdout.splitlines()[-1])["session_dir"])
        assert session.is_relative_to(tmp_path / "driver")
        files, received = _wait_exported(session, sink)
    finally:
        head.stop()
    assert received == set(files)
    assert {s.resource["tracedray.component"] for s in sink.spans} == {"driver"}
    assert len([s for s in sink.spans if s.name == "task.submit"]) == 30


def test_a_local_mode_driver_has_its_spans_exported(
        tmp_path: Path, collector: tuple[OtlpSink, int]) -> None:
    """No raylet, no node agent: the driver starts one for its own files."""
    sink, port = collector
    done = subprocess.run(
        [sys.executable, "-c", LOCAL_MODE_DRIVER], capture_output=True, text=True,
        timeout=120, check=False,
        env=_env(tmp_path / "root", OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{port}"))
    assert done.returncode == 0, done.stderr
    session = Path(json.loads(done.stdout.splitlines()[-1])["session_dir"])
    files, received = _wait_exported(session, sink)
    assert received == set(files)
    assert len([s for s in sink.spans if s.name == "task.submit"]) == 10


WRITER = textwrap.dedent('''
    import pathlib, sys
    from tracedray import telemetry

    telemetry.configure("gcs", session_dir=pathlib.Path(sys.argv[1]))
    telemetry.record_span("gcs.flush", {"tracedray.gcs.table": "before"}, start_ns=1)
    print("recorded", flush=True)
    sys.stdin.readline()
    telemetry.record_span("gcs.flush", {"tracedray.gcs.table": "after"}, start_ns=2)
''')


def test_a_stopped_agent_exports_what_the_session_s_live_writers_still_record(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The GCS of a cluster started by init() stops after the raylet and its agent; what
    it records meanwhile still reaches the endpoint."""
    from tracedray.core.raylet.agent_process import start_agent, stop_agent
    from tracedray.core.session import create_session

    session = create_session(tmp_path / "root").root
    with otlp_sink() as sink:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"http://127.0.0.1:{sink.port}")
        writer = subprocess.Popen([sys.executable, "-c", WRITER, str(session)],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                  env=_env(tmp_path / "root"))
        assert writer.stdin is not None and writer.stdout is not None
        try:
            assert writer.stdout.readline().strip() == "recorded"
            agent = start_agent(session, "n1")
            stop_agent(agent)  # returns once the agent converted; it exports on
            writer.stdin.write("\n")
            writer.stdin.flush()
            assert writer.wait(30) == 0
            assert sink.wait_until(lambda got: len(got.spans) == 2, 30), sink.spans
            agent.wait(30)
        finally:
            writer.kill()
            writer.wait()
    assert sorted(s.attributes["tracedray.gcs.table"] for s in sink.spans) == [
        "after", "before"]


def _timed_exit(root: Path, **extra: str) -> tuple[float, str]:
    """(seconds from the driver's shutdown() call to its exit, its stderr)."""
    driver = subprocess.Popen([sys.executable, "-c", TIMED_EXIT], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=_env(root, **extra))
    assert driver.stdout is not None
    while driver.stdout.readline().strip() != "shutting down":
        assert driver.poll() is None, driver.communicate()
    started = time.monotonic()
    _, stderr = driver.communicate(timeout=120)
    elapsed = time.monotonic() - started
    assert driver.returncode == 0, stderr
    return elapsed, stderr


def test_a_driver_that_exits_cleanly_has_every_span_exported_and_is_not_slowed(
        tmp_path: Path, collector: tuple[OtlpSink, int]) -> None:
    """After the raylet's agent stopped, the GCS and the driver still record (job.finish,
    the driver's last spans): the agent exports those too, and nobody waits for it."""
    sink, port = collector
    without, quiet = _timed_exit(tmp_path / "without")
    with_live, stderr = _timed_exit(tmp_path / "live",
                                    OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{port}")
    assert "OTLP" not in quiet + stderr
    (session,) = (tmp_path / "live").glob("session_2*")
    files, received = _wait_exported(session, sink)
    assert received == set(files)
    assert {s.name for s in sink.spans} >= {"node.start", "task.execute", "worker.exit"}
    assert with_live < without + 0.5 + 1.5, (with_live, without)  # see the next test


def test_a_dead_endpoint_does_not_slow_the_driver_exit_and_is_reported_once(
        tmp_path: Path) -> None:
    # A functional bound, with a generous margin for a busy machine: the issue's
    # reproduction took ~9 s more; the goal is < 0.5 s more than with no endpoint.
    without, quiet = _timed_exit(tmp_path / "without")
    dead = f"http://127.0.0.1:{closed_port()}"
    with_dead, stderr = _timed_exit(tmp_path / "dead", OTEL_EXPORTER_OTLP_ENDPOINT=dead,
                                    TRACEDRAY_OTLP_EXPORT_LINGER_S="1")
    assert with_dead < without + 0.5 + 1.5, (with_dead, without)
    assert "OTLP" not in quiet
    assert stderr.count("tracedray: OTLP endpoint") == 1, stderr
    assert f"OTLP endpoint {dead} unreachable" in stderr
    assert "kept in the session files" in stderr
