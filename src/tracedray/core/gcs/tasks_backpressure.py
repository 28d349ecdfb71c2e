"""When a task-event batch flushes the task table itself before it is answered.

The flusher thread keeps the task table's hot set near ``max_hot_entries``; on a
starved machine it falls behind a burst (39,629 hot entries were seen against a bound
of 10,000). Then the batches that grow the hot set flush it themselves, and their
producers wait for that: past twice the bound, and again each time it grew by another
half bound since the last such flush (live entries cannot leave memory, so flushing on
every batch could not shrink a set of running tasks and would only cost a sort each).
"""

from __future__ import annotations

import threading


class Backpressure:
    def __init__(self, max_hot_entries: int) -> None:
        self._high_water = 2 * max_hot_entries
        self._step = max(1, max_hot_entries // 2)
        self._lock = threading.Lock()
        self._after_last: int | None = None  # the hot set the last such flush left
        self.flushes = 0

    def due(self, hot_entries: int) -> bool:
        with self._lock:
            if hot_entries <= self._high_water:
                self._after_last = None
                return False
            return self._after_last is None or hot_entries - self._after_last >= self._step

    def flushed(self, hot_entries_after: int) -> None:
        with self._lock:
            self._after_last = hot_entries_after
            self.flushes += 1
