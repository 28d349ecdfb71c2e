"""The process's current core worker.

The Ray API is process-global (``ray.get`` takes no handle), so exactly one place
holds the connection: set by ``init`` (driver) or the worker entry point, cleared
by ``shutdown``. Everything else receives the worker explicitly.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tracedray.core.worker.core_worker import CoreWorker

_current: CoreWorker | None = None
_lock = threading.RLock()


def current() -> CoreWorker | None:
    return _current


def set_current(worker: CoreWorker | None) -> None:
    global _current
    with _lock:
        _current = worker


def lock() -> threading.RLock:
    return _lock
