"""A stop request set by a signal handler (SIGTERM) and read by a polling loop."""

from __future__ import annotations

import signal
from types import FrameType, TracebackType


class StopRequest:
    """``with StopRequest() as stop: while not stop.requested: ...`` (SIGTERM sets it).

    A plain attribute, not a ``threading.Event``: a handler runs in the main thread
    between two bytecodes, possibly while that thread holds the Event's own lock
    (inside ``Event.wait``), and ``Event.set`` would then wait for it forever. The
    loop sleeps instead; a signal cuts the sleep short.
    """

    def __init__(self) -> None:
        self.requested = False
        self._previous: object = None

    def handle(self, signum: int, frame: FrameType | None) -> None:
        self.requested = True

    def __enter__(self) -> StopRequest:
        self._previous = signal.signal(signal.SIGTERM, self.handle)
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        signal.signal(signal.SIGTERM, self._previous)  # type: ignore[arg-type]
