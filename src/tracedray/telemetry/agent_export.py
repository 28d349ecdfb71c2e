"""OTLP export from the session files, by the node's telemetry agent.

Every span of every process ends up as a line in ``traces/<component>-<pid>.jsonl``
(the agent converts the spools of processes that were SIGKILLed too), and every log
record as a line in ``logs/<component>-<pid>.jsonl``. The agent sends those lines to
the OTLP endpoint, so what the endpoint gets is what the files hold, whatever became
of the process that recorded them, and no process pays for export on its way out.

A rotated part is exported like the file it was (rotation moves its cursor with it:
telemetry/rotation_io.py), compressed or not. Per file and destination, an **export
cursor** says how many bytes of the file were
exported: ``<session>/export/<destination>/<signal>/<file name>.offset`` (20 digits).
A batch is at most MAX_BATCH_BYTES of complete lines from the cursor on (a line is
only exported once its newline is written; a mapped log file's NUL tail is not
data). The cursor moves past a batch once the endpoint took it, or refused it for
good, and is written at once: an agent that restarts resumes there, so it repeats
at most the batch it was sending. Agents that share a session folder (several nodes
on one machine) take a file's cursor with ``flock`` for the batch, so one file's
lines go out once.

While the endpoint is down (connection refused, timeout, UNAVAILABLE, HTTP 503) the
exporter waits, doubling the wait from INITIAL_BACKOFF_S up to MAX_BACKOFF_S, and then
resumes from the cursors: nothing is dropped, and memory holds one batch at a time
whatever the backlog. It drops only what the endpoint refuses for good (a 400, an
INVALID_ARGUMENT, the rejected part of a partial success) and lines that are not
JSON, and counts them.

An exporting agent holds ``export/<destination>/agent.lock`` (shared) for its whole
life: a driver that finds it unheld knows no agent on this machine exports its files
to its destination, and starts one (core/raylet/telemetry_agent.py).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import random
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from tracedray.exceptions import SessionFileCorruptError
from tracedray.telemetry import otlp_requests
from tracedray.telemetry.export_config import EXPORT_DIR, LOGS, ExportConfig, OtlpTarget
from tracedray.telemetry.line_file import LineFile, file_size, follow_rotations, line_files
from tracedray.telemetry.otlp_transport import Outcome, SendResult, Transport
from tracedray.telemetry.trace_index import pid_of

MAX_BATCH_BYTES = 1 << 20  # one request's JSON lines; the most a batch holds in memory
INITIAL_BACKOFF_S = 0.5
MAX_BACKOFF_S = 30.0
WARNING_INTERVAL_S = 60.0
CURSOR_WIDTH = 20
LOCK_NAME = "agent.lock"

Warn = Callable[[str, Mapping[str, object]], None]


@dataclass(frozen=True)
class ExportStatistics:
    destinations: tuple[str, ...]  # "traces grpc http://host:4317", ...
    spans_exported: int
    logs_exported: int
    failed_attempts: int  # requests that failed and will be sent again
    dropped: int  # items refused for good, and lines that were not JSON
    pending_bytes: int  # bytes of lines not exported yet, as of the last round
    endpoint_down: bool  # the last request failed and waits to be sent again
    last_error: str


def destination_key(target: OtlpTarget) -> str:
    """A short, stable folder name for one destination (protocol and endpoint)."""
    digest = hashlib.sha1(f"{target.protocol} {target.endpoint}".encode()).hexdigest()
    return digest[:12]


def destination_dir(session_dir: Path, target: OtlpTarget) -> Path:
    return session_dir / EXPORT_DIR / destination_key(target)


def agent_serves(session_dir: Path, target: OtlpTarget) -> bool:
    """Whether an agent on this machine exports ``session_dir``'s files to ``target``
    now (it holds the destination's lock). Never raises."""
    path = destination_dir(session_dir, target) / LOCK_NAME
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return True  # held
    finally:
        os.close(fd)  # releases ours if we got it
    return False


def complete_lines(data: bytes) -> bytes:
    """The complete lines at the start of ``data``: up to the last newline before any
    NUL (a mapped file's reserved tail)."""
    nul = data.find(b"\0")
    if nul >= 0:
        data = data[:nul]
    end = data.rfind(b"\n")
    return data[:end + 1] if end >= 0 else b""


class _Cursor:
    """One file's export cursor, locked (``flock``) while held."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        raw = os.pread(fd, CURSOR_WIDTH, 0)
        self.offset = int(raw) if raw.strip().isdigit() else 0

    def advance(self, offset: int) -> None:
        os.pwrite(self.fd, f"{offset:0{CURSOR_WIDTH}d}\n".encode(), 0)
        self.offset = offset


@contextlib.contextmanager
def _held_cursor(path: Path) -> Iterator[_Cursor | None]:
    """The cursor at ``path``, locked; None when another agent holds it."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield None
            return
        yield _Cursor(fd)
    finally:
        os.close(fd)


class _Stream:
    """One signal's files (``traces`` or ``logs``) going to one destination."""

    def __init__(self, session_dir: Path, target: OtlpTarget, only_pid: int,
                 service_name: str) -> None:
        self.target = target
        self.folder = session_dir / ("logs" if target.signal == LOGS else "traces")
        self.cursor_dir = destination_dir(session_dir, target) / target.signal
        self.transport = Transport(target)
        self.only_pid = only_pid
        self.service_name = service_name
        self.known: dict[str, int] = {}  # file name -> exported bytes, as last seen
        self._compressed_sizes: dict[str, int] = {}  # a compressed part never changes

    def files(self) -> list[tuple[Path, int]]:
        """(file, size) of each file with bytes beyond its cursor as last seen: current
        files and rotated parts (a part compressed before it was all exported is read
        uncompressed, by its plain name: line_file.py), a file's parts first."""
        found = []
        files = line_files(self.folder)
        # A file that rotated: what was seen of it was seen of its part (its cursor
        # file moved too: rotation_io.py); the new current file starts from its own.
        follow_rotations(self.known, files)
        for path in files:
            if self.only_pid and pid_of(path.name) != self.only_pid:
                continue
            try:
                size = path.stat().st_size
            except FileNotFoundError:
                size = self._compressed_size(path)
            except OSError:
                continue
            if size > self.known.get(path.name, -1):
                found.append((path, size))
        return found

    def _compressed_size(self, path: Path) -> int:
        size = self._compressed_sizes.get(path.name)
        if size is None:
            try:
                size = file_size(path) or 0
            except SessionFileCorruptError:
                size = 0  # nothing of it can be read: nothing to export
            self._compressed_sizes[path.name] = size
        return size

    def batch(self, lines: bytes) -> otlp_requests.Batch:
        items = lines.splitlines()
        if self.target.signal == LOGS:
            return otlp_requests.logs_batch(items, self.service_name)
        return otlp_requests.traces_batch(items)


class SessionExporter:
    """Sends a session folder's lines to the configured OTLP destinations.

    ``export_once`` does one round; :class:`ExportLoop` runs rounds on a thread.
    ``only_pid`` limits it to one process's files (a driver's own agent).
    """

    def __init__(self, session_dir: Path, config: ExportConfig, *, warn: Warn,
                 only_pid: int = 0, service_name: str = "tracedray",
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.session_dir = session_dir
        self._warn = warn
        self._clock = clock
        self._streams = [_Stream(session_dir, target, only_pid, service_name)
                         for target in config.otlp_targets]
        self._lock = threading.Lock()
        self._spans = self._logs = self._failed = self._dropped = 0
        self._pending_bytes = 0
        self._last_error = ""
        self._failures_in_row = 0
        self._retry_at = 0.0
        self._last_warning = -WARNING_INTERVAL_S
        self._lock_fds: list[int] = []
        for stream in self._streams:
            stream.cursor_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
            with contextlib.suppress(OSError):
                fd = os.open(stream.cursor_dir.parent / LOCK_NAME, os.O_RDONLY | os.O_CREAT,
                             0o600)
                fcntl.flock(fd, fcntl.LOCK_SH)
                self._lock_fds.append(fd)

    # --- rounds
    def waiting_s(self) -> float:
        """How long until the next request may go (0: now); > 0 while backing off."""
        return max(0.0, self._retry_at - self._clock())

    def export_once(self, deadline: float | None = None) -> bool:
        """Send what the files hold beyond their cursors, until ``deadline`` (a clock
        value) or the endpoint fails. True when nothing was left. Never raises."""
        if self.waiting_s() > 0:
            return False
        pending = 0
        for stream in self._streams:
            for path, size in stream.files():
                # Past the deadline, or the endpoint just failed: count what is left.
                if (deadline is not None and self._clock() >= deadline
                        or self.waiting_s() > 0):
                    pending += size - max(stream.known.get(path.name, 0), 0)
                    continue
                try:
                    pending += self._export_file(stream, path, size, deadline)
                except OSError as exc:
                    self._note_error(f"{path.name}: {exc}")
                    pending += size - max(stream.known.get(path.name, 0), 0)
        with self._lock:
            self._pending_bytes = pending
        return pending == 0

    def _export_file(self, stream: _Stream, path: Path, size: int,
                     deadline: float | None) -> int:
        """Export ``path`` from its cursor on; the bytes of data left unexported."""
        with _held_cursor(stream.cursor_dir / f"{path.name}.offset") as cursor:
            if cursor is None:  # another agent is exporting it right now
                return 0
            if cursor.offset > size:  # the file was replaced: start where it ends
                cursor.advance(size)
            try:
                handle = LineFile(path)  # a rotated part may be compressed
            except (FileNotFoundError, SessionFileCorruptError):
                return 0  # dropped by retention, or unreadable: nothing left to send
            try:
                while cursor.offset < size:
                    if deadline is not None and self._clock() >= deadline:
                        break
                    data = complete_lines(handle.read(cursor.offset, MAX_BATCH_BYTES))
                    if not data:
                        if handle.read(cursor.offset, 1) in (b"\0", b""):
                            size = cursor.offset  # a mapped file's reserved tail: no data
                            break
                        # A line longer than a batch, or one not complete yet.
                        data = complete_lines(handle.read(cursor.offset,
                                                          size - cursor.offset))
                        if not data:
                            break
                    if not self._send(stream, data, deadline):
                        break
                    cursor.advance(cursor.offset + len(data))
            except SessionFileCorruptError:
                size = cursor.offset  # the rest of a damaged part cannot be read
            finally:
                handle.close()
            stream.known[path.name] = cursor.offset
            return max(0, size - cursor.offset)

    def _send(self, stream: _Stream, data: bytes, deadline: float | None) -> bool:
        """Send one batch; True when the cursor may move past it."""
        batch = stream.batch(data)
        if batch.unreadable:
            self._count(dropped=len(batch.unreadable))
            self._maybe_warn("telemetry.export_unreadable_lines", {
                "signal": stream.target.signal, "lines": len(batch.unreadable),
                "first": batch.unreadable[0]})
        if not batch.items:
            return True
        timeout = stream.target.timeout_s
        if deadline is not None:
            timeout = max(0.05, min(timeout, deadline - self._clock()))
        result = stream.transport.send(batch, timeout)
        if result.outcome is Outcome.RETRY:
            self._failed_attempt(stream.target, result)
            return False
        self._succeeded(stream.target, batch.items, result)
        return True

    # --- counting and reporting
    def _count(self, *, dropped: int = 0) -> None:
        with self._lock:
            self._dropped += dropped

    def _succeeded(self, target: OtlpTarget, items: int, result: SendResult) -> None:
        recovered = self._failures_in_row > 0
        self._failures_in_row = 0
        self._retry_at = 0.0
        refused = items if result.outcome is Outcome.REJECTED else result.rejected
        with self._lock:
            if target.signal == LOGS:
                self._logs += items - refused
            else:
                self._spans += items - refused
            self._dropped += refused
        if refused:
            self._note_error(result.error)
            self._maybe_warn("telemetry.export_rejected", {
                "endpoint": target.display, "signal": target.signal, "items": refused,
                "error": result.error})
        elif recovered:
            self._warn("telemetry.export_resumed", {"endpoint": target.display})

    def _failed_attempt(self, target: OtlpTarget, result: SendResult) -> None:
        self._failures_in_row += 1
        wait = min(MAX_BACKOFF_S, INITIAL_BACKOFF_S * 2 ** (self._failures_in_row - 1))
        self._retry_at = self._clock() + wait * random.uniform(0.8, 1.2)
        with self._lock:
            self._failed += 1
        self._note_error(result.error)
        self._maybe_warn("telemetry.export_failed", {
            "endpoint": target.display, "signal": target.signal, "error": result.error,
            "retry_in_s": round(wait, 2), "failed_attempts": self._failed})

    def _note_error(self, error: str) -> None:
        with self._lock:
            self._last_error = error

    def _maybe_warn(self, event: str, fields: Mapping[str, object]) -> None:
        now = self._clock()
        if now - self._last_warning >= WARNING_INTERVAL_S:
            self._last_warning = now
            self._warn(event, fields)

    def statistics(self) -> ExportStatistics:
        with self._lock:
            return ExportStatistics(
                tuple(f"{s.target.signal} {s.target.protocol} {s.target.display}"
                      for s in self._streams),
                self._spans, self._logs, self._failed, self._dropped, self._pending_bytes,
                self._failures_in_row > 0, self._last_error)

    def close(self) -> None:
        for stream in self._streams:
            stream.transport.close()
        for fd in self._lock_fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        self._lock_fds.clear()


class ExportLoop:
    """Runs an exporter's rounds on a thread every ``interval_s``, off the agent's
    conversion loop: a slow endpoint never delays a conversion."""

    def __init__(self, exporter: SessionExporter, interval_s: float) -> None:
        self.exporter = exporter
        self.interval_s = interval_s
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread = threading.Thread(target=self._run, name="tracedray-otlp-export",
                                        daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(Exception):  # export must never end the agent
                self.exporter.export_once()
            self._wake.wait(max(self.interval_s, self.exporter.waiting_s()))
            self._wake.clear()

    def drain(self, until: float, clock: Callable[[], float] = time.monotonic) -> bool:
        """Stop the thread, then export until everything went out or ``until`` (a
        ``clock`` value), waiting out backoffs; True when nothing is left."""
        self._stop.set()
        self._wake.set()
        self._thread.join()
        while True:
            if self.exporter.export_once(deadline=until):
                return True
            wait = self.exporter.waiting_s()
            if clock() + max(wait, 0.05) >= until:
                return False
            time.sleep(max(wait, 0.05))
