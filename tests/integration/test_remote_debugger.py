"""`breakpoint()` in a remote task on a real cluster: `tracedray debug` lists it, and a
session attached through a pty prints a local variable and continues, after which the
task returns its result; the wait is a `debugger.waiting` log line."""

from __future__ import annotations

import inspect
import sys
from collections.abc import Iterator
from typing import Any

import cloudpickle
import pexpect
import pytest
from cli_support import run, run_json
from multinode_support import log_events, wait_for

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # workers cannot import tests


def paused(x: int) -> int:
    secret_value = x * 6
    breakpoint()  # noqa: T100 - the test's subject
    return secret_value + 1


def fails(x: int) -> int:
    doomed_value = x + 100
    raise ValueError(f"bad {doomed_value}")


def _address(ray: Any) -> str:
    return str(ray.api.calls._require_cluster().gcs_address)


def test_breakpoint_in_a_task_is_listed_and_a_session_continues_it(ray: Any) -> None:
    address = _address(ray)
    ref = ray.remote(paused).remote(7)
    [waiting] = wait_for(lambda: run_json("debug", "--address", address), 60,
                         "the task's breakpoint listed by tracedray debug")
    assert waiting["task_id"] == ref.task_id().hex()
    assert waiting["function"].endswith("paused")
    lines, first = inspect.getsourcelines(paused)
    line = first + next(i for i, text in enumerate(lines) if "breakpoint()" in text)
    assert waiting["location"] == f"{__file__}:{line}"
    assert "token" not in waiting  # the secret to attach stays out of listings

    _attach_print_continue(address, waiting["breakpoint_id"][:6], "secret_value", "42")
    assert ray.get(ref, timeout=60) == 43
    assert run_json("debug", "--address", address) == []
    [line] = [e for e in log_events(_session_dir(ray), "debugger.waiting")
              if e.get("task_id") == ref.task_id().hex()]
    assert line["breakpoint_id"] == waiting["breakpoint_id"]
    wait_for(lambda: "paused at a breakpoint" in run("trace", ref.task_id().hex(),
                                                     "--address", address).stdout,
             30, "the task's story telling the breakpoint")


def _attach_print_continue(address: str, which: str, expression: str, expected: str) -> None:
    session = pexpect.spawn(sys.executable, ["-m", "tracedray.cli.app", "debug", which,
                                             "--address", address],
                            encoding="utf-8", timeout=60)
    try:
        session.expect_exact("(tracedray-pdb) ")
        session.sendline(f"p {expression}")
        session.expect_exact(expected)
        session.sendline("continue")
        session.expect(pexpect.EOF)
    finally:
        session.close(force=True)
    assert session.exitstatus == 0, session.before


@pytest.fixture
def post_mortem_ray(monkeypatch: pytest.MonkeyPatch, no_leaks: None) -> Iterator[Any]:
    import tracedray

    monkeypatch.setenv("TRACEDRAY_DEBUG_POST_MORTEM", "1")  # the workers inherit it
    tracedray.init(num_cpus=1, object_store_memory=64 << 20)
    try:
        yield tracedray
    finally:
        tracedray.shutdown()


def test_post_mortem_waits_at_the_exception_then_the_task_fails(post_mortem_ray: Any) -> None:
    ray = post_mortem_ray
    address = _address(ray)
    ref = ray.remote(fails).options(max_retries=0).remote(1)
    [waiting] = wait_for(lambda: run_json("debug", "--address", address), 60,
                         "the failed task waiting in a post-mortem")
    assert waiting["post_mortem"] and waiting["error"] == "ValueError: bad 101"
    _attach_print_continue(address, "0", "doomed_value", "101")
    with pytest.raises(ValueError, match="bad 101"):
        ray.get(ref, timeout=60)


def test_debug_with_an_unknown_breakpoint_says_so(ray: Any) -> None:
    result = run("debug", "nothere", "--address", _address(ray), code=1)
    assert "no waiting breakpoint is 'nothere'" in result.stderr


def _session_dir(ray: Any) -> Any:
    from tracedray.core.session import session_for_address

    session = session_for_address(_address(ray))
    assert session is not None
    return session.root
