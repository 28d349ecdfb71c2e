"""Typed client for a raylet; grpc errors become tracedray errors here."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import grpc

from tracedray._proto.v1 import common_pb2, debug_pb2, raylet_pb2, raylet_pb2_grpc
from tracedray.core import rpc
from tracedray.exceptions import RaySystemError


class LeaseCall:
    """A lease request in flight, which its caller can cancel: the raylet then withdraws
    it (or returns the worker, if it granted one meanwhile) instead of leasing a worker
    to a process that no longer wants it."""

    def __init__(self, future: Any, address: str) -> None:
        self._future = future
        self._address = address

    def result(self, timeout: float | None = None) -> raylet_pb2.LeaseReply:
        """The raylet's reply; waits as long as the request waits in its queue, or at
        most ``timeout`` seconds (the request then still waits: ``cancel`` withdraws it)."""
        with rpc.translate("raylet", self._address):
            try:
                return self._future.result(timeout=timeout)
            except grpc.FutureCancelledError as exc:
                raise RaySystemError(f"the lease request to the raylet at {self._address} "
                                     "was cancelled") from exc
            except grpc.FutureTimeoutError as exc:
                raise RaySystemError(f"the raylet at {self._address} did not answer the "
                                     f"lease request within {timeout}s; it still waits "
                                     "there unless cancelled") from exc

    def cancel(self) -> None:
        self._future.cancel()


class RayletClient:
    def __init__(self, address: str) -> None:
        self.address = address
        self._stub = raylet_pb2_grpc.RayletServiceStub(rpc.channel(address))

    def _call(self, method_name: str, request: object, timeout: float | None = 60.0) -> object:
        method = getattr(self._stub, method_name)
        with rpc.translate("raylet", self.address):
            return method(request, timeout=timeout)

    def start_lease_request(self, request: raylet_pb2.LeaseRequest) -> LeaseCall:
        """Ask for a worker lease; the reply (which may take long: the request waits in
        the raylet's queue) is the call's ``result()``."""
        return LeaseCall(self._stub.RequestWorkerLease.future(request, timeout=None),
                         self.address)

    def return_worker(self, lease_id: str, *, worker_failed: bool = False,
                      disconnect: bool = False, timeout: float = 60.0) -> None:
        self._call("ReturnWorker", raylet_pb2.ReturnWorkerRequest(
            lease_id=lease_id, worker_failed=worker_failed, disconnect=disconnect),
            timeout=timeout)

    def withdraw_lease_requests(self, requester_worker_id: str, timeout: float,
                                request_ids: Sequence[bytes] = ()) -> int:
        """Withdraw the requests of ``requester_worker_id`` named in ``request_ids``, or
        all of them; returns how many were waiting at this raylet."""
        reply = self._call("WithdrawLeaseRequests", raylet_pb2.WithdrawLeaseRequestsRequest(
            requester_worker_id=requester_worker_id, request_ids=request_ids), timeout=timeout)
        return int(reply.withdrawn)  # type: ignore[attr-defined]

    def register_worker(self, worker_id: str, port: int, pid: int, is_driver: bool = False,
                        task_port: int = 0, job_id: bytes = b"") -> raylet_pb2.RegisterWorkerReply:
        return self._call("RegisterWorker", raylet_pb2.RegisterWorkerRequest(  # type: ignore[return-value]
            worker_id=worker_id, port=port, pid=pid, is_driver=is_driver, task_port=task_port,
            job_id=job_id))

    def notify_blocked(self, worker_id: str, blocked: bool) -> None:
        self._call("NotifyBlocked", raylet_pb2.NotifyBlockedRequest(worker_id=worker_id,
                                                                    blocked=blocked))

    def seal_object(self, request: raylet_pb2.SealObjectRequest) -> raylet_pb2.SealObjectReply:
        return self._call("SealObject", request)  # type: ignore[return-value]

    def locate_object(self, request: raylet_pb2.LocateObjectRequest
                      ) -> raylet_pb2.LocateObjectReply:
        return self._call("LocateObject", request, timeout=600.0)  # type: ignore[return-value]

    def free_objects(self, object_ids: list[bytes], *, reason: str = "",
                     timeout: float = 60.0) -> None:
        """Free the objects there (and the copies pulled from there); ``reason``: why,
        empty for "released"."""
        self._call("FreeObjects", raylet_pb2.FreeObjectsRequest(object_ids=object_ids,
                                                                reason=reason), timeout=timeout)

    def owner_exiting(self, owner: common_pb2.Address, timeout: float) -> None:
        """``owner`` shuts down: every object it owns there goes."""
        self._call("OwnerExiting", raylet_pb2.OwnerExitingRequest(owner=owner), timeout=timeout)

    def pull_object(self, object_id: bytes, to_node_id: str,
                    to_raylet: common_pb2.Address | None = None, *, data_path: bool = False
                    ) -> Iterator[raylet_pb2.ObjectChunk]:
        """The object's bytes in a stream; with ``data_path``, a holder that serves the
        data path answers with one chunk naming its port instead (object_data.py)."""
        with rpc.translate("raylet", self.address):
            yield from self._stub.PullObject(
                raylet_pb2.PullObjectRequest(object_id=object_id, to_node_id=to_node_id,
                                             to_raylet=to_raylet, data_path=data_path),
                timeout=600.0)

    def get_worker_exit(self, worker_id: str, timeout_s: float) -> raylet_pb2.WorkerExitInfo:
        return self._call("GetWorkerExit", raylet_pb2.GetWorkerExitRequest(  # type: ignore[return-value]
            worker_id=worker_id, timeout_s=timeout_s), timeout=timeout_s + 10)

    def node_stats(self, *, include_objects: bool = False, include_references: bool = False,
                   timeout: float = 60.0) -> raylet_pb2.NodeStats:
        return self._call("GetNodeStats", raylet_pb2.GetNodeStatsRequest(  # type: ignore[return-value]
            include_objects=include_objects, include_references=include_references),
            timeout=timeout)

    def dump_node_stacks(self, request: debug_pb2.DumpStacksRequest,
                         timeout: float) -> debug_pb2.NodeStackDumps:
        return self._call("DumpNodeStacks", request, timeout)  # type: ignore[return-value]

    def kill_worker(self, worker_id: str, force: bool = True) -> None:
        self._call("KillWorker", raylet_pb2.KillWorkerRequest(worker_id=worker_id, force=force))

    def start_actor_worker(self, request: raylet_pb2.StartActorWorkerRequest
                           ) -> raylet_pb2.LeaseReply:
        return self._call("StartActorWorker", request, timeout=None)  # type: ignore[return-value]

    def withdraw_actor_creation(self, actor_id: bytes, cause: str, timeout: float
                                ) -> raylet_pb2.WithdrawActorCreationReply:
        return self._call("WithdrawActorCreation", raylet_pb2.WithdrawActorCreationRequest(  # type: ignore[return-value]
            actor_id=actor_id, cause=cause), timeout=timeout)

    def release_unused_actor_workers(self, keep_worker_ids: list[str], cause: str,
                                     timeout: float, adopt_actor_ids: list[bytes] | None = None
                                     ) -> raylet_pb2.WithdrawActorCreationReply:
        return self._call("ReleaseUnusedActorWorkers",  # type: ignore[return-value]
                          raylet_pb2.ReleaseUnusedActorWorkersRequest(
                              keep_worker_ids=keep_worker_ids, cause=cause,
                              adopt_actor_ids=adopt_actor_ids or []), timeout=timeout)

    def shutdown_node(self) -> None:
        self._call("ShutdownNode", raylet_pb2.ShutdownNodeRequest(), timeout=10.0)

    def read_session_files(self, subdir: str,
                           keys: list[bytes] | None = None) -> Iterator[raylet_pb2.FileChunk]:
        """The node's ``subdir`` files, or with ``keys`` (telemetry/trace_index.py) only
        their lines holding one of them."""
        with rpc.translate("raylet", self.address):
            request = raylet_pb2.ReadSessionFilesRequest(subdir=subdir, keys=keys or [])
            yield from self._stub.ReadSessionFiles(request, timeout=120.0)

