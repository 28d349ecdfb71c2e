"""Where ``.remote()`` leaves a built task: it is submitted off the caller's thread.

The caller builds and checks the task (arguments pickled, refs made: an error still
raises at ``.remote()``), then ``put``\\ s it here and returns. One thread takes what
has come in as one batch and hands it to the handler (write the deferred ``task.submit``
lines, give the tasks to the submitters, send their frames): in the order put, one
batch at a time. ``drain()`` hands over what is waiting on the calling thread itself
(``get``, ``wait``, ``cancel`` and the process's end call it), so a round trip does not
wait for the inbox thread to wake up. A lone ``put`` (none in the ``LONE_AFTER_S``
before it) is handed over at once by its caller, when no batch is being handed over:
waking the thread for one call would slow a round trip down.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Generic, NamedTuple, Protocol, TypeVar

from tracedray import logs

if TYPE_CHECKING:
    from tracedray.core.worker.pending_task import PendingTask

log = logs.get_logger(__name__)
T = TypeVar("T")
# A put this long after the previous one is a lone call, handed over by its caller: an
# actor round trip or a task per request takes longer; a submission loop puts every
# ~20-40 µs (benchmarks/submission.py).
LONE_AFTER_S = 200e-6


class DeferredRecord(Protocol):
    """What a submission leaves to record off the caller's thread (its ``task.submit``
    line and span: ``api/submit_record.py``), written before the task is submitted."""

    def write(self) -> None: ...


class Submission(NamedTuple):
    """What the core worker's inbox holds: a built task, its deferred ``task.submit``
    record, and for an actor call the retries it allows (None: a normal task)."""
    task: PendingTask
    line: DeferredRecord | None
    actor_retries: int | None


@dataclass(frozen=True)
class InboxStatistics:
    waiting: int  # put, not taken yet
    submitted_total: int  # handed to the handler
    batches_total: int
    largest_batch: int
    drained_by_caller_total: int  # batches a caller's drain() handed over itself
    handler_errors_total: int


class SubmitInbox(Generic[T]):
    def __init__(self, handler: Callable[[list[T]], None], name: str, *,
                 lone_after_s: float = LONE_AFTER_S) -> None:
        self._handler = handler
        self._lone_after_s = lone_after_s
        self._last_put = float("-inf")
        self._name = name
        # put() takes the lock itself, not through the Condition's Python-level
        # __enter__/__exit__ (two frames at every .remote()); it is the same lock.
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        # Held while a batch is taken and handed over: batches never overlap, so
        # items reach the handler in the order they were put.
        self._handing = threading.Lock()
        self._items: list[T] = []
        self._closed = False
        self._thread: threading.Thread | None = None
        self._submitted = self._batches = self._largest = self._by_caller = self._errors = 0

    def put(self, item: T) -> None:
        now = time.monotonic()
        lone, self._last_put = now - self._last_put > self._lone_after_s, now
        if lone and not self._items and self._handing.acquire(blocking=False):
            # A lone call (none just before it, none waiting) goes out at once on this
            # thread, as before the inbox: waking the inbox thread would cost a round
            # trip more than it saves. Calls in quick succession are batched by the thread.
            try:
                with self._cond:
                    batch, self._items = self._items, []
                batch.append(item)
                self._hand(batch, by_caller=True)
            finally:
                self._handing.release()
            return
        with self._lock:
            if self._closed:
                closed = True
            else:
                closed = False
                self._items.append(item)
                if len(self._items) == 1:
                    if self._thread is None:
                        self._thread = threading.Thread(target=self._run, daemon=True,
                                                        name=self._name)
                        self._thread.start()
                    self._cond.notify()
        if closed:  # the process is stopping: hand it over here, as before the inbox
            self._hand_over([item], by_caller=True)

    def drain(self) -> None:
        """Return once everything put before this call is handed over: what waits is
        handed over on this thread, a batch the inbox thread holds is waited for."""
        with self._handing:
            with self._cond:
                batch, self._items = self._items, []
            if batch:
                self._hand(batch, by_caller=True)

    def close(self) -> None:
        """Hand over what is waiting; later puts are handed over by their caller."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=30)
        self.drain()

    def statistics(self) -> InboxStatistics:
        with self._cond:
            return InboxStatistics(len(self._items), self._submitted, self._batches,
                                   self._largest, self._by_caller, self._errors)

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._items and not self._closed:
                    self._cond.wait()
                if not self._items:
                    return
            with self._handing:
                with self._cond:
                    batch, self._items = self._items, []
                if batch:
                    self._hand(batch, by_caller=False)

    def _hand_over(self, batch: list[T], *, by_caller: bool) -> None:
        with self._handing:
            self._hand(batch, by_caller=by_caller)

    def _hand(self, batch: list[T], *, by_caller: bool) -> None:
        try:
            self._handler(batch)
        except Exception as exc:  # noqa: BLE001 - the handler fails its own tasks; keep going
            with self._cond:
                self._errors += 1
            log.error("submit_inbox.handler_failed", error=f"{type(exc).__name__}: {exc}")
        with self._cond:
            self._submitted += len(batch)
            self._batches += 1
            self._largest = max(self._largest, len(batch))
            self._by_caller += by_caller
