"""A caller's bidirectional task stream to one worker (the hot path).

Tasks are queued and sent in batches (whatever accumulated while the previous
batch was on the wire); results come back in batches on a reader thread.
One stream per (caller, worker) keeps actor calls in submission order.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator

import grpc

from tracedray.core import rpc
from tracedray.core.address import Address
from tracedray.v1 import common_pb2, core_worker_pb2, core_worker_pb2_grpc

_CLOSE = object()


class WorkerConnection:
    def __init__(self, address: Address,
                 on_results: Callable[[WorkerConnection, list[common_pb2.TaskResult]], None],
                 on_broken: Callable[[WorkerConnection, BaseException | None], None]) -> None:
        self.address = address
        self._on_results = on_results
        self._on_broken = on_broken
        self._outbox: queue.SimpleQueue[object] = queue.SimpleQueue()
        self._closed = False
        self.broken = False
        stub = core_worker_pb2_grpc.CoreWorkerServiceStub(rpc.channel(address.target))
        self._call = stub.PushTasks(self._requests())
        self._reader = threading.Thread(target=self._read, daemon=True,
                                        name=f"tracedray-stream-{address.port}")
        self._reader.start()

    def send(self, spec: common_pb2.TaskSpec) -> None:
        self._outbox.put(spec)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._outbox.put(_CLOSE)

    def _requests(self) -> Iterator[core_worker_pb2.TaskBatch]:
        outbox = self._outbox
        while True:
            item = outbox.get()
            if item is _CLOSE:
                return
            batch = core_worker_pb2.TaskBatch()
            batch.tasks.append(item)
            while len(batch.tasks) < 256:
                try:
                    item = outbox.get_nowait()
                except queue.Empty:
                    break
                if item is _CLOSE:
                    yield batch
                    return
                batch.tasks.append(item)
            yield batch

    def _read(self) -> None:
        error: BaseException | None = None
        try:
            for batch in self._call:
                self._on_results(self, list(batch.results))
        except grpc.RpcError as exc:
            error = exc
        except Exception as exc:  # noqa: BLE001 - a bug in a callback must not kill silently
            error = exc
        if not self._closed or error is not None:
            self.broken = True
            self._on_broken(self, error)
