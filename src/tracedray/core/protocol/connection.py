"""A caller's task stream to one worker (the hot path): tasks out, results back.

One TCP connection per (caller, worker) keeps actor calls in submission order
(the wire format and why it is not gRPC: ``task_stream.py``).

Sending never blocks the caller, who usually holds its submitter's lock. When
the stream is idle (every result back, nothing pending: the round-trip case,
where a thread handoff would cost the most) the calling thread writes the frame
itself with a non-blocking ``send``. So does ``send_many`` whenever nothing is
pending: its tasks already go in one write (a batch of results makes room for the
next tasks, which the reader sends), and handing that write to the writer thread cost
the driver a wake-up and GIL hand-offs per batch. Otherwise the frame joins a pending
buffer that a writer thread, started on first need, drains in order and in batches:
while results are still due the worker is busy with the earlier tasks anyway,
and one write for many frames sent one by one costs both ends less than one each.
Bytes the kernel does not take yet go to that buffer too. Connecting happens on the
reader thread, with frames sent before it completes waiting in the buffer.

One reader thread reads result frames and calls ``on_results``; when the stream
ends it calls ``on_broken`` exactly once, unless ``close()`` was called and the
worker ended the stream cleanly. Socket errors reach ``on_broken`` as
``RaySystemError`` naming the worker.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass

from tracedray import logs
from tracedray._proto.v1 import common_pb2, core_worker_pb2
from tracedray.core import auth
from tracedray.core.address import Address
from tracedray.core.protocol import task_stream
from tracedray.exceptions import RaySystemError

log = logs.get_logger(__name__)
# A worker on a live host answers or refuses at once; this bounds a vanished host.
CONNECT_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class ConnectionStatistics:
    frames_sent: int
    frames_received: int
    deferred_frames: int  # frames that went through the pending buffer, not sent directly
    pending_bytes: int


class WorkerConnection:
    def __init__(self, address: Address,
                 on_results: Callable[[WorkerConnection, list[common_pb2.TaskResult]], None],
                 on_broken: Callable[[WorkerConnection, BaseException | None], None]) -> None:
        self.address = address
        self.broken = False
        self._on_results = on_results
        self._on_broken = on_broken
        self._cond = threading.Condition(threading.Lock())
        self._sock: socket.socket | None = None  # set once connected
        self._pending: list[bytes | memoryview] = []
        self._pending_bytes = 0
        # While True, frames go to _pending: not connected yet, or older bytes still queued.
        self._deferring = True
        self._writer: threading.Thread | None = None
        self._closed = False
        self._failure: BaseException | None = None  # a send failed: the reader reports it
        self._ended = False  # the reader finished: nothing more is sent
        self._write_shut = False  # the worker was told the stream ends here
        self._frames_sent = self._frames_received = self._deferred = 0
        self._results_received = 0  # written by the reader only
        self._reader = threading.Thread(target=self._run, daemon=True,
                                        name=f"tracedray-stream-{address.task_port}")
        self._reader.start()

    # --- caller side
    def send(self, spec: common_pb2.TaskSpec) -> None:
        self._send(task_stream.one_item_frame(spec), 1, batched=False)

    def send_many(self, specs: list[common_pb2.TaskSpec]) -> None:
        """Send several tasks in one write (frames as ``send`` would send them one by one),
        from this thread unless frames are pending."""
        if specs:
            self._send(b"".join([task_stream.one_item_frame(spec) for spec in specs]),
                       len(specs), batched=True)

    def _send(self, data: bytes, frames: int, *, batched: bool) -> None:
        with self._cond:
            if self._closed or self._ended or self._failure is not None:
                return  # on_broken (or the caller's own close) accounts for the task
            # A lone frame while results are due waits for the writer, to share its write.
            results_due = not batched and self._frames_sent > self._results_received
            self._frames_sent += frames
            if self._deferring or results_due:
                self._deferring = True
                self._defer(data)
                if self._sock is not None:  # else _connect sends or hands over the buffer
                    self._start_writer()
                return
            sock = self._sock
            assert sock is not None  # not deferring means connected
            sent = self._try_send(sock, data)
            if sent is None:
                return
            if sent < len(data):
                self._deferring = True
                self._defer(memoryview(data)[sent:])
                self._start_writer()


    def _try_send(self, sock: socket.socket, data: bytes) -> int | None:
        """A non-blocking send (lock held): bytes the kernel took; None after a failure,
        which ``_fail`` has recorded for the reader to report."""
        if task_stream.is_tls(sock):
            return 0  # no non-blocking send in TLS: the writer thread sends it all
        try:
            return sock.send(data, socket.MSG_DONTWAIT)
        except BlockingIOError:
            return 0
        except OSError as exc:
            self._fail(exc)
            return None
    def close(self) -> None:
        """No more tasks: the worker sees the end of the stream after what was sent,
        answers what it is running, then ends its side; ``on_broken`` is not called."""
        with self._cond:
            if self._closed:
                return
            self._closed = True
            if not self._deferring and self._sock is not None and self._alive():
                self._shutdown_write()
            self._cond.notify_all()  # a writer shuts the write side once drained

    def statistics(self) -> ConnectionStatistics:
        with self._cond:
            return ConnectionStatistics(self._frames_sent, self._frames_received,
                                        self._deferred, self._pending_bytes)

    # --- pending buffer and writer thread (all under self._cond)
    def _defer(self, data: bytes | memoryview) -> None:
        self._pending.append(data)
        self._pending_bytes += len(data)
        self._deferred += 1
        self._cond.notify_all()

    def _start_writer(self) -> None:
        if self._writer is None:
            self._writer = threading.Thread(target=self._write_loop, daemon=True,
                                            name=f"tracedray-stream-writer-{self.address.task_port}")
            self._writer.start()

    def _fail(self, exc: OSError) -> None:
        """A write failed: wake the reader (it reports on_broken) and any writer."""
        if self._failure is None:
            self._failure = self._translate(exc)
        if self._sock is not None:
            with contextlib.suppress(OSError):
                task_stream.shutdown(self._sock, socket.SHUT_RDWR)
        self._cond.notify_all()

    def _shutdown_write(self) -> None:
        assert self._sock is not None
        if self._write_shut:
            return
        self._write_shut = True
        try:
            task_stream.shutdown(self._sock, socket.SHUT_WR)
        except OSError as exc:
            self._fail(exc)

    def _write_loop(self) -> None:
        sock = self._sock
        assert sock is not None
        while True:
            with self._cond:
                while not self._pending and not self._closed and self._alive():
                    self._cond.wait()
                if not self._alive():
                    return
                if not self._pending:  # closed with nothing left to write
                    self._deferring = False
                    self._shutdown_write()
                    return
                chunks, self._pending, self._pending_bytes = self._pending, [], 0
            try:
                sock.sendall(chunks[0] if len(chunks) == 1 else b"".join(chunks))
            except OSError as exc:
                with self._cond:
                    self._fail(exc)
                return
            with self._cond:
                if not self._pending:
                    self._deferring = False
                    if self._closed:
                        self._shutdown_write()
                        return

    def _alive(self) -> bool:
        return self._failure is None and not self._ended

    # --- reader thread: connect, then read results until the stream ends
    def _run(self) -> None:
        error: BaseException | None = None
        sock = self._connect()
        if isinstance(sock, BaseException):
            error = sock
        else:
            try:
                self._read(sock)
            except task_stream.ProtocolError as exc:
                error = exc
            except OSError as exc:
                error = self._translate(exc)
            except Exception as exc:  # noqa: BLE001 - a bug in a callback must not kill silently
                error = exc
        with self._cond:
            self._ended = True
            error = self._failure or error
            closed = self._closed
            self._cond.notify_all()
            if self._sock is not None:
                with contextlib.suppress(OSError):
                    task_stream.shutdown(self._sock, socket.SHUT_RDWR)
                self._sock.close()
        if error is None and not closed:
            error = RaySystemError(f"{self._describe()} ended the task stream: the worker "
                                   "process exited")
        log.debug("task_stream.end", worker=self._describe(), error=str(error or ""),
                  frames_sent=self._frames_sent, frames_received=self._frames_received)
        if error is not None or not closed:
            self.broken = True
            self._on_broken(self, error)

    def _connect(self) -> socket.socket | BaseException:
        address = self.address
        if not address.task_port:
            return RaySystemError(f"{self._describe()} has no task stream (a driver, or a "
                                  "worker of an older tracedray)")
        try:
            sock = socket.create_connection((address.ip, address.task_port),
                                            timeout=CONNECT_TIMEOUT_S)
        except OSError as exc:
            return self._translate(exc)
        try:
            task_stream.tune(sock)
            sock = task_stream.wrap_client(sock, address.ip)  # under CONNECT_TIMEOUT_S
            sock.settimeout(None)
            # First, before any task: the worker reads nothing else until it has it.
            token = auth.client_token(f"{address.ip}:{address.task_port}").token
            sock.sendall(task_stream.handshake_frame(token))
        except OSError as exc:  # ssl.SSLError too: a certificate the worker refused
            sock.close()
            return self._translate(exc)
        except ValueError as exc:  # a TRACEDRAY_TLS_* setting that is wrong (ConfigError)
            sock.close()
            return RaySystemError(f"task stream to {self._describe()}: {exc}")
        with self._cond:
            self._sock = sock
            if self._pending:
                # Frames sent while connecting: try them now, the writer takes the rest.
                data = b"".join(self._pending)
                sent = self._try_send(sock, data)
                if sent is None:
                    return sock
                self._pending = [memoryview(data)[sent:]] if sent < len(data) else []
                self._pending_bytes = len(data) - sent
            if self._pending:
                self._start_writer()
            else:
                self._deferring = False
                if self._closed:
                    self._shutdown_write()
        return sock

    def _read(self, sock: socket.socket) -> None:
        reader = task_stream.FrameReader(sock)
        parse = core_worker_pb2.ResultBatch.FromString
        while True:
            payloads = reader.read()
            if payloads is None:
                return
            self._frames_received += len(payloads)
            if len(payloads) == 1:
                results = list(parse(payloads[0]).results)
            else:
                results = [r for p in payloads for r in parse(p).results]
            self._results_received += len(results)
            self._on_results(self, results)

    def _describe(self) -> str:
        a = self.address
        return f"worker {a.worker_id[:12] or '?'} (pid {a.pid}) at {a.ip}:{a.task_port}"

    def _translate(self, exc: OSError) -> RaySystemError:
        error = RaySystemError(f"task stream to {self._describe()}: "
                               f"{task_stream.describe_os_error(exc)}")
        error.__cause__ = exc
        return error
