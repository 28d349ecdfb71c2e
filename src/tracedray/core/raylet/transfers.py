"""One transfer per object: concurrent pulls of the same object share one stream.

When several tasks on a node need the same remote object at once, the first
``LocateObject`` pulls it and the others wait for that pull's outcome instead of
starting their own (which would copy the bytes again and race to create the
same file in the store).

An object freed here while its transfer is under way (its owner let go of it, or is
gone, and the raylet that served the pull passed the free on) finds nothing to free
yet: the transfer is marked, and the copy it brings goes as soon as it is stored
(``object_frees.ObjectFrees.after_pull``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field


@dataclass
class _Transfer:
    done: threading.Event = field(default_factory=threading.Event)
    error: BaseException | None = None
    waiters: int = 0
    freed: str | None = None  # why the object was freed while this transfer was under way


@dataclass(frozen=True)
class TransferStatistics:
    in_progress: int
    started_total: int
    shared_total: int  # pulls that joined a transfer already in progress
    failed_total: int


class TransferTable:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._inflight: dict[str, _Transfer] = {}
        self._started = self._shared = self._failed = 0

    def run(self, key: str, pull: Callable[[], None]) -> bool:
        """Run ``pull`` unless one for ``key`` is running; then wait for that one.

        Returns whether this call joined another's transfer. A failed transfer raises
        its error in every caller that waited for it.
        """
        with self._lock:
            transfer = self._inflight.get(key)
            joined = transfer is not None
            if transfer is None:
                transfer = self._inflight[key] = _Transfer()
                self._started += 1
            else:
                transfer.waiters += 1
                self._shared += 1
        if joined:
            transfer.done.wait()
            if transfer.error is not None:
                raise transfer.error
            return True
        try:
            pull()
        except BaseException as exc:
            transfer.error = exc
            with self._lock:
                self._failed += 1
            raise
        finally:
            with self._lock:
                del self._inflight[key]
            transfer.done.set()
        return False

    def mark_freed(self, keys: Iterable[str], reason: str) -> None:
        """The objects ``keys`` were freed here: a transfer of one under way brings a
        copy that must go too."""
        with self._lock:
            for key in keys:
                transfer = self._inflight.get(key)
                if transfer is not None:
                    transfer.freed = reason

    def freed_during(self, key: str) -> str | None:
        """Why the object of the transfer under way for ``key`` was freed since it began;
        None if it was not (or no transfer of it is under way)."""
        with self._lock:
            transfer = self._inflight.get(key)
            return transfer.freed if transfer is not None else None

    def statistics(self) -> TransferStatistics:
        with self._lock:
            return TransferStatistics(len(self._inflight), self._started, self._shared,
                                      self._failed)

    def __repr__(self) -> str:
        s = self.statistics()
        return f"<TransferTable in_progress={s.in_progress} shared={s.shared_total}>"
