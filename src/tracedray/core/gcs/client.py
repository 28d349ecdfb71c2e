"""Typed client for the GCS service; grpc errors become tracedray errors here."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import grpc

from tracedray import config, logs
from tracedray._proto.v1 import common_pb2, gcs_pb2, gcs_pb2_grpc
from tracedray.core import rpc
from tracedray.core.gcs.reconnect import (
    RETRY_INTERVAL_S,
    ReconnectStatistics,
    ReconnectWindow,
    Verdict,
)
from tracedray.core.protocol import task_event_wire
from tracedray.exceptions import ClusterConnectionError, GcsUnavailableError, RaySystemError

T = TypeVar("T")
log = logs.get_logger(__name__)


def _method_path(name: str) -> str:
    """The gRPC path of GcsService's method ``name``, from the generated descriptor."""
    return "/{}/{}".format(*gcs_pb2.DESCRIPTOR.services_by_name["GcsService"]
                           .methods_by_name[name].full_name.rsplit(".", 1))


class GcsClient:
    """Calls retry ``UNAVAILABLE`` while the GCS is unreachable (it may be restarting), for
    ``reconnect_s`` from the outage's first failure (``reconnect.py``); then they raise
    ``GcsUnavailableError``."""

    def __init__(self, address: str, *, reconnect_s: float | None = None) -> None:
        self.address = address
        self.reconnect_s = config.GCS_RECONNECT_TIMEOUT_S.get() if reconnect_s is None \
            else reconnect_s
        self._window = ReconnectWindow(self.reconnect_s)
        channel = rpc.channel(address)
        self._stub = gcs_pb2_grpc.GcsServiceStub(channel)
        # AddTaskEvents with a request serialized by the caller (task_event_wire.py).
        self._add_encoded_task_events = channel.unary_unary(
            _method_path("AddTaskEvents"), request_serializer=None,
            response_deserializer=common_pb2.Empty.FromString)

    def _call(self, method: Callable[..., T], request: object, timeout: float | None = 30.0) -> T:
        started: float | None = None
        while True:
            try:
                reply = method(request, timeout=timeout)
            except grpc.RpcError as exc:
                if exc.code() != grpc.StatusCode.UNAVAILABLE:
                    with rpc.translate("GCS", self.address):
                        raise
                if started is None:  # the clock is read only once a call fails
                    started = self._window.now()
                decision, outage = self._window.failed(started)
                if outage.began:
                    log.warning("gcs.unreachable", address=self.address,
                                error=exc.details(), retry_for_s=self.reconnect_s)
                if decision is Verdict.GIVE_UP:
                    error = self._unavailable(exc, outage.lasted_s)
                    log.error("gcs.unavailable", address=self.address,
                              outage_s=round(outage.lasted_s, 3), error=str(error))
                    raise error from exc
                time.sleep(self._window.pause(started))
                continue
            lasted = self._window.succeeded()
            if lasted is not None:
                log.info("gcs.reconnected", address=self.address, outage_s=round(lasted, 3))
            return reply

    def statistics(self) -> ReconnectStatistics:
        """Outages of the GCS as this client saw them."""
        return self._window.statistics()

    def _unavailable(self, exc: grpc.RpcError, waited_s: float) -> GcsUnavailableError:
        return GcsUnavailableError(
            f"the GCS at {self.address} has been unreachable for {waited_s:.1f}s (retried "
            f"every {RETRY_INTERVAL_S:g}s; last error: {exc.details()}). Is the head node up? "
            f"`tracedray status --address {self.address}` says; the head restarts a GCS "
            f"that died, and {config.GCS_RECONNECT_TIMEOUT_S.name} (now {self.reconnect_s:g}s) "
            "sets how long calls wait for it.",
            address=self.address, waited_s=waited_s)

    # --- kv / functions
    def kv_put(self, key: str, value: bytes, overwrite: bool = True) -> bool:
        reply = self._call(self._stub.KvPut, gcs_pb2.KvPutRequest(key=key, value=value,
                                                                  overwrite=overwrite))
        return reply.added

    def kv_get(self, key: str) -> bytes | None:
        reply = self._call(self._stub.KvGet, gcs_pb2.KvGetRequest(key=key))
        return reply.value if reply.found else None

    # --- nodes
    def register_node(self, info: gcs_pb2.NodeInfo) -> None:
        self._call(self._stub.RegisterNode, info)

    def heartbeat(self, request: gcs_pb2.HeartbeatRequest) -> gcs_pb2.HeartbeatReply:
        return self._call(self._stub.Heartbeat, request, timeout=5.0)

    def get_nodes(self) -> list[gcs_pb2.NodeWithLoad]:
        return list(self._call(self._stub.GetNodes, gcs_pb2.GetNodesRequest()).nodes)

    # --- jobs
    def register_job(self, job: gcs_pb2.JobInfo) -> None:
        self._call(self._stub.RegisterJob, job)

    def finish_job(self, job: gcs_pb2.JobInfo) -> None:
        self._call(self._stub.FinishJob, job, timeout=10.0)

    def report_driver_death(self, death: gcs_pb2.DriverDeath) -> gcs_pb2.DriverDeathReply:
        return self._call(self._stub.ReportDriverDeath, death)

    def get_jobs(self) -> list[gcs_pb2.JobInfo]:
        return list(self._call(self._stub.GetJobs, gcs_pb2.GetJobsRequest()).jobs)

    # --- actors
    def create_actor(self, spec: common_pb2.TaskSpec, get_if_exists: bool) -> gcs_pb2.ActorInfo:
        """Raises ValueError (as Ray does) when the actor's name is taken."""
        request = gcs_pb2.CreateActorRequest(creation_task=spec, get_if_exists=get_if_exists)
        try:
            return self._call(self._stub.CreateActor, request)
        except RaySystemError as exc:
            cause = exc.__cause__
            if isinstance(cause, grpc.RpcError) and \
                    cause.code() == grpc.StatusCode.ALREADY_EXISTS:
                raise ValueError(cause.details()) from None
            raise

    def get_actor(self, *, actor_id: bytes = b"", name: str = "", namespace: str = "",
                  wait_until_settled: bool = False, timeout_s: float = 0.0,
                  min_restarts: int = 0) -> gcs_pb2.ActorInfo:
        request = gcs_pb2.GetActorRequest(actor_id=actor_id, name=name, namespace=namespace,
                                          wait_until_settled=wait_until_settled,
                                          timeout_s=timeout_s, min_restarts=min_restarts)
        return self._call(self._stub.GetActor, request, timeout=timeout_s + 30.0)

    def find_actor(self, actor_id: bytes = b"", *, name: str = "", namespace: str = "",
                   wait_until_settled: bool = False, timeout_s: float = 0.0,
                   min_restarts: int = 0) -> gcs_pb2.ActorInfo | None:
        """``get_actor`` by id or by name, None where the GCS has no such actor. An
        unreachable GCS raises (after retrying): it never passes for "no such actor"."""
        try:
            return self.get_actor(actor_id=actor_id, name=name, namespace=namespace,
                                  wait_until_settled=wait_until_settled, timeout_s=timeout_s,
                                  min_restarts=min_restarts)
        except RaySystemError as exc:
            if isinstance(exc.__cause__, grpc.RpcError) and (
                    exc.__cause__.code() == grpc.StatusCode.NOT_FOUND):
                return None
            raise

    def list_actors(self) -> list[gcs_pb2.ActorInfo]:
        return list(self._call(self._stub.ListActors, gcs_pb2.ListActorsRequest()).actors)

    def kill_actor(self, actor_id: bytes, no_restart: bool, cause: str = "") -> None:
        self._call(self._stub.KillActor, gcs_pb2.KillActorRequest(
            actor_id=actor_id, no_restart=no_restart, cause=cause))

    def report_worker_death(self, death: gcs_pb2.WorkerDeath) -> None:
        self._call(self._stub.ReportWorkerDeath, death)

    # --- tasks
    def add_task_events(self, events: list[gcs_pb2.TaskEvent]) -> None:
        self._call(self._stub.AddTaskEvents, gcs_pb2.TaskEvents(events=events), timeout=10.0)

    def add_encoded_task_events(self, events: Sequence[bytes]) -> None:
        """``add_task_events`` of events already serialized (``TaskEvent`` messages)."""
        self._call(self._add_encoded_task_events, task_event_wire.events_request(events),
                   timeout=10.0)

    def get_tasks(self, task_ids: list[bytes] | None = None, limit: int = 0,
                  job_id: bytes = b"", **query: Any) -> gcs_pb2.GetTasksReply:
        """``query``: the request's other fields (filters, offset, order, summarize,
        id_prefix), answered in the GCS (core/gcs/task_query.py)."""
        return self._call(self._stub.GetTasks, gcs_pb2.GetTasksRequest(
            task_ids=task_ids or [], limit=limit, job_id=job_id, **query))

    def cluster_status(self) -> gcs_pb2.ClusterStatus:
        return self._call(self._stub.GetClusterStatus, common_pb2.Empty())


def connect(address: str, timeout_s: float = 10.0) -> GcsClient:
    """A client for a GCS that is known to answer; ClusterConnectionError names the address."""
    try:
        rpc.wait_ready(address, timeout_s, "GCS")
    except ClusterConnectionError:
        rpc.drop_channel(address)
        raise
    return GcsClient(address)
