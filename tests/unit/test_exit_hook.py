"""The driver's exit hook runs before Python joins the thread pools (api/exit_hook.py),
checked in child interpreters that end with a pool thread still blocked."""

from __future__ import annotations

import subprocess
import sys
import textwrap

# A pool thread blocks until the hook releases it, as a lease wait until the shutdown
# withdraws the request: a hook run after the pool join (plain atexit) never exits. Its
# work after that is done only if the interpreter still joins the pool.
BLOCKED_POOL = textwrap.dedent("""
    import threading, time
    from concurrent.futures import ThreadPoolExecutor
    from tracedray.api import exit_hook

    released = threading.Event()

    def lease_wait():
        released.wait()
        time.sleep(0.2)
        print("pool work finished", flush=True)

    pool = ThreadPoolExecutor(max_workers=1)
    pool.submit(lease_wait)

    def shutdown():
        print("hook ran", flush=True)
        released.set()
        {then}

    exit_hook.run_before_thread_joins(shutdown)
""")


def _run(then: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", BLOCKED_POOL.format(then=then)],
                          capture_output=True, text=True, timeout=30)


def test_the_hook_runs_before_the_pool_is_joined() -> None:
    child = _run("pass")
    assert child.returncode == 0, child.stderr
    assert child.stdout == "hook ran\npool work finished\n"


def test_a_failing_hook_is_reported_and_the_pool_still_joined() -> None:
    child = _run("raise RuntimeError('shutdown broke')")
    assert child.returncode == 0, child.stderr
    assert child.stdout == "hook ran\npool work finished\n"
    assert "RuntimeError: shutdown broke" in child.stderr
