"""The core worker's gRPC service: objects it owns for borrowers, reference updates,
cancels, exit requests, reference tables, printed lines (a driver), stack dumps."""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING, Any

import grpc

from tracedray import config, logs
from tracedray._proto.v1 import common_pb2, core_worker_pb2, core_worker_pb2_grpc
from tracedray.core.worker import stack_dump

if TYPE_CHECKING:
    from tracedray.core.worker.core_worker import CoreWorker

log = logs.get_logger(__name__)


def _parse_delay(text: str) -> float:
    value = float(text)
    if not 0.0 <= value <= 60.0:
        raise ValueError(f"expected seconds between 0 and 60, got {text!r}")
    return value


TESTING_BORROW_DELAY_S: config.Variable[float] = config.Variable(
    "TRACEDRAY_TESTING_BORROW_DELAY_S",
    _parse_delay,
    lambda: 0.0,
    "For tests only: seconds an owner waits before applying each borrow registration (+1 "
    "reference update) it receives, as a slow network or a busy owner would, so that tests "
    "can show no release overtakes the borrow it follows. Never set it in production.",
)


class CoreWorkerServicer(core_worker_pb2_grpc.CoreWorkerServiceServicer):
    def __init__(self, worker: CoreWorker) -> None:
        self._w = worker
        self._testing_borrow_delay_s = TESTING_BORROW_DELAY_S.get()

    def GetObject(self, request: Any, context: grpc.ServicerContext) -> Any:
        worker = self._w
        object_id = request.object_id
        reply = core_worker_pb2.GetObjectReply
        if not worker.memory_store.contains(object_id) and not worker.references.owns(object_id):
            return reply(status=reply.UNKNOWN)
        timeout = None if request.timeout_s < 0 else request.timeout_s
        ready = worker.memory_store.wait([object_id], 1, timeout)
        value = worker.memory_store.get_if_ready(object_id)
        if not ready or value is None:
            return reply(status=reply.PENDING if worker.references.owns(object_id)
                         else reply.UNKNOWN)
        return reply(status=reply.READY, value=value)

    def UpdateReferences(self, request: Any, context: grpc.ServicerContext) -> Any:
        for update in request.updates:
            log.debug("object.reference_update", object_id=update.object_id.hex(),
                      borrower=update.borrower, delta=update.delta)
            if update.delta > 0 and self._testing_borrow_delay_s:
                time.sleep(self._testing_borrow_delay_s)  # the test hook, see its doc
            self._w.ownership.update_borrower(update.object_id, update.borrower, update.delta)
        return common_pb2.Empty()

    def CancelTask(self, request: Any, context: grpc.ServicerContext) -> Any:
        executor = self._w.executor
        if executor is None:
            return core_worker_pb2.CancelTaskReply(found=False)
        if request.requeue:
            return core_worker_pb2.CancelTaskReply(found=executor.requeue(request.task_id))
        if request.recursive:  # first: a forced cancel ends this process
            self._w.submitter.cancel_children(request.task_id, request.force)
        found = executor.cancel(request.task_id, request.force)
        return core_worker_pb2.CancelTaskReply(found=found)

    def GetReferenceTable(self, request: Any, context: grpc.ServicerContext) -> Any:
        return self._w.reference_table()

    def Exit(self, request: Any, context: grpc.ServicerContext) -> Any:
        self._w.exit_soon(request.reason or "exit requested")
        return common_pb2.Empty()

    def GetExitBlockers(self, request: Any, context: grpc.ServicerContext) -> Any:
        return core_worker_pb2.ExitBlockers(reasons=self._w.exit_blockers())

    def PrintOutput(self, request: Any, context: grpc.ServicerContext) -> Any:
        if config.LOG_TO_DRIVER.get():
            for line in request.lines:
                prefix = f"({line.task_name} pid={line.pid}, ip={line.ip})"
                stream = sys.stderr if line.stream == "stderr" else sys.stdout
                stream.write(f"{prefix} {line.line}\n")
            sys.stdout.flush()
        return common_pb2.Empty()

    def DumpStacks(self, request: Any, context: grpc.ServicerContext) -> Any:
        worker = self._w
        return stack_dump.dump_process(worker.worker_id, worker.mode, worker.job_id,
                                       worker.executor, request)
