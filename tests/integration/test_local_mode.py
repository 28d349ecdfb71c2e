"""init(local_mode=True): tasks and actors run serially in the driver, telemetry still on."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import tracedray
from tracedray.api import calls as api
from tracedray.exceptions import ActorDiedError, RayTaskError
from tracedray.telemetry.append_file import read_data  # live files end in NULs
from tracedray.testing.pytest_plugin import FinishedSpans


@pytest.fixture
def local_ray(no_leaks: None) -> Iterator[Any]:
    info = tracedray.init(local_mode=True)
    assert info["address"] == "local_mode"
    try:
        yield tracedray
    finally:
        tracedray.shutdown()


@tracedray.remote
def double(x: int) -> int:
    return x * 2


@tracedray.remote
def where() -> tuple[int, str | None]:
    return os.getpid(), tracedray.get_runtime_context().get_task_id()


@tracedray.remote
def fan_out(n: int) -> int:
    return sum(tracedray.get([double.remote(i) for i in range(n)]))


@tracedray.remote
def fail(message: str) -> None:
    raise KeyError(message)


@tracedray.remote
def pass_through(x: int) -> int:
    return x


@tracedray.remote(num_returns=2)
def pair() -> tuple[int, int]:
    return 1, 2


@tracedray.remote
class Counter:
    def __init__(self, start: int) -> None:
        self.value = start

    def add(self, n: int) -> int:
        self.value += n
        return self.value

    def actor_id(self) -> str | None:
        return tracedray.get_runtime_context().get_actor_id()


@tracedray.remote
class Broken:
    def __init__(self) -> None:
        raise RuntimeError("constructor failed")

    def ping(self) -> str:
        return "pong"


def test_tasks_run_in_the_driver_and_return_refs(local_ray: Any) -> None:
    ref = where.remote()
    assert isinstance(ref, tracedray.ObjectRef)
    pid, task_id = tracedray.get(ref)
    assert pid == os.getpid()
    assert task_id == ref.task_id().hex()
    assert tracedray.get(fan_out.remote(5)) == 20
    assert tracedray.get(double.remote(double.remote(3))) == 12  # ref argument resolved
    first, second = pair.remote()
    assert tracedray.get([first, second]) == [1, 2]
    ready, rest = tracedray.wait([double.remote(1), double.remote(2)], num_returns=1)
    assert len(ready) == 1 and len(rest) == 1


def test_errors_are_reraised_by_get_with_the_original_type(local_ray: Any) -> None:
    ref = fail.remote("missing")  # does not raise at submission, as in a cluster
    with pytest.raises(KeyError) as caught:
        tracedray.get(ref)
    assert isinstance(caught.value, RayTaskError)
    assert "fail" in str(caught.value) and "missing" in str(caught.value)
    # A task whose argument is a failed object fails with the upstream error.
    with pytest.raises(KeyError):
        tracedray.get(pass_through.remote(fail.remote("upstream")))


def test_values_are_copied_like_a_cluster_would(local_ray: Any) -> None:
    array = np.arange(5)
    ref = tracedray.put(array)
    array[0] = 100
    assert tracedray.get(ref).tolist() == [0, 1, 2, 3, 4]
    nested = tracedray.put({"inner": tracedray.put("deep")})
    assert tracedray.get(tracedray.get(nested)["inner"]) == "deep"


def test_actors_keep_state_and_can_be_named_and_killed(local_ray: Any) -> None:
    counter = Counter.options(name="counter").remote(10)
    assert tracedray.get([counter.add.remote(1), counter.add.remote(2)]) == [11, 13]
    again = tracedray.get_actor("counter")
    assert tracedray.get(again.add.remote(1)) == 14
    assert tracedray.get(counter.actor_id.remote()) == counter._actor_id.hex()
    reused = Counter.options(name="counter", get_if_exists=True).remote(0)
    assert tracedray.get(reused.add.remote(0)) == 14
    tracedray.kill(counter)
    with pytest.raises(ActorDiedError, match="killed"):
        tracedray.get(counter.add.remote(1))
    with pytest.raises(ValueError, match="dead|no such"):
        tracedray.get_actor("counter")
    broken = Broken.remote()
    with pytest.raises(ActorDiedError, match="constructor failed"):
        tracedray.get(broken.ping.remote())


def test_spans_and_log_lines_are_still_emitted(local_ray: Any) -> None:
    spans = FinishedSpans()
    outer = fan_out.remote(2)
    assert tracedray.get(outer) == 2
    with pytest.raises(KeyError):
        tracedray.get(fail.remote("x"))
    Counter.remote(0)
    put_ref = tracedray.put(b"x" * 100)
    put_hex = put_ref.hex()
    del put_ref
    tracedray.put(1)  # the next call frees what lost its last reference
    finished = spans.get_finished_spans()
    by_name: dict[str, list[Any]] = {}
    for span in finished:
        by_name.setdefault(span.name, []).append(span)
    for name in ("task.submit", "task.execute", "object.put", "object.get", "object.free",
                 "actor.create"):
        assert by_name.get(name), f"no {name} span in {sorted(by_name)}"
    outer_hex = outer.task_id().hex()
    outer_exec = next(s for s in by_name["task.execute"]
                      if s.attributes["tracedray.task.id"] == outer_hex)
    outer_submit = next(s for s in by_name["task.submit"]
                        if s.attributes["tracedray.task.id"] == outer_hex)
    assert outer_exec.parent is not None
    assert outer_exec.parent.span_id == outer_submit.context.span_id
    trace = [s for s in finished if s.context.trace_id == outer_exec.context.trace_id]
    ids_in_trace = {s.context.span_id for s in trace}
    nested = [s for s in trace if s.name == "task.execute" and s is not outer_exec]
    assert len(nested) == 2
    for span in trace:
        assert span.parent is None or span.parent.span_id in ids_in_trace
    failed = next(s for s in by_name["task.execute"]
                  if s.attributes["tracedray.task.function"].endswith(".fail"))
    assert failed.status.status_code.name == "ERROR"
    assert any(e.name == "exception" for e in failed.events)
    assert any(s.attributes["tracedray.object.id"] == put_hex for s in by_name["object.free"])

    session_dir = Path(api.current_session_dir())
    log_lines = [json.loads(line) for path in (session_dir / "logs").glob("driver-*.jsonl")
                 for line in read_data(path).decode().splitlines()]
    executes = [line for line in log_lines if line["event"] == "task.execute"
                and line.get("task_id") == outer_hex]
    assert executes and executes[0]["trace_id"] == format(outer_exec.context.trace_id, "032x")
    assert all(line["node_id"] for line in log_lines)


def test_a_breakpoint_inside_a_task_stops_in_pdb(tmp_path: Path) -> None:
    script = tmp_path / "debug_me.py"
    script.write_text(textwrap.dedent("""
        import tracedray

        @tracedray.remote
        def task(x):
            secret = x * 7
            breakpoint()
            return secret

        tracedray.init(local_mode=True)
        print("result", tracedray.get(task.remote(6)))
        tracedray.shutdown()
    """))
    env = {**os.environ, "PYTHONBREAKPOINT": "pdb.set_trace"}
    done = subprocess.run([sys.executable, str(script)], input="p secret\nc\n", text=True,
                          capture_output=True, env=env, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert "(Pdb) 42" in done.stdout
    assert "result 42" in done.stdout
