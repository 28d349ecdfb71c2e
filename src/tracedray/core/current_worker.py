"""The process's core worker, while it has a runtime: what ``ObjectRef`` counts its
references with, and where the process's metrics snapshot goes.

``tracedray.api.runtime.set_current`` sets it with the process's runtime (the runtime's
``worker``: a ``CoreWorker``, or the ``LocalRuntime`` itself); the core reads it here,
below the API layer.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from tracedray.metrics import snapshot as metrics_snapshot

_worker: Any = None


def current() -> Any:
    """The current runtime's worker, or None."""
    return _worker


def set_current(worker: Any) -> None:
    global _worker
    _worker = worker


def _metrics_destination() -> Path | None:
    """The file of a driver's or worker's metrics snapshot: in its node's folder of its
    session (``metrics/snapshot.py``)."""
    worker = _worker
    if worker is None or not getattr(worker, "node_id", ""):
        return None
    component = "driver" if getattr(worker, "mode", "") == "driver" else "worker"
    return metrics_snapshot.snapshot_path(Path(worker.session_dir), worker.node_id, component,
                                          os.getpid())


metrics_snapshot.set_worker_destination(_metrics_destination)
