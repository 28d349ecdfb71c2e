"""SIGTERM during a follow loop ends it, even when it lands at the worst moment."""

from __future__ import annotations

import os
import signal
import threading
import time

from tracedray.cli.stop_request import StopRequest


def test_sigterm_sets_the_request_and_the_old_handler_comes_back() -> None:
    before = signal.getsignal(signal.SIGTERM)
    with StopRequest() as stop:
        assert not stop.requested
        os.kill(os.getpid(), signal.SIGTERM)
        deadline = time.monotonic() + 5
        while not stop.requested and time.monotonic() < deadline:
            time.sleep(0.01)
        assert stop.requested
    assert signal.getsignal(signal.SIGTERM) == before


def test_many_signals_while_the_main_thread_polls_never_hang() -> None:
    # The old loop (Event.wait in the main thread, Event.set in the handler) could
    # deadlock when a signal landed while the main thread held the Event's lock.
    # Sent to the main thread itself, where the handler runs: a signal the process got
    # could land in another thread and be handled only after the handler is gone.
    main = threading.main_thread().ident
    assert main is not None
    with StopRequest() as stop:
        sender = threading.Thread(target=lambda: [signal.pthread_kill(main, signal.SIGTERM)
                                                  for _ in range(200)], daemon=True)
        sender.start()
        started = time.monotonic()
        while not stop.requested:
            time.sleep(0.001)
        sender.join(10)
        assert time.monotonic() - started < 10
