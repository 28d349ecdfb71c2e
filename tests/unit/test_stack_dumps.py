"""`tracedray stack`'s pure parts: a process's own dump, the raylet's deadline and
py-spy parsing, and the CLI's filters and text."""

from __future__ import annotations

import threading

import pytest

from tracedray._proto.v1 import common_pb2, debug_pb2
from tracedray.cli import stack_view
from tracedray.core.raylet import stack_dumps
from tracedray.core.worker import stack_dump


def _parked(event: threading.Event) -> None:
    event.wait(30)


def test_a_process_dumps_each_thread_labelled_with_its_task() -> None:
    event = threading.Event()
    thread = threading.Thread(target=_parked, args=(event,), name="runner", daemon=True)
    thread.start()
    try:
        assert thread.ident is not None
        spec = common_pb2.TaskSpec(task_id=b"\x01" * 16, attempt=2, function_name="m.f",
                                   trace_id=b"\x02" * 16, kind=common_pb2.NORMAL)
        dump = stack_dump.dump(worker_id="w", pid=1, component="worker", job_id=b"\x03",
                               live=[stack_dump.LiveTask(spec, 5.0, thread.ident, None)],
                               skip_thread=threading.get_ident())
    finally:
        event.set()
        thread.join()
    assert dump.threads[0].name == "runner"  # the task's thread first
    assert dump.threads[0].frames[-1].function == "wait"
    assert "_parked" in [f.function for f in dump.threads[0].frames]
    assert threading.get_ident() not in [t.thread_id for t in dump.threads]
    [task] = dump.tasks
    assert (task.task_id, task.attempt, task.function, task.trace_id, task.thread_id) == (
        "01" * 16, 2, "m.f", "02" * 16, thread.ident)
    assert "Thread runner running m.f" in stack_dump.summary(dump)


@pytest.mark.parametrize(("asked", "used"), [(0.0, 5.0), (2.0, 2.0), (1000.0, 60.0)])
def test_the_raylet_bounds_each_process_deadline(asked: float, used: float) -> None:
    assert stack_dumps.timeout_of(debug_pb2.DumpStacksRequest(timeout_s=asked)) == used


def test_a_process_without_a_port_is_reported_starting() -> None:
    row = stack_dumps.ask(stack_dumps.Target("w", 7, "worker", "STARTING", None), 1.0, False)
    assert row.error.startswith("starting") and not row.HasField("dump")


def test_py_spy_frames_are_read_outermost_first() -> None:
    parsed = stack_dumps.native_frames([
        {"thread_id": 11, "frames": [{"name": "inner", "filename": "a.c", "line": 3},
                                     {"name": "outer", "filename": "b.py", "line": 9}]},
        "garbage"])
    assert parsed == {11: ["outer (b.py:9)", "inner (a.c:3)"]}
    assert stack_dumps.native_frames({"not": "a list"}) == {}


def _answer() -> stack_view.NodeAnswer:
    dumps = debug_pb2.NodeStackDumps(node_id="node-b", ip="10.0.0.2")
    busy = dumps.processes.add(worker_id="w1", pid=101, component="worker", state="LEASED")
    busy.dump.dumped_at = 110.0
    busy.dump.tasks.add(task_id="abcd" * 8, attempt=0, function="m.f", started_at=100.0,
                        trace_id="ee" * 16, thread_id=1)
    thread = busy.dump.threads.add(thread_id=1, name="tracedray-executor")
    thread.frames.add(filename="/x/tracedray/core/worker/task_executor.py", lineno=1,
                      function="_execute")
    thread.frames.add(filename="/home/me/job.py", lineno=7, function="marker",
                      line="time.sleep(1)")
    busy.dump.threads.add(thread_id=2, name="tracedray-flusher").frames.add(
        filename="/usr/lib/python3.11/threading.py", lineno=1, function="wait")
    actor = dumps.processes.add(worker_id="w2", pid=102, component="worker", state="ACTOR",
                                actor_id="aa" * 16)
    actor.dump.actor_id, actor.dump.actor_class = "aa" * 16, "Waiter"
    dumps.processes.add(worker_id="w3", pid=103, component="worker", state="ACTOR",
                        actor_id="bb" * 16, error=stack_dumps.not_answering(1.0))
    return stack_view.NodeAnswer("node-b", "10.0.0.2", False, dumps)


def test_rows_filters_and_text() -> None:
    rows = stack_view.node_rows([_answer(), stack_view.NodeAnswer(
        "node-c", "10.0.0.3", False, None, "its raylet did not answer")])
    [busy] = [p for p in rows[0]["processes"] if p["pid"] == 101]
    assert busy["tasks"][0]["running_for_s"] == 10.0
    assert rows[0]["processes"][0]["pid"] == 101  # busy workers first
    unanswered = stack_view.unanswered(rows)
    assert unanswered[0] == "node node-c (10.0.0.3): its raylet did not answer"
    assert unanswered[1].startswith("pid 103 on node node-b: not answering within 1s")
    assert len(unanswered) == 2

    only = stack_view.only_task(rows, "ABCD")
    assert [p["pid"] for n in only for p in n["processes"]] == [101]
    assert [t["name"] for t in only[0]["processes"][0]["threads"]] == ["tracedray-executor"]
    assert stack_view.only_task(rows, "ffff") == []
    assert [p["pid"] for n in stack_view.only_actor(rows, "bb") for p in n["processes"]] == [103]

    text = stack_view.render(rows)
    assert "running m.f (task " + "abcd" * 8 + ", attempt 0, running for 10.0s" in text
    assert "... 1 frames of the runtime" in text and "time.sleep(1)" in text
    assert "tracedray-flusher" not in text and "(1 threads of the runtime, idle" in text
    assert "actor Waiter " + "aa" * 16 in text
    assert "not answering within 1s" in text
    assert "tracedray-flusher" in stack_view.render(rows, all_threads=True)


def test_breakpoints_are_listed_oldest_first_and_chosen_by_index_or_id() -> None:
    from tracedray.cli.commands.debug import breakpoint_rows, choose

    dumps = debug_pb2.NodeStackDumps(node_id="n")
    process = dumps.processes.add(pid=5)
    process.dump.breakpoints.add(breakpoint_id="bbb111", since=20.0, filename="f.py", lineno=3)
    process.dump.breakpoints.add(breakpoint_id="aaa222", since=10.0, function="m.g")
    dumps.processes.add(pid=6, error="not answering")
    rows = breakpoint_rows([stack_view.NodeAnswer("n", "ip", True, dumps),
                            stack_view.NodeAnswer("m", "ip", False, None, "down")], 30.0)
    assert [(r["index"], r["breakpoint_id"], r["waiting_s"]) for r in rows] == [
        (0, "aaa222", 20.0), (1, "bbb111", 10.0)]
    assert rows[1]["location"] == "f.py:3"
    assert choose(rows, "1") is rows[1]
    assert choose(rows, "AAA") is rows[0]
    assert choose(rows, "7") is None and choose(rows, "c") is None


async def _coroutine_marker(event: object) -> None:
    import asyncio

    assert isinstance(event, asyncio.Event)
    await event.wait()


def test_an_async_call_shows_where_its_coroutine_awaits() -> None:
    import asyncio

    from tracedray.core.worker.async_actor import ActorEventLoop

    loop = ActorEventLoop()
    event: asyncio.Event | None = None

    async def make_event() -> asyncio.Event:
        return asyncio.Event()

    event = loop.run(make_event())
    caller = threading.Thread(target=loop.run, args=(_coroutine_marker(event),), daemon=True)
    caller.start()
    try:
        assert caller.ident is not None
        spec = common_pb2.TaskSpec(task_id=b"\x05" * 16, function_name="A.m",
                                   kind=common_pb2.ACTOR_METHOD)
        for _ in range(200):  # until the coroutine awaits the event
            dump = stack_dump.dump(worker_id="w", pid=1, component="worker", job_id=b"",
                                   live=[stack_dump.LiveTask(spec, 0.0, caller.ident, None)])
            if len(dump.threads) > 1 and len(dump.threads[1].frames) > 1:
                break
            threading.Event().wait(0.05)
        first, second = dump.threads[0], dump.threads[1]
        assert first.thread_id == second.thread_id == caller.ident
        assert second.name.endswith("(its coroutine)")
        assert [f.function for f in second.frames][:2] == ["_coroutine_marker", "wait"]
    finally:
        loop._loop.call_soon_threadsafe(event.set)
        caller.join(10)
        loop._loop.call_soon_threadsafe(loop._loop.stop)
