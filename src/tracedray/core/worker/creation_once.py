"""An actor's creation task runs once in its worker, however often it is pushed.

A GCS that dies while a worker runs ``__init__`` for it leaves the worker to the restarted
GCS, which adopts it and pushes the same creation task again (``gcs/actor_lifecycle.py``).
That push must not run ``__init__`` a second time: it is answered with the first run's
result, at once when that run has ended, or when it ends.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from tracedray._proto.v1 import common_pb2

Respond = Callable[[common_pb2.TaskResult], None]


class CreationOnce:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._task_id = b""
        self._result: common_pb2.TaskResult | None = None
        self._waiting: list[Respond] = []
        self.repeats = 0  # pushes answered with the first run's result

    def admit(self, task_id: bytes, respond: Respond) -> bool:
        """Whether this push of the creation task ``task_id`` runs it; a repeat is
        answered (now, or when the first run ends) instead."""
        with self._lock:
            if not self._task_id or task_id != self._task_id:
                self._task_id, self._result, self._waiting = task_id, None, []
                return True
            self.repeats += 1
            result = self._result
            if result is None:
                self._waiting.append(respond)
                return False
        respond(result)
        return False

    def ended(self, task_id: bytes, result: common_pb2.TaskResult) -> None:
        """The run of creation task ``task_id`` ended with ``result``: the repeats that
        wait for it get it too."""
        with self._lock:
            if task_id != self._task_id:
                return
            self._result, waiting, self._waiting = result, self._waiting, []
        for respond in waiting:
            respond(result)
