"""What each part of ``f.remote()`` costs the caller's thread, in µs (tracedray only).

On a warm 2-CPU cluster, each part is run ``--calls`` times in a row and timed with
the thread's CPU clock (``time.thread_time``), so time other threads take (the submit
inbox, the task stream) is left out; ``--repeat`` such runs give a median. The parts are
the library's own functions, called as ``.remote()`` calls them; "whole .remote()" is
the sum as the user pays it (the tasks run, and are gotten, outside the timing).

Usage: python benchmarks/submission_parts.py [--calls 5000] [--repeat 5] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


def _cpu_us(calls: int, part: Callable[[], Any]) -> float:
    start = time.thread_time()
    for _ in range(calls):
        part()
    return (time.thread_time() - start) / calls * 1e6


def measure(calls: int, repeat: int) -> dict[str, float]:
    import tracedray
    from tracedray import logs, telemetry
    from tracedray._proto.v1 import common_pb2
    from tracedray.api.call_site import user_call_site
    from tracedray.api.calls import global_runtime
    from tracedray.api.submission import build_task, plan_task
    from tracedray.core import ids

    tracedray.init(num_cpus=2)
    try:
        @tracedray.remote
        def empty() -> None:
            return None

        worker = global_runtime().worker  # type: ignore[attr-defined]
        tracedray.get([empty.remote() for _ in range(1000)])  # type: ignore[attr-defined]
        refs: list[Any] = []

        def whole() -> None:
            refs.append(empty.remote())  # type: ignore[attr-defined]

        plan = plan_task(worker, empty._function, "f", {})  # type: ignore[attr-defined]

        def build() -> None:
            refs.append(build_task(worker, plan, (), {}).refs)

        def spec() -> None:
            common_pb2.TaskSpec(task_id=ids.new_task_id(), job_id=worker.current_job_id(),
                                kind=common_pb2.NORMAL, function_id="x", function_name="f",
                                num_returns=1, resources={"CPU": 1.0}, max_retries=3,
                                caller=worker.address_proto, call_site="x.py:1",
                                namespace=worker.namespace)

        def span() -> None:
            telemetry.finish_span(telemetry.start_span("task.submit", {"a": 1}))

        parts: dict[str, Callable[[], Any]] = {
            "whole .remote()": whole,
            "build_task (spec, span, line, args, refs, event)": build,
            "TaskSpec(...)": spec,
            "call site": lambda: user_call_site(1),
            "task id": ids.new_task_id,
            "task.submit line's moment taken (logs.info_context, the time)":
                lambda: (logs.info_context(), time.time()),
            "a span (start_span, unshaped)": span,
            "return ref": lambda: refs.append(worker.new_owned_ref(
                ids.object_id_for(ids.new_task_id(), 1), "x.py:1")),
        }
        results: dict[str, list[float]] = {name: [] for name in parts}
        for _ in range(repeat):
            for name, part in parts.items():
                results[name].append(_cpu_us(calls, part))
                refs.clear()
            tracedray.get([empty.remote() for _ in range(10)])  # type: ignore[attr-defined]
        return {name: statistics.median(values) for name, values in results.items()}
    finally:
        tracedray.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=5000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    figures = measure(args.calls, args.repeat)
    for name, micros in figures.items():
        print(f"{name:52} {micros:7.2f} µs")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1))


if __name__ == "__main__":
    main()
