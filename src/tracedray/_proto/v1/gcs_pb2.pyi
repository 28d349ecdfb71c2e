from tracedray._proto.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class NodeInfo(_message.Message):
    __slots__ = ("node_id", "raylet", "resources_total", "state", "start_time", "end_time", "death_reason", "environment", "is_head", "object_store_capacity", "hostname", "clock_offset_s", "version_drift", "clock_rtt_s", "metrics_export_port")
    class ResourcesTotalEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    class EnvironmentEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    RAYLET_FIELD_NUMBER: _ClassVar[int]
    RESOURCES_TOTAL_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    START_TIME_FIELD_NUMBER: _ClassVar[int]
    END_TIME_FIELD_NUMBER: _ClassVar[int]
    DEATH_REASON_FIELD_NUMBER: _ClassVar[int]
    ENVIRONMENT_FIELD_NUMBER: _ClassVar[int]
    IS_HEAD_FIELD_NUMBER: _ClassVar[int]
    OBJECT_STORE_CAPACITY_FIELD_NUMBER: _ClassVar[int]
    HOSTNAME_FIELD_NUMBER: _ClassVar[int]
    CLOCK_OFFSET_S_FIELD_NUMBER: _ClassVar[int]
    VERSION_DRIFT_FIELD_NUMBER: _ClassVar[int]
    CLOCK_RTT_S_FIELD_NUMBER: _ClassVar[int]
    METRICS_EXPORT_PORT_FIELD_NUMBER: _ClassVar[int]
    node_id: str
    raylet: _common_pb2.Address
    resources_total: _containers.ScalarMap[str, float]
    state: str
    start_time: float
    end_time: float
    death_reason: str
    environment: _containers.ScalarMap[str, str]
    is_head: bool
    object_store_capacity: int
    hostname: str
    clock_offset_s: float
    version_drift: _containers.RepeatedScalarFieldContainer[str]
    clock_rtt_s: float
    metrics_export_port: int
    def __init__(self, node_id: _Optional[str] = ..., raylet: _Optional[_Union[_common_pb2.Address, _Mapping]] = ..., resources_total: _Optional[_Mapping[str, float]] = ..., state: _Optional[str] = ..., start_time: _Optional[float] = ..., end_time: _Optional[float] = ..., death_reason: _Optional[str] = ..., environment: _Optional[_Mapping[str, str]] = ..., is_head: _Optional[bool] = ..., object_store_capacity: _Optional[int] = ..., hostname: _Optional[str] = ..., clock_offset_s: _Optional[float] = ..., version_drift: _Optional[_Iterable[str]] = ..., clock_rtt_s: _Optional[float] = ..., metrics_export_port: _Optional[int] = ...) -> None: ...

class HeartbeatRequest(_message.Message):
    __slots__ = ("node_id", "resources_available", "sent_at", "store_used", "pending_leases", "infeasible_leases", "clock_offset_s", "clock_rtt_s", "has_clock_estimate")
    class ResourcesAvailableEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    RESOURCES_AVAILABLE_FIELD_NUMBER: _ClassVar[int]
    SENT_AT_FIELD_NUMBER: _ClassVar[int]
    STORE_USED_FIELD_NUMBER: _ClassVar[int]
    PENDING_LEASES_FIELD_NUMBER: _ClassVar[int]
    INFEASIBLE_LEASES_FIELD_NUMBER: _ClassVar[int]
    CLOCK_OFFSET_S_FIELD_NUMBER: _ClassVar[int]
    CLOCK_RTT_S_FIELD_NUMBER: _ClassVar[int]
    HAS_CLOCK_ESTIMATE_FIELD_NUMBER: _ClassVar[int]
    node_id: str
    resources_available: _containers.ScalarMap[str, float]
    sent_at: float
    store_used: int
    pending_leases: int
    infeasible_leases: int
    clock_offset_s: float
    clock_rtt_s: float
    has_clock_estimate: bool
    def __init__(self, node_id: _Optional[str] = ..., resources_available: _Optional[_Mapping[str, float]] = ..., sent_at: _Optional[float] = ..., store_used: _Optional[int] = ..., pending_leases: _Optional[int] = ..., infeasible_leases: _Optional[int] = ..., clock_offset_s: _Optional[float] = ..., clock_rtt_s: _Optional[float] = ..., has_clock_estimate: _Optional[bool] = ...) -> None: ...

class HeartbeatReply(_message.Message):
    __slots__ = ("gcs_time", "unknown_node", "declared_dead", "death_reason")
    GCS_TIME_FIELD_NUMBER: _ClassVar[int]
    UNKNOWN_NODE_FIELD_NUMBER: _ClassVar[int]
    DECLARED_DEAD_FIELD_NUMBER: _ClassVar[int]
    DEATH_REASON_FIELD_NUMBER: _ClassVar[int]
    gcs_time: float
    unknown_node: bool
    declared_dead: bool
    death_reason: str
    def __init__(self, gcs_time: _Optional[float] = ..., unknown_node: _Optional[bool] = ..., declared_dead: _Optional[bool] = ..., death_reason: _Optional[str] = ...) -> None: ...

class GetNodesRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class NodeWithLoad(_message.Message):
    __slots__ = ("info", "resources_available", "store_used", "pending_leases", "infeasible_leases", "last_heartbeat")
    class ResourcesAvailableEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    INFO_FIELD_NUMBER: _ClassVar[int]
    RESOURCES_AVAILABLE_FIELD_NUMBER: _ClassVar[int]
    STORE_USED_FIELD_NUMBER: _ClassVar[int]
    PENDING_LEASES_FIELD_NUMBER: _ClassVar[int]
    INFEASIBLE_LEASES_FIELD_NUMBER: _ClassVar[int]
    LAST_HEARTBEAT_FIELD_NUMBER: _ClassVar[int]
    info: NodeInfo
    resources_available: _containers.ScalarMap[str, float]
    store_used: int
    pending_leases: int
    infeasible_leases: int
    last_heartbeat: float
    def __init__(self, info: _Optional[_Union[NodeInfo, _Mapping]] = ..., resources_available: _Optional[_Mapping[str, float]] = ..., store_used: _Optional[int] = ..., pending_leases: _Optional[int] = ..., infeasible_leases: _Optional[int] = ..., last_heartbeat: _Optional[float] = ...) -> None: ...

class GetNodesReply(_message.Message):
    __slots__ = ("nodes",)
    NODES_FIELD_NUMBER: _ClassVar[int]
    nodes: _containers.RepeatedCompositeFieldContainer[NodeWithLoad]
    def __init__(self, nodes: _Optional[_Iterable[_Union[NodeWithLoad, _Mapping]]] = ...) -> None: ...

class JobInfo(_message.Message):
    __slots__ = ("job_id", "driver", "start_time", "end_time", "state", "entrypoint", "namespace", "end_reason")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    DRIVER_FIELD_NUMBER: _ClassVar[int]
    START_TIME_FIELD_NUMBER: _ClassVar[int]
    END_TIME_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    ENTRYPOINT_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    END_REASON_FIELD_NUMBER: _ClassVar[int]
    job_id: bytes
    driver: _common_pb2.Address
    start_time: float
    end_time: float
    state: str
    entrypoint: str
    namespace: str
    end_reason: str
    def __init__(self, job_id: _Optional[bytes] = ..., driver: _Optional[_Union[_common_pb2.Address, _Mapping]] = ..., start_time: _Optional[float] = ..., end_time: _Optional[float] = ..., state: _Optional[str] = ..., entrypoint: _Optional[str] = ..., namespace: _Optional[str] = ..., end_reason: _Optional[str] = ...) -> None: ...

class GetJobsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetJobsReply(_message.Message):
    __slots__ = ("jobs",)
    JOBS_FIELD_NUMBER: _ClassVar[int]
    jobs: _containers.RepeatedCompositeFieldContainer[JobInfo]
    def __init__(self, jobs: _Optional[_Iterable[_Union[JobInfo, _Mapping]]] = ...) -> None: ...

class KvPutRequest(_message.Message):
    __slots__ = ("key", "value", "overwrite")
    KEY_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    OVERWRITE_FIELD_NUMBER: _ClassVar[int]
    key: str
    value: bytes
    overwrite: bool
    def __init__(self, key: _Optional[str] = ..., value: _Optional[bytes] = ..., overwrite: _Optional[bool] = ...) -> None: ...

class KvPutReply(_message.Message):
    __slots__ = ("added",)
    ADDED_FIELD_NUMBER: _ClassVar[int]
    added: bool
    def __init__(self, added: _Optional[bool] = ...) -> None: ...

class KvGetRequest(_message.Message):
    __slots__ = ("key",)
    KEY_FIELD_NUMBER: _ClassVar[int]
    key: str
    def __init__(self, key: _Optional[str] = ...) -> None: ...

class KvGetReply(_message.Message):
    __slots__ = ("found", "value")
    FOUND_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    found: bool
    value: bytes
    def __init__(self, found: _Optional[bool] = ..., value: _Optional[bytes] = ...) -> None: ...

class CreateActorRequest(_message.Message):
    __slots__ = ("creation_task", "get_if_exists")
    CREATION_TASK_FIELD_NUMBER: _ClassVar[int]
    GET_IF_EXISTS_FIELD_NUMBER: _ClassVar[int]
    creation_task: _common_pb2.TaskSpec
    get_if_exists: bool
    def __init__(self, creation_task: _Optional[_Union[_common_pb2.TaskSpec, _Mapping]] = ..., get_if_exists: _Optional[bool] = ...) -> None: ...

class ActorInfo(_message.Message):
    __slots__ = ("actor_id", "state", "address", "name", "namespace", "class_name", "num_restarts", "death_cause", "job_id", "creation_task", "start_time", "end_time", "node_id", "detached", "pid")
    ACTOR_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    CLASS_NAME_FIELD_NUMBER: _ClassVar[int]
    NUM_RESTARTS_FIELD_NUMBER: _ClassVar[int]
    DEATH_CAUSE_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    CREATION_TASK_FIELD_NUMBER: _ClassVar[int]
    START_TIME_FIELD_NUMBER: _ClassVar[int]
    END_TIME_FIELD_NUMBER: _ClassVar[int]
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    DETACHED_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    actor_id: bytes
    state: str
    address: _common_pb2.Address
    name: str
    namespace: str
    class_name: str
    num_restarts: int
    death_cause: str
    job_id: bytes
    creation_task: _common_pb2.TaskSpec
    start_time: float
    end_time: float
    node_id: str
    detached: bool
    pid: int
    def __init__(self, actor_id: _Optional[bytes] = ..., state: _Optional[str] = ..., address: _Optional[_Union[_common_pb2.Address, _Mapping]] = ..., name: _Optional[str] = ..., namespace: _Optional[str] = ..., class_name: _Optional[str] = ..., num_restarts: _Optional[int] = ..., death_cause: _Optional[str] = ..., job_id: _Optional[bytes] = ..., creation_task: _Optional[_Union[_common_pb2.TaskSpec, _Mapping]] = ..., start_time: _Optional[float] = ..., end_time: _Optional[float] = ..., node_id: _Optional[str] = ..., detached: _Optional[bool] = ..., pid: _Optional[int] = ...) -> None: ...

class GetActorRequest(_message.Message):
    __slots__ = ("actor_id", "name", "namespace", "wait_until_settled", "timeout_s", "min_restarts")
    ACTOR_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    WAIT_UNTIL_SETTLED_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_S_FIELD_NUMBER: _ClassVar[int]
    MIN_RESTARTS_FIELD_NUMBER: _ClassVar[int]
    actor_id: bytes
    name: str
    namespace: str
    wait_until_settled: bool
    timeout_s: float
    min_restarts: int
    def __init__(self, actor_id: _Optional[bytes] = ..., name: _Optional[str] = ..., namespace: _Optional[str] = ..., wait_until_settled: _Optional[bool] = ..., timeout_s: _Optional[float] = ..., min_restarts: _Optional[int] = ...) -> None: ...

class ListActorsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListActorsReply(_message.Message):
    __slots__ = ("actors",)
    ACTORS_FIELD_NUMBER: _ClassVar[int]
    actors: _containers.RepeatedCompositeFieldContainer[ActorInfo]
    def __init__(self, actors: _Optional[_Iterable[_Union[ActorInfo, _Mapping]]] = ...) -> None: ...

class KillActorRequest(_message.Message):
    __slots__ = ("actor_id", "no_restart", "cause")
    ACTOR_ID_FIELD_NUMBER: _ClassVar[int]
    NO_RESTART_FIELD_NUMBER: _ClassVar[int]
    CAUSE_FIELD_NUMBER: _ClassVar[int]
    actor_id: bytes
    no_restart: bool
    cause: str
    def __init__(self, actor_id: _Optional[bytes] = ..., no_restart: _Optional[bool] = ..., cause: _Optional[str] = ...) -> None: ...

class WorkerDeath(_message.Message):
    __slots__ = ("node_id", "worker_id", "actor_id", "exit_code", "signal", "meaning", "intended")
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    ACTOR_ID_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    SIGNAL_FIELD_NUMBER: _ClassVar[int]
    MEANING_FIELD_NUMBER: _ClassVar[int]
    INTENDED_FIELD_NUMBER: _ClassVar[int]
    node_id: str
    worker_id: str
    actor_id: bytes
    exit_code: int
    signal: str
    meaning: str
    intended: bool
    def __init__(self, node_id: _Optional[str] = ..., worker_id: _Optional[str] = ..., actor_id: _Optional[bytes] = ..., exit_code: _Optional[int] = ..., signal: _Optional[str] = ..., meaning: _Optional[str] = ..., intended: _Optional[bool] = ...) -> None: ...

class DriverDeath(_message.Message):
    __slots__ = ("job_id", "node_id", "worker_id", "pid", "why")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    WHY_FIELD_NUMBER: _ClassVar[int]
    job_id: bytes
    node_id: str
    worker_id: str
    pid: int
    why: str
    def __init__(self, job_id: _Optional[bytes] = ..., node_id: _Optional[str] = ..., worker_id: _Optional[str] = ..., pid: _Optional[int] = ..., why: _Optional[str] = ...) -> None: ...

class DriverDeathReply(_message.Message):
    __slots__ = ("job_ended", "job_state")
    JOB_ENDED_FIELD_NUMBER: _ClassVar[int]
    JOB_STATE_FIELD_NUMBER: _ClassVar[int]
    job_ended: bool
    job_state: str
    def __init__(self, job_ended: _Optional[bool] = ..., job_state: _Optional[str] = ...) -> None: ...

class TaskEvent(_message.Message):
    __slots__ = ("task_id", "attempt", "state", "time", "function_name", "job_id", "node_id", "worker_id", "worker_pid", "error_type", "error_message", "actor_id", "kind", "call_site", "parent_task_id", "trace_id", "resources", "state_times", "submit_span_id", "job_end")
    class ResourcesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    class StateTimesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    TIME_FIELD_NUMBER: _ClassVar[int]
    FUNCTION_NAME_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    WORKER_PID_FIELD_NUMBER: _ClassVar[int]
    ERROR_TYPE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    ACTOR_ID_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    CALL_SITE_FIELD_NUMBER: _ClassVar[int]
    PARENT_TASK_ID_FIELD_NUMBER: _ClassVar[int]
    TRACE_ID_FIELD_NUMBER: _ClassVar[int]
    RESOURCES_FIELD_NUMBER: _ClassVar[int]
    STATE_TIMES_FIELD_NUMBER: _ClassVar[int]
    SUBMIT_SPAN_ID_FIELD_NUMBER: _ClassVar[int]
    JOB_END_FIELD_NUMBER: _ClassVar[int]
    task_id: bytes
    attempt: int
    state: str
    time: float
    function_name: str
    job_id: bytes
    node_id: str
    worker_id: str
    worker_pid: int
    error_type: str
    error_message: str
    actor_id: bytes
    kind: str
    call_site: str
    parent_task_id: bytes
    trace_id: str
    resources: _containers.ScalarMap[str, float]
    state_times: _containers.ScalarMap[str, float]
    submit_span_id: int
    job_end: bool
    def __init__(self, task_id: _Optional[bytes] = ..., attempt: _Optional[int] = ..., state: _Optional[str] = ..., time: _Optional[float] = ..., function_name: _Optional[str] = ..., job_id: _Optional[bytes] = ..., node_id: _Optional[str] = ..., worker_id: _Optional[str] = ..., worker_pid: _Optional[int] = ..., error_type: _Optional[str] = ..., error_message: _Optional[str] = ..., actor_id: _Optional[bytes] = ..., kind: _Optional[str] = ..., call_site: _Optional[str] = ..., parent_task_id: _Optional[bytes] = ..., trace_id: _Optional[str] = ..., resources: _Optional[_Mapping[str, float]] = ..., state_times: _Optional[_Mapping[str, float]] = ..., submit_span_id: _Optional[int] = ..., job_end: _Optional[bool] = ...) -> None: ...

class TaskEvents(_message.Message):
    __slots__ = ("events",)
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    events: _containers.RepeatedCompositeFieldContainer[TaskEvent]
    def __init__(self, events: _Optional[_Iterable[_Union[TaskEvent, _Mapping]]] = ...) -> None: ...

class TaskRecord(_message.Message):
    __slots__ = ("task_id", "function_name", "state", "attempt", "job_id", "node_id", "worker_id", "worker_pid", "error_type", "error_message", "actor_id", "kind", "call_site", "parent_task_id", "trace_id", "events", "resources", "submit_span_id")
    class ResourcesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    FUNCTION_NAME_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    WORKER_PID_FIELD_NUMBER: _ClassVar[int]
    ERROR_TYPE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    ACTOR_ID_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    CALL_SITE_FIELD_NUMBER: _ClassVar[int]
    PARENT_TASK_ID_FIELD_NUMBER: _ClassVar[int]
    TRACE_ID_FIELD_NUMBER: _ClassVar[int]
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    RESOURCES_FIELD_NUMBER: _ClassVar[int]
    SUBMIT_SPAN_ID_FIELD_NUMBER: _ClassVar[int]
    task_id: bytes
    function_name: str
    state: str
    attempt: int
    job_id: bytes
    node_id: str
    worker_id: str
    worker_pid: int
    error_type: str
    error_message: str
    actor_id: bytes
    kind: str
    call_site: str
    parent_task_id: bytes
    trace_id: str
    events: _containers.RepeatedCompositeFieldContainer[TaskEvent]
    resources: _containers.ScalarMap[str, float]
    submit_span_id: int
    def __init__(self, task_id: _Optional[bytes] = ..., function_name: _Optional[str] = ..., state: _Optional[str] = ..., attempt: _Optional[int] = ..., job_id: _Optional[bytes] = ..., node_id: _Optional[str] = ..., worker_id: _Optional[str] = ..., worker_pid: _Optional[int] = ..., error_type: _Optional[str] = ..., error_message: _Optional[str] = ..., actor_id: _Optional[bytes] = ..., kind: _Optional[str] = ..., call_site: _Optional[str] = ..., parent_task_id: _Optional[bytes] = ..., trace_id: _Optional[str] = ..., events: _Optional[_Iterable[_Union[TaskEvent, _Mapping]]] = ..., resources: _Optional[_Mapping[str, float]] = ..., submit_span_id: _Optional[int] = ...) -> None: ...

class GetTasksRequest(_message.Message):
    __slots__ = ("task_ids", "limit", "job_id", "filters", "offset", "order", "summarize", "id_prefix")
    TASK_IDS_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    FILTERS_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    ORDER_FIELD_NUMBER: _ClassVar[int]
    SUMMARIZE_FIELD_NUMBER: _ClassVar[int]
    ID_PREFIX_FIELD_NUMBER: _ClassVar[int]
    task_ids: _containers.RepeatedScalarFieldContainer[bytes]
    limit: int
    job_id: bytes
    filters: _containers.RepeatedScalarFieldContainer[str]
    offset: int
    order: str
    summarize: bool
    id_prefix: str
    def __init__(self, task_ids: _Optional[_Iterable[bytes]] = ..., limit: _Optional[int] = ..., job_id: _Optional[bytes] = ..., filters: _Optional[_Iterable[str]] = ..., offset: _Optional[int] = ..., order: _Optional[str] = ..., summarize: _Optional[bool] = ..., id_prefix: _Optional[str] = ...) -> None: ...

class TaskSummaryRow(_message.Message):
    __slots__ = ("name", "kind", "state_counts", "error_type_counts")
    class StateCountsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    class ErrorTypeCountsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    STATE_COUNTS_FIELD_NUMBER: _ClassVar[int]
    ERROR_TYPE_COUNTS_FIELD_NUMBER: _ClassVar[int]
    name: str
    kind: str
    state_counts: _containers.ScalarMap[str, int]
    error_type_counts: _containers.ScalarMap[str, int]
    def __init__(self, name: _Optional[str] = ..., kind: _Optional[str] = ..., state_counts: _Optional[_Mapping[str, int]] = ..., error_type_counts: _Optional[_Mapping[str, int]] = ...) -> None: ...

class GetTasksReply(_message.Message):
    __slots__ = ("tasks", "total", "summary")
    TASKS_FIELD_NUMBER: _ClassVar[int]
    TOTAL_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    tasks: _containers.RepeatedCompositeFieldContainer[TaskRecord]
    total: int
    summary: _containers.RepeatedCompositeFieldContainer[TaskSummaryRow]
    def __init__(self, tasks: _Optional[_Iterable[_Union[TaskRecord, _Mapping]]] = ..., total: _Optional[int] = ..., summary: _Optional[_Iterable[_Union[TaskSummaryRow, _Mapping]]] = ...) -> None: ...

class ClusterStatus(_message.Message):
    __slots__ = ("nodes", "num_actors", "num_tasks", "storage")
    NODES_FIELD_NUMBER: _ClassVar[int]
    NUM_ACTORS_FIELD_NUMBER: _ClassVar[int]
    NUM_TASKS_FIELD_NUMBER: _ClassVar[int]
    STORAGE_FIELD_NUMBER: _ClassVar[int]
    nodes: _containers.RepeatedCompositeFieldContainer[NodeWithLoad]
    num_actors: int
    num_tasks: int
    storage: str
    def __init__(self, nodes: _Optional[_Iterable[_Union[NodeWithLoad, _Mapping]]] = ..., num_actors: _Optional[int] = ..., num_tasks: _Optional[int] = ..., storage: _Optional[str] = ...) -> None: ...
