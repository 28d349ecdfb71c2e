"""A helper for tests of writers that must behave across fork()."""

from __future__ import annotations

import os
from collections.abc import Callable


def run_in_forked_child(action: Callable[[], object]) -> int:
    """Fork, run ``action`` in the child, wait for it; returns the child's pid.

    Fails the test if the action raised in the child.
    """
    pid = os.fork()
    if pid == 0:  # pragma: no cover -- runs in the child
        code = 0
        try:
            action()
        except BaseException:
            code = 1
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, "the action failed in the forked child"
    return pid
