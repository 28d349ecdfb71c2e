"""The raylet's lease RPCs: requests, returns, withdrawals, registrations, blocking
news, kills and actor workers (``lease_service.py`` does the work)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import grpc

from tracedray import logs
from tracedray._proto.v1 import common_pb2, raylet_pb2
from tracedray.exceptions import RaySystemError

if TYPE_CHECKING:
    from tracedray.core.raylet.server import Raylet

log = logs.get_logger(__name__)


class LeaseRpcs:
    _r: Raylet

    def RequestWorkerLease(self, request: Any, context: Any) -> Any:
        reply = self._r.leasing.request_lease(
            request, on_requester_gone=functools.partial(_when_gone, context))
        if reply.status == raylet_pb2.LeaseReply.GRANTED and not context.is_active():
            # The requester went away while it waited (it exited, or gave up): nobody
            # will use this worker nor return it. It ran nothing for it: back to idle.
            log.info("lease.abandoned", lease_id=reply.lease_id,
                     requester_pid=request.requester.pid, worker_pid=reply.worker.pid)
            self._r.leasing.return_worker(reply.lease_id, failed=False)
        return reply

    def ReturnWorker(self, request: Any, context: Any) -> Any:
        self._r.leasing.return_worker(request.lease_id, request.worker_failed, request.disconnect)
        return common_pb2.Empty()

    def WithdrawLeaseRequests(self, request: Any, context: Any) -> Any:
        withdrawn = self._r.leasing.withdraw_requests_of(request.requester_worker_id,
                                                 request.request_ids)
        return raylet_pb2.WithdrawLeaseRequestsReply(withdrawn=withdrawn)

    def RegisterWorker(self, request: Any, context: Any) -> Any:
        raylet = self._r
        if request.is_driver:
            raylet.drivers.register(request.worker_id, request.port, request.pid, request.job_id)
        else:
            try:
                raylet.leasing.register_worker(request.worker_id, request.port, request.task_port)
            except RaySystemError as exc:
                context.abort(grpc.StatusCode.NOT_FOUND, str(exc))
        return raylet_pb2.RegisterWorkerReply(node_id=raylet.node_id,
                                              session_dir=str(raylet.session_dir),
                                              object_path_prefix=raylet.object_path_prefix,
                                              ip=raylet.ip)

    def NotifyBlocked(self, request: Any, context: Any) -> Any:
        self._r.leasing.notify_blocked(request.worker_id, request.blocked)
        return common_pb2.Empty()

    def GetWorkerExit(self, request: Any, context: Any) -> Any:
        return self._r.leasing.worker_exit_info(request.worker_id, request.timeout_s)

    def KillWorker(self, request: Any, context: Any) -> Any:
        self._r.leasing.kill_worker(request.worker_id, request.force)
        return common_pb2.Empty()

    def StartActorWorker(self, request: Any, context: Any) -> Any:
        lease = raylet_pb2.LeaseRequest(resources=request.resources, job_id=request.job_id,
                                        grant_or_reject=True, is_actor=True)
        # The GCS that asks may die while its request waits (it is restarted): the request
        # is withdrawn then, as a task lease's, or its worker would go to nobody.
        reply = self._r.leasing.request_lease(
            lease, actor_id=request.actor_id,
            on_requester_gone=functools.partial(_when_gone, context))
        if reply.status == raylet_pb2.LeaseReply.GRANTED and not context.is_active():
            self._r.leasing.discard_abandoned_actor_grant(reply.lease_id)
        return reply

    def WithdrawActorCreation(self, request: Any, context: Any) -> Any:
        withdrawn, killed = self._r.leasing.withdraw_actor_creation(request.actor_id,
                                                                    request.cause)
        return raylet_pb2.WithdrawActorCreationReply(withdrawn=withdrawn,
                                                     killed_worker_pids=killed)

    def ReleaseUnusedActorWorkers(self, request: Any, context: Any) -> Any:
        withdrawn, killed, adopted = self._r.leasing.release_unused_actor_workers(
            set(request.keep_worker_ids), request.cause, request.adopt_actor_ids)
        return raylet_pb2.WithdrawActorCreationReply(
            withdrawn=withdrawn, killed_worker_pids=killed,
            adopted=[raylet_pb2.AdoptedActorWorker(actor_id=actor_id, worker=address.to_proto())
                     for actor_id, address in adopted])


def _when_gone(context: Any, withdraw: Callable[[], None]) -> None:
    """Call ``withdraw`` when the RPC of ``context`` ends (its requester went away)."""
    if not context.add_callback(withdraw):
        withdraw()  # the RPC is over already
