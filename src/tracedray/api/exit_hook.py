"""The driver's shutdown at interpreter exit, run before Python joins its threads.

At exit CPython first runs the hooks registered with ``threading._register_atexit``
(last registered first), among them the one of ``concurrent.futures``, which joins
every ``ThreadPoolExecutor`` thread; then it joins the other non-daemon threads; only
then does it run the ``atexit`` handlers. A core worker's background pool thread may be
waiting for a lease that the raylet grants only once a worker frees up, which can take
as long as the tasks this very process leaves running: a shutdown registered with
``atexit`` came too late to withdraw that request, and the process hung in the join
(a script that ended, or raised, without ``shutdown()``).

So the shutdown is a threading exit hook registered after the one of
``concurrent.futures`` (imported here first for that reason): it runs before the pool
join and gives leases and waiting requests back as an explicit ``shutdown()`` does, so
the pool threads end and the join returns at once. A non-daemon thread of the program
that still uses tracedray after the main thread ended finds it shut down; it could not
submit work at that point anyway, as ``concurrent.futures`` refuses new work once its
own hook ran.
"""

from __future__ import annotations

import atexit
import concurrent.futures.thread  # noqa: F401 - registers its exit hook before ours
import threading
import traceback
from collections.abc import Callable

from tracedray import logs

log = logs.get_logger("tracedray.core.exit_hook")  # the logger its lines name (the record)


def run_before_thread_joins(shutdown: Callable[[], None]) -> None:
    """Call ``shutdown`` at interpreter exit, before the thread pools are joined."""
    register = getattr(threading, "_register_atexit", None)  # private, CPython >= 3.9
    if register is None:
        atexit.register(shutdown)  # no earlier hook here: the best this Python offers
        return
    register(lambda: _without_raising(shutdown))


def _without_raising(shutdown: Callable[[], None]) -> None:
    # An exception out of a threading exit hook skips the hooks after it and the join of
    # every thread: report it as atexit would, and let the interpreter exit normally.
    try:
        shutdown()
    except Exception as exc:  # noqa: BLE001 - see above
        traceback.print_exc()
        log.error("driver.exit_shutdown_failed", error=repr(exc))
