"""The GCS's gRPC service: each call handed to the part of the GCS it concerns (nodes,
jobs, actors, tasks, the internal kv), whose answer it returns."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import grpc

from tracedray._proto.v1 import common_pb2, gcs_pb2, gcs_pb2_grpc

if TYPE_CHECKING:
    from tracedray.core.gcs.server import Gcs


class GcsServicer(gcs_pb2_grpc.GcsServiceServicer):
    def __init__(self, gcs: Gcs) -> None:
        self._g = gcs

    # --- nodes
    def RegisterNode(self, request: Any, context: Any) -> Any:
        self._g.nodes.register(request)
        return common_pb2.Empty()

    def Heartbeat(self, request: Any, context: Any) -> Any:
        return self._g.nodes.heartbeat(request)

    def GetNodes(self, request: Any, context: Any) -> Any:
        return gcs_pb2.GetNodesReply(nodes=self._g.nodes.all())

    # --- jobs
    def RegisterJob(self, request: Any, context: Any) -> Any:
        self._g.jobs.register(request)
        return common_pb2.Empty()

    def FinishJob(self, request: Any, context: Any) -> Any:
        self._g.jobs.finish(request.job_id)
        return common_pb2.Empty()

    def ReportDriverDeath(self, request: Any, context: Any) -> Any:
        return self._g.jobs.on_driver_death(request)

    def GetJobs(self, request: Any, context: Any) -> Any:
        return gcs_pb2.GetJobsReply(jobs=self._g.jobs.all())

    # --- the internal kv (exported functions and classes, among others)
    def KvPut(self, request: Any, context: Any) -> Any:
        table = self._g.tables["kv"]
        if not request.overwrite and table.get(request.key) is not None:
            return gcs_pb2.KvPutReply(added=False)
        table.put(request.key, request.value, finished=False)
        return gcs_pb2.KvPutReply(added=True)

    def KvGet(self, request: Any, context: Any) -> Any:
        value = self._g.tables["kv"].get(request.key)
        return gcs_pb2.KvGetReply(found=value is not None, value=value or b"")

    # --- actors
    def CreateActor(self, request: Any, context: Any) -> Any:
        try:
            return self._g.actors.create(request.creation_task, request.get_if_exists)
        except ValueError as exc:
            context.abort(grpc.StatusCode.ALREADY_EXISTS, str(exc))

    def GetActor(self, request: Any, context: Any) -> Any:
        info = self._g.actors.get(request)
        if info is None:
            what = request.name or request.actor_id.hex()
            context.abort(grpc.StatusCode.NOT_FOUND,
                          f"no actor {what!r} in namespace {request.namespace!r}")
        return info

    def ListActors(self, request: Any, context: Any) -> Any:
        return gcs_pb2.ListActorsReply(actors=self._g.actors.list())

    def KillActor(self, request: Any, context: Any) -> Any:
        if request.cause:
            self._g.actors.kill(request.actor_id, request.no_restart, request.cause)
        else:
            self._g.actors.kill(request.actor_id, request.no_restart)
        return common_pb2.Empty()

    def ReportWorkerDeath(self, request: Any, context: Any) -> Any:
        self._g.actors.on_worker_death(request)
        return common_pb2.Empty()

    # --- tasks and the cluster's state
    def AddTaskEvents(self, request: Any, context: Any) -> Any:
        self._g.tasks.add_events(request.events)
        return common_pb2.Empty()

    def GetTasks(self, request: Any, context: Any) -> Any:
        return self._g.tasks.get(request)

    def GetClusterStatus(self, request: Any, context: Any) -> Any:
        gcs = self._g
        return gcs_pb2.ClusterStatus(nodes=gcs.nodes.all(), num_actors=len(gcs.actors.list()),
                                     num_tasks=len(gcs.tables["tasks"]),
                                     storage=gcs.storage.description)
