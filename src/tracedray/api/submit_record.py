"""What a submission leaves to be recorded off the caller's thread: its ``task.submit``
line and the end of its ``task.submit`` span.

``.remote()`` takes what only it can know (the line's time and task context, the span's
end) and leaves the rest to the submit inbox's thread, which calls ``write()`` before
it hands the task to a submitter: building the line's fields, rendering and appending
it, and packing the span's record cost the caller ~1.5 µs of each ``.remote()``. The
line and the span are the same as when the caller wrote them.
"""

from __future__ import annotations

import contextlib
from typing import Any

from tracedray import logs


class SubmitRecord:
    """A submission's ``task.submit`` line (None when INFO lines are not written) and span.

    ``ended_at``: when the span ended (ns since the epoch), set by whoever hands the
    task over; None leaves the span to its owner (an actor's creation ends it once the
    GCS has answered)."""

    __slots__ = ("_span", "_line", "_task_id", "_function", "_call_site", "_trace_ids",
                 "ended_at")

    def __init__(self, span: Any, line: logs.LaterLine | None, task_id: bytes, function: str,
                 call_site: str, trace_ids: tuple[str, str] | None) -> None:
        self._span = span
        self._line = line
        self._task_id = task_id
        self._function = function
        self._call_site = call_site
        self._trace_ids = trace_ids  # (trace id, span id) in hex, as the line names them
        self.ended_at: int | None = None

    def write(self) -> None:
        """Write the line, and end the span at ``ended_at`` if set. Never raises."""
        line = self._line
        if line is not None:
            ids = self._trace_ids
            if ids is None:
                line.write(task_id=self._task_id.hex(), function=self._function,
                           call_site=self._call_site, attempt=0)
            else:
                line.write(task_id=self._task_id.hex(), function=self._function,
                           call_site=self._call_site, attempt=0, trace_id=ids[0],
                           span_id=ids[1])
        if self.ended_at is not None:
            with contextlib.suppress(Exception):  # telemetry never breaks a submission
                self._span.end(end_time=self.ended_at)
