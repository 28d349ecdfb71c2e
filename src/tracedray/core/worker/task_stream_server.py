"""The worker's end of task streams: accept callers, run their tasks, write results.

Each caller's connection has one reader thread that hands every task to
``push(spec, reply)`` (the ``TaskExecutor``); a single-threaded actor runs its
call right there. ``reply`` writes the result frame itself, from whichever
thread finished the task, under the connection's lock. A connection's first frame
must be the handshake with the cluster's token; one without it is closed before
any task is read (``auth.refused``, counted in ``refused_total``). When a caller ends its
stream the worker answers what it still runs, then closes its side. A caller
that is gone loses its results (the send fails; its own reader has reported).
Wire format: ``task_stream.py``.
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
from tracedray.core.protocol import task_stream

log = logs.get_logger(__name__)
Reply = Callable[[common_pb2.TaskResult], None]
Push = Callable[[common_pb2.TaskSpec, Reply], None]
# A caller sends its handshake right after connecting; this bounds one that does not.
HANDSHAKE_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class TaskStreamStatistics:
    port: int
    open_connections: int
    accepted_total: int
    tasks_received: int
    results_sent: int
    results_dropped: int  # the caller had gone
    refused_total: int  # connections closed for a missing or wrong handshake


class _Peer:
    """One caller's connection. Its lock (a condition) guards the fields below, the
    socket's write side and its close."""

    def __init__(self, sock: socket.socket, name: str) -> None:
        self.sock = sock
        self.name = name
        self.lock = threading.Condition(threading.Lock())
        self.outstanding = 0  # tasks received and not answered yet
        self.input_ended = False  # the caller will send nothing more
        self.closed = False
        # While the reader holds more tasks already received (the caller pipelines),
        # results go to the outbox and a writer thread sends them in batches: fewer,
        # larger writes for both ends. A lone call's result is written at once.
        self.more_input = False
        self.outbox: list[bytes] = []
        self.writing = False  # the writer took frames from the outbox and sends them
        self.writer: threading.Thread | None = None

    def close_locked(self) -> None:
        if not self.closed:
            self.closed = True
            with contextlib.suppress(OSError):
                task_stream.shutdown(self.sock, socket.SHUT_RDWR)
            self.sock.close()
            self.outbox.clear()
            self.lock.notify_all()

    def finished_locked(self) -> bool:
        """The caller ended its stream and every result it is owed was written."""
        return (self.input_ended and self.outstanding == 0 and not self.outbox
                and not self.writing)


class TaskStreamServer:
    def __init__(self, host: str, push: Push) -> None:
        self._push = push
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._listener = socket.create_server((host, 0), family=family, backlog=128)
        self.port: int = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._peers: set[_Peer] = set()
        self._stopped = False
        self._accepted = self._tasks = self._sent = self._dropped = self._refused = 0
        threading.Thread(target=self._accept_loop, daemon=True,
                         name=f"tracedray-task-stream-{self.port}").start()

    def stop(self) -> None:
        """Stop accepting and end every connection (callers see their streams break)."""
        with self._lock:
            if self._stopped:
                return
            self._stopped = True
            peers = list(self._peers)
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)  # wakes accept()
        self._listener.close()
        for peer in peers:
            with peer.lock:
                self._close_locked(peer)

    def statistics(self) -> TaskStreamStatistics:
        with self._lock:
            return TaskStreamStatistics(self.port, len(self._peers), self._accepted, self._tasks,
                                        self._sent, self._dropped, self._refused)

    def _accept_loop(self) -> None:
        while True:
            try:
                sock, (ip, port, *_) = self._listener.accept()
            except OSError:
                if self._stopped:
                    return
                log.error("task_stream.accept_failed", port=self.port)
                continue
            try:
                task_stream.tune(sock)
            except OSError:  # the caller is already gone
                sock.close()
                continue
            peer = _Peer(sock, f"{ip}:{port}")
            with self._lock:
                if self._stopped:
                    sock.close()
                    return
                self._peers.add(peer)
                self._accepted += 1
            threading.Thread(target=self._serve, args=(peer,), daemon=True,
                             name=f"tracedray-task-stream-{port}").start()

    # --- the handshake
    def _admit(self, peer: _Peer) -> bool:
        """TLS if configured, then the handshake; a peer that fails either is closed,
        unanswered."""
        wrapped = task_stream.wrap_server(peer.sock, HANDSHAKE_TIMEOUT_S)
        if wrapped is not None:
            with peer.lock:
                if peer.closed:  # the server stopped meanwhile
                    wrapped.close()
                    return False
                peer.sock = wrapped
        payload = task_stream.read_handshake(peer.sock, HANDSHAKE_TIMEOUT_S) \
            if wrapped is not None else None
        token = auth.handshake_token(payload) if payload is not None else None
        if token is not None and auth.current().accepts(token):
            return True
        total = auth.count_refusal("stream")
        with self._lock:
            self._refused += 1
        if auth.should_log_refusal(total):
            log.warning("auth.refused", peer=peer.name, method="task_stream",
                        refused_total=total,
                        reason="no handshake" if token is None else "wrong token")
        with peer.lock:
            self._close_locked(peer)
        return False

    # --- reading tasks
    def _serve(self, peer: _Peer) -> None:
        if not self._admit(peer):
            return
        reply = self._replier(peer)
        parse = core_worker_pb2.TaskBatch.FromString
        reader = task_stream.FrameReader(peer.sock)
        error = ""
        try:
            while True:
                payloads = reader.read()
                if payloads is None:
                    break
                tasks = [spec for payload in payloads for spec in parse(payload).tasks]
                with peer.lock:
                    peer.outstanding += len(tasks)
                with self._lock:
                    self._tasks += len(tasks)
                last = len(tasks) - 1
                for index, spec in enumerate(tasks):
                    peer.more_input = index < last
                    self._push(spec, reply)
                peer.more_input = False
        except (OSError, task_stream.ProtocolError) as exc:
            error = str(exc)
        except Exception as exc:  # noqa: BLE001 - a malformed payload, or a bug in push
            error = repr(exc)
            log.error("task_stream.read_failed", caller=peer.name, error=error)
        with peer.lock:
            peer.input_ended = True
            peer.more_input = False
            # Results still owed are written as their tasks finish, unless the stream failed.
            if error or peer.finished_locked():
                self._close_locked(peer)
        log.debug("task_stream.end", caller=peer.name, error=error)

    def _close_locked(self, peer: _Peer) -> None:
        """Close ``peer`` (its lock held; this server's lock is only ever taken inside it)."""
        unsent = 0 if peer.closed else len(peer.outbox)
        peer.close_locked()
        with self._lock:
            self._peers.discard(peer)
            self._dropped += unsent

    # --- writing results
    def _replier(self, peer: _Peer) -> Reply:
        def reply(result: common_pb2.TaskResult) -> None:
            data = task_stream.one_item_frame(result)
            with peer.lock:
                peer.outstanding -= 1
                if peer.closed:
                    sent = False
                elif peer.more_input or peer.outbox or peer.writing:
                    peer.outbox.append(data)  # counted when written
                    if peer.writer is None:
                        peer.writer = threading.Thread(
                            target=self._write_loop, args=(peer,), daemon=True,
                            name=f"tracedray-task-stream-writer-{peer.name}")
                        peer.writer.start()
                    peer.lock.notify_all()
                    return
                else:
                    sent = self._write_locked(peer, data)
                    if peer.finished_locked():
                        self._close_locked(peer)
            with self._lock:
                self._sent += sent
                self._dropped += not sent

        return reply

    def _write_locked(self, peer: _Peer, data: bytes) -> bool:
        try:
            peer.sock.sendall(data)
            return True
        except OSError:
            self._close_locked(peer)  # the caller died; its own reader reports that
            return False

    def _write_loop(self, peer: _Peer) -> None:
        while True:
            with peer.lock:
                while not peer.outbox and not peer.closed:
                    peer.lock.wait()
                if peer.closed:
                    return
                frames, peer.outbox = peer.outbox, []
                peer.writing = True
            # Outside the lock: the tasks' threads keep adding results meanwhile.
            try:
                peer.sock.sendall(frames[0] if len(frames) == 1 else b"".join(frames))
                sent = True
            except OSError:
                sent = False
            with peer.lock:
                peer.writing = False
                if not sent or peer.finished_locked():
                    self._close_locked(peer)
            with self._lock:
                if sent:
                    self._sent += len(frames)
                else:
                    self._dropped += len(frames)
