"""Issue 3, end to end: one real program, then every check made from its session directory.

The program (below) runs as its own driver process, with nested tasks, an actor,
put/get (inline, shared memory, spilled), a printing task, a failing task and a
task whose worker is SIGKILLed. Its spans are also exported over OTLP/gRPC to a
receiver built from opentelemetry-proto's service stubs, running in this test.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

from tracedray.telemetry.append_file import read_data  # live files end in NULs
from tracedray.telemetry.otlp_json import decode_attributes

PROGRAM = textwrap.dedent('''
    import json
    import os
    import sys
    import time
    from pathlib import Path

    import numpy as np

    import tracedray as ray


    @ray.remote
    def leaf(x):
        return x + 1


    @ray.remote
    def outer(n):
        return sum(ray.get([leaf.remote(i) for i in range(n)]))


    @ray.remote
    class Accumulator:
        def __init__(self):
            self.total = 0

        def add(self, x):
            self.total += x
            return self.total


    @ray.remote
    def talk(word):
        print(f"said {word}")
        return word


    @ray.remote
    def fail():
        raise ValueError("intended failure")


    @ray.remote(max_retries=0)
    def hang(pid_file):
        partial = Path(pid_file + ".tmp")
        partial.write_text(str(os.getpid()))
        partial.rename(pid_file)  # atomic: the driver never reads half a pid
        time.sleep(600)


    def wait_for(condition, what):
        deadline = time.monotonic() + 60
        while not condition():
            assert time.monotonic() < deadline, what
            time.sleep(0.02)


    def main(out_dir):
        info = ray.init(num_cpus=2, object_store_memory=64 << 20)
        out = {"session_dir": info["session_dir"], "driver_pid": os.getpid()}
        outer_ref = outer.remote(3)
        out["outer_task"] = outer_ref.task_id().hex()
        assert ray.get(outer_ref) == 6
        acc = Accumulator.remote()
        assert ray.get([acc.add.remote(1), acc.add.remote(2)]) == [1, 3]
        small = ray.put({"a": 1})
        big = ray.put(np.ones(1 << 20))
        out["big_object"] = big.hex()
        assert ray.get(small) == {"a": 1} and ray.get(big).sum() == 1 << 20
        del big
        # More than the store holds at once: the oldest unpinned objects spill to disk.
        held = [ray.put(np.full(3 << 20, i, dtype=np.float64)) for i in range(4)]
        assert [int(ray.get(r)[0]) for r in held] == [0, 1, 2, 3]
        del held
        talk_ref = talk.remote("hello-e2e")
        out["talk_task"] = talk_ref.task_id().hex()
        assert ray.get(talk_ref) == "hello-e2e"
        fail_ref = fail.remote()
        out["fail_task"] = fail_ref.task_id().hex()
        try:
            ray.get(fail_ref)
        except ValueError:
            pass
        pid_file = out_dir / "hang.pid"
        hang_ref = hang.remote(str(pid_file))
        out["hang_task"] = hang_ref.task_id().hex()
        wait_for(pid_file.exists, "the hang task never started")
        os.kill(int(pid_file.read_text()), 9)
        try:
            ray.get(hang_ref)
        except ray.exceptions.WorkerCrashedError as exc:
            out["crash"] = str(exc)
        gcs_traces = Path(info["session_dir"]) / "traces"
        # Read as a log shipper would: the agent, not this reader, converts the spool.
        wait_for(lambda: any('"gcs.flush"' in p.read_text()
                             for p in gcs_traces.glob("gcs-*.jsonl")),
                 "the GCS never flushed (or its spans never reached the JSON file)")
        ray.shutdown()
        (out_dir / "result.json").write_text(json.dumps(out))


    if __name__ == "__main__":
        main(Path(sys.argv[1]))
''')

REQUIRED_LOG_FIELDS = ("timestamp", "level", "event", "component", "host", "ip", "pid",
                       "node_id", "versions")
TASK_LOG_FIELDS = ("job_id", "task_id", "worker_id", "trace_id", "span_id")
RESOURCE_KEYS = ("service.name", "service.version", "service.instance.id", "host.name",
                 "process.pid", "process.runtime.name", "process.runtime.version", "os.type",
                 "tracedray.node.id", "tracedray.session.id", "tracedray.component")
# Event kinds this program causes, with the attributes each span must carry.
EXPECTED_SPANS = {
    "task.submit": ("tracedray.task.id", "tracedray.task.function", "tracedray.task.kind"),
    "task.schedule": ("tracedray.task.id", "tracedray.scheduling.candidates",
                      "tracedray.scheduling.reason"),
    "task.dispatch": ("tracedray.task.id", "tracedray.worker.id", "tracedray.node.id"),
    "task.execute": ("tracedray.task.id", "tracedray.task.function", "tracedray.task.attempt",
                     "tracedray.worker.id", "tracedray.node.id"),
    "actor.create": ("tracedray.actor.id",),
    "object.put": ("tracedray.object.id", "tracedray.object.size"),
    "object.get": ("tracedray.object.id", "tracedray.object.size"),
    "object.seal": ("tracedray.object.id", "tracedray.object.size", "tracedray.store.used",
                    "tracedray.object.copy"),
    "object.free": ("tracedray.object.id", "tracedray.object.size"),
    "object.spill": ("tracedray.object.id", "tracedray.object.size"),
    "gcs.flush": ("tracedray.gcs.storage",),
    "worker.start": ("tracedray.worker.id", "tracedray.worker.pid", "tracedray.node.id"),
    "worker.exit": ("tracedray.worker.id", "tracedray.exit.code", "tracedray.exit.meaning"),
    "node.start": ("tracedray.node.id",),
}
ISO_UTC = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$")


# --- an OTLP/gRPC receiver ------------------------------------------------------------
class _TraceReceiver(trace_service_pb2_grpc.TraceServiceServicer):
    def __init__(self) -> None:
        self.components: dict[str, int] = {}  # tracedray.component -> spans received
        self.keys: dict[str, list[set[str]]] = {}  # span name -> each span's attribute keys
        self.changed = threading.Condition()

    def Export(self, request: Any, context: Any) -> Any:  # noqa: N802 - gRPC method name
        with self.changed:
            for resource_spans in request.resource_spans:
                attrs = {a.key: a.value.string_value
                         for a in resource_spans.resource.attributes}
                component = attrs.get("tracedray.component", "?")
                count = sum(len(s.spans) for s in resource_spans.scope_spans)
                self.components[component] = self.components.get(component, 0) + count
                for scope_spans in resource_spans.scope_spans:
                    for span in scope_spans.spans:
                        self.keys.setdefault(span.name, []).append(
                            {a.key for a in span.attributes})
            self.changed.notify_all()
        return trace_service_pb2.ExportTraceServiceResponse()

    def wait_for(self, components: set[str], timeout: float) -> dict[str, int]:
        with self.changed:
            self.changed.wait_for(lambda: components <= set(self.components), timeout)
            return dict(self.components)


@pytest.fixture(scope="module")
def receiver() -> Iterator[tuple[_TraceReceiver, int]]:
    servicer = _TraceReceiver()
    server = grpc.server(ThreadPoolExecutor(max_workers=4))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield servicer, port
    finally:
        server.stop(grace=None)


# --- the run and what it left behind --------------------------------------------------
@dataclass
class Span:
    name: str
    trace_id: str
    span_id: str
    parent_id: str
    attributes: dict[str, Any]
    resource: dict[str, Any]
    status_code: int
    events: list[dict[str, Any]]


@dataclass
class Run:
    result: dict[str, Any]
    stdout: str
    session: Path
    spans: list[Span]
    log_files: dict[str, list[dict[str, Any]]]  # file name -> lines


def _attributes(items: list[dict[str, Any]] | None) -> dict[str, Any]:
    return decode_attributes(items)


def read_spans(traces_dir: Path) -> list[Span]:
    """Parse the OTLP JSON lines directly (the Collector's file format), not via tracedray."""
    spans = []
    for path in sorted(traces_dir.glob("*.jsonl")):
        for line in read_data(path).decode().splitlines():
            for resource_spans in json.loads(line)["resourceSpans"]:
                resource = _attributes(resource_spans["resource"]["attributes"])
                for scope_spans in resource_spans["scopeSpans"]:
                    for raw in scope_spans["spans"]:
                        spans.append(Span(raw["name"], raw["traceId"], raw["spanId"],
                                          raw.get("parentSpanId", ""),
                                          _attributes(raw.get("attributes")), resource,
                                          int(raw.get("status", {}).get("code", 0)),
                                          [{"name": e["name"],
                                            **_attributes(e.get("attributes"))}
                                           for e in raw.get("events", [])]))
    return spans


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory,
        receiver: tuple[_TraceReceiver, int]) -> Run:
    work = tmp_path_factory.mktemp("telemetry-e2e")
    script = work / "program.py"
    script.write_text(PROGRAM)
    # Set before init so the GCS, raylet and workers inherit the exporter settings.
    env = {**os.environ, "TRACEDRAY_TEMP_DIR": str(work / "root"),
           "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{receiver[1]}",
           "OTEL_EXPORTER_OTLP_INSECURE": "true",
           "TRACEDRAY_GCS_FLUSH_MIN_AGE_S": "0", "TRACEDRAY_GCS_FLUSH_INTERVAL_S": "0.2"}
    for key in ("OTEL_SDK_DISABLED", "OTEL_TRACES_SAMPLER", "OTEL_TRACES_SAMPLER_ARG",
                "TRACEDRAY_LOG_TO_DRIVER"):
        env.pop(key, None)
    done = subprocess.run([sys.executable, str(script), str(work)], env=env, text=True,
                          capture_output=True, timeout=240, check=False)
    assert done.returncode == 0, f"program failed:\n{done.stdout}\n{done.stderr}"
    result = json.loads((work / "result.json").read_text())
    session = Path(result["session_dir"])
    logs = {path.name: [json.loads(line) for line in read_data(path).decode().splitlines()]
            for path in sorted((session / "logs").glob("*.jsonl"))}
    return Run(result, done.stdout, session, read_spans(session / "traces"), logs)


def _by_name(run: Run, name: str) -> list[Span]:
    return [s for s in run.spans if s.name == name]


def _task_span(run: Run, name: str, task_hex: str) -> Span:
    matches = [s for s in _by_name(run, name) if s.attributes.get("tracedray.task.id") == task_hex]
    assert len(matches) == 1, f"{len(matches)} {name} spans for task {task_hex}"
    return matches[0]


# --- logs --------------------------------------------------------------------------------
def test_every_log_line_has_the_required_fields(run: Run) -> None:
    components = {lines[0]["component"] for lines in run.log_files.values()}
    assert {"driver", "gcs", "raylet", "worker"} <= components
    for name, lines in run.log_files.items():
        assert lines[0]["event"] == "process.start", name
        for key in ("argv", "cwd", "user", "executable", "packages"):
            assert key in lines[0], f"{name}: process.start lacks {key}"
        # A driver learns its node once connected; the GCS serves the cluster, not a node.
        node_known = lines[0]["component"] in ("raylet", "worker")
        for line in lines:
            node_known = node_known or line["event"] == "driver.connected"
            missing = [key for key in REQUIRED_LOG_FIELDS if key not in line]
            assert not missing, f"{name}: {line['event']} lacks {missing}"
            assert ISO_UTC.match(line["timestamp"]), line["timestamp"]
            assert {"python", "tracedray"} <= set(line["versions"])
            assert line["pid"] == int(name.rsplit("-", 1)[1].split(".")[0])
            if node_known:
                assert line["node_id"], f"{name}: empty node_id in {line['event']}"
            if line.get("task_id"):
                missing = [key for key in TASK_LOG_FIELDS if not line.get(key)]
                assert not missing, f"{name}: task line {line['event']} lacks {missing}"
    for name, lines in run.log_files.items():
        if lines[0]["component"] in ("driver", "gcs", "raylet"):
            assert lines[-1]["event"] == "process.exit", name
            assert "exit_code" in lines[-1]


def test_printed_output_is_attributed_to_its_task_and_echoed(run: Run) -> None:
    talk = run.result["talk_task"]
    records = [line for lines in run.log_files.values() for line in lines
               if line["event"] == "task.output" and line.get("line") == "said hello-e2e"]
    assert len(records) == 1
    record = records[0]
    assert record["task_id"] == talk and record["component"] == "worker"
    assert record["stream"] == "stdout"
    execute = _task_span(run, "task.execute", talk)
    assert record["trace_id"] == execute.trace_id
    assert re.search(rf"^\(talk pid={record['pid']}, ip=[\d.]+\) said hello-e2e$", run.stdout,
                     re.MULTILINE), run.stdout


def test_submissions_puts_gets_and_flushes_each_have_a_log_line(run: Run) -> None:
    lines = [line for lines in run.log_files.values() for line in lines]
    events: dict[str, list[dict[str, Any]]] = {}
    for line in lines:
        events.setdefault(line["event"], []).append(line)
    submitted = {line["task_id"] for line in events.get("task.submit", [])}
    assert {s.attributes["tracedray.task.id"] for s in _by_name(run, "task.submit")} <= submitted
    put_ids = {line["object_id"] for line in events.get("object.put", [])}
    assert {s.attributes["tracedray.object.id"] for s in _by_name(run, "object.put")} <= put_ids
    assert all(line["size"] >= 0 and line["call_site"] for line in events["object.put"])
    assert len(events.get("object.get", [])) == len(_by_name(run, "object.get"))
    # the get of the failing task raised: its line says so
    assert any(line.get("error_type") for line in events["object.get"])
    decided = {s.attributes["tracedray.task.id"] for s in _by_name(run, "task.schedule")}
    assert decided <= {line["task_id"] for line in events.get("task.dispatch", [])}
    assert events.get("gcs.flush"), "no gcs.flush line"


# --- spans -------------------------------------------------------------------------------
def test_every_event_kind_has_spans_with_its_attributes(run: Run) -> None:
    for name, keys in EXPECTED_SPANS.items():
        spans = _by_name(run, name)
        assert spans, f"no {name} span"
        for span in spans:
            missing = [key for key in keys if key not in span.attributes]
            assert not missing, f"{name} lacks {missing}: {span.attributes}"
    freed = {s.attributes["tracedray.object.id"] for s in _by_name(run, "object.free")}
    assert run.result["big_object"] in freed
    components = set()
    for span in run.spans:
        missing = [key for key in RESOURCE_KEYS if key not in span.resource]
        assert not missing, f"{span.name} resource lacks {missing}"
        components.add(span.resource["tracedray.component"])
        if span.resource["tracedray.component"] != "gcs":  # the GCS serves no one node
            assert span.resource["tracedray.node.id"], f"{span.name}: no node in its resource"
    assert {"driver", "gcs", "raylet", "worker"} <= components


def test_nested_tasks_form_one_trace_without_dangling_parents(run: Run) -> None:
    submit = _task_span(run, "task.submit", run.result["outer_task"])
    execute = _task_span(run, "task.execute", run.result["outer_task"])
    assert submit.resource["tracedray.component"] == "driver"
    assert execute.resource["tracedray.component"] == "worker"
    assert execute.parent_id == submit.span_id and execute.trace_id == submit.trace_id
    trace = [s for s in run.spans if s.trace_id == submit.trace_id]
    span_ids = {s.span_id for s in trace}
    dangling = [(s.name, s.parent_id) for s in trace if s.parent_id and s.parent_id not in span_ids]
    assert not dangling
    roots = [s for s in trace if not s.parent_id]
    assert roots == [submit]
    leaves = [s for s in trace if s.name == "task.execute" and
              s.attributes["tracedray.task.function"].endswith(".leaf")]
    assert len(leaves) == 3
    nested_submits = {s.span_id: s for s in trace if s.name == "task.submit"}
    for leaf in leaves:
        parent = nested_submits[leaf.parent_id]
        assert parent.parent_id == execute.span_id  # submitted from inside the outer task


def test_the_failing_task_is_an_error_with_an_exception_event(run: Run) -> None:
    execute = _task_span(run, "task.execute", run.result["fail_task"])
    assert execute.status_code == 2  # STATUS_CODE_ERROR
    assert execute.attributes["error.type"] == "ValueError"
    events = [e for e in execute.events if e["name"] == "exception"]
    assert len(events) == 1
    assert events[0]["exception.type"] == "ValueError"
    assert "intended failure" in events[0]["exception.message"]
    assert "raise ValueError" in events[0]["exception.stacktrace"]


def test_a_killed_worker_is_recorded_in_its_task_trace(run: Run) -> None:
    hang = run.result["hang_task"]
    assert "SIGKILL" in run.result["crash"]
    exits = [s for s in _by_name(run, "worker.exit")
             if s.attributes.get("tracedray.task.id") == hang]
    assert len(exits) == 1
    exit_span = exits[0]
    assert exit_span.resource["tracedray.component"] == "raylet"
    assert exit_span.attributes["tracedray.exit.signal"] == "SIGKILL"
    assert exit_span.attributes["tracedray.exit.code"] == 137
    assert exit_span.status_code == 2
    submit = _task_span(run, "task.submit", hang)
    assert exit_span.trace_id == submit.trace_id
    assert exit_span.parent_id in {s.span_id for s in run.spans if s.trace_id == submit.trace_id}
    # The caller's side: each dispatch of the task to a worker that died failed.
    dispatches = [s for s in _by_name(run, "task.dispatch")
                  if s.attributes.get("tracedray.task.id") == hang]
    assert dispatches and all(s.parent_id == submit.span_id for s in dispatches)
    assert all(s.status_code == 2
               and s.attributes["error.type"] == "tracedray.exceptions.WorkerCrashedError"
               for s in dispatches), [(s.status_code, s.attributes) for s in dispatches]


def test_every_dispatch_is_a_child_of_its_task_submission(run: Run) -> None:
    submits = {s.attributes["tracedray.task.id"]: s for s in _by_name(run, "task.submit")}
    dispatches = _by_name(run, "task.dispatch")
    # Tasks and actor calls go out through a lease or an actor channel (actor
    # creation goes through the GCS instead).
    assert len(dispatches) >= len(submits) // 2
    for dispatch in dispatches:
        submit = submits[dispatch.attributes["tracedray.task.id"]]
        assert (dispatch.trace_id, dispatch.parent_id) == (submit.trace_id, submit.span_id)


def test_spans_reach_an_otlp_grpc_receiver_from_every_process_kind(
        run: Run, receiver: tuple[_TraceReceiver, int]) -> None:
    servicer, _ = receiver
    received = servicer.wait_for({"driver", "raylet", "worker"}, timeout=30)
    for component in ("driver", "raylet", "worker"):
        assert received.get(component, 0) > 0, received
    # The hot spans are recorded by their shapes in the files; the exporter gets their
    # attributes as any span's.
    with servicer.changed:
        keys = {name: list(spans) for name, spans in servicer.keys.items()}
    for name in ("task.submit", "task.dispatch", "task.execute"):
        assert keys.get(name), f"no {name} span exported"
        for span_keys in keys[name]:
            missing = [key for key in EXPECTED_SPANS[name] if key not in span_keys]
            assert not missing, f"an exported {name} lacks {missing}: {span_keys}"


# --- the pytest plugin, as a user's test file uses it ------------------------------------
USER_TEST = textwrap.dedent('''
    import tracedray


    @tracedray.remote
    def add_one(x):
        return x + 1


    def test_uses_only_the_fixture(tracedray_spans):
        first = add_one.remote(1)
        assert tracedray.get(first) == 2
        spans = tracedray_spans.get_finished_spans()
        execute = [s for s in spans if s.name == "task.execute"
                   and s.attributes["tracedray.task.id"] == first.task_id().hex()]
        assert len(execute) == 1
        assert execute[0].resource.attributes["tracedray.component"] == "worker"
        components = {s.resource.attributes["tracedray.component"] for s in spans}
        assert {"driver", "raylet", "worker"} <= components
        tracedray_spans.clear()
        second = add_one.remote(2)
        assert tracedray.get(second) == 3
        task_ids = {s.attributes.get("tracedray.task.id")
                    for s in tracedray_spans.get_finished_spans()}
        assert second.task_id().hex() in task_ids
        assert first.task_id().hex() not in task_ids
''')


def test_a_user_test_file_with_only_the_fixture_passes(tmp_path: Path) -> None:
    (tmp_path / "test_user.py").write_text(USER_TEST)
    env = {**os.environ, "TRACEDRAY_TEMP_DIR": str(tmp_path / "root")}
    env.pop("OTEL_SDK_DISABLED", None)
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "test_user.py"], cwd=tmp_path, env=env, text=True,
                          capture_output=True, timeout=240, check=False)
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}"
    assert "1 passed" in done.stdout, done.stdout
