from tracedray._proto.v1 import common_pb2 as _common_pb2
from tracedray._proto.v1 import debug_pb2 as _debug_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class LeaseRequest(_message.Message):
    __slots__ = ("scheduling_key", "resources", "requester", "job_id", "grant_or_reject", "input_bytes_by_node", "task_id", "timeout_s", "is_actor", "request_id")
    class ResourcesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    class InputBytesByNodeEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    SCHEDULING_KEY_FIELD_NUMBER: _ClassVar[int]
    RESOURCES_FIELD_NUMBER: _ClassVar[int]
    REQUESTER_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    GRANT_OR_REJECT_FIELD_NUMBER: _ClassVar[int]
    INPUT_BYTES_BY_NODE_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_S_FIELD_NUMBER: _ClassVar[int]
    IS_ACTOR_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    scheduling_key: str
    resources: _containers.ScalarMap[str, float]
    requester: _common_pb2.Address
    job_id: bytes
    grant_or_reject: bool
    input_bytes_by_node: _containers.ScalarMap[str, int]
    task_id: bytes
    timeout_s: float
    is_actor: bool
    request_id: bytes
    def __init__(self, scheduling_key: _Optional[str] = ..., resources: _Optional[_Mapping[str, float]] = ..., requester: _Optional[_Union[_common_pb2.Address, _Mapping]] = ..., job_id: _Optional[bytes] = ..., grant_or_reject: _Optional[bool] = ..., input_bytes_by_node: _Optional[_Mapping[str, int]] = ..., task_id: _Optional[bytes] = ..., timeout_s: _Optional[float] = ..., is_actor: _Optional[bool] = ..., request_id: _Optional[bytes] = ...) -> None: ...

class LeaseReply(_message.Message):
    __slots__ = ("status", "lease_id", "worker", "spillback_raylet", "reason", "candidates", "local_bytes", "queue_lengths", "chosen_node")
    class Status(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        GRANTED: _ClassVar[LeaseReply.Status]
        SPILLBACK: _ClassVar[LeaseReply.Status]
        INFEASIBLE: _ClassVar[LeaseReply.Status]
        TIMEOUT: _ClassVar[LeaseReply.Status]
    GRANTED: LeaseReply.Status
    SPILLBACK: LeaseReply.Status
    INFEASIBLE: LeaseReply.Status
    TIMEOUT: LeaseReply.Status
    STATUS_FIELD_NUMBER: _ClassVar[int]
    LEASE_ID_FIELD_NUMBER: _ClassVar[int]
    WORKER_FIELD_NUMBER: _ClassVar[int]
    SPILLBACK_RAYLET_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    CANDIDATES_FIELD_NUMBER: _ClassVar[int]
    LOCAL_BYTES_FIELD_NUMBER: _ClassVar[int]
    QUEUE_LENGTHS_FIELD_NUMBER: _ClassVar[int]
    CHOSEN_NODE_FIELD_NUMBER: _ClassVar[int]
    status: LeaseReply.Status
    lease_id: str
    worker: _common_pb2.Address
    spillback_raylet: _common_pb2.Address
    reason: str
    candidates: _containers.RepeatedScalarFieldContainer[str]
    local_bytes: _containers.RepeatedScalarFieldContainer[int]
    queue_lengths: _containers.RepeatedScalarFieldContainer[int]
    chosen_node: str
    def __init__(self, status: _Optional[_Union[LeaseReply.Status, str]] = ..., lease_id: _Optional[str] = ..., worker: _Optional[_Union[_common_pb2.Address, _Mapping]] = ..., spillback_raylet: _Optional[_Union[_common_pb2.Address, _Mapping]] = ..., reason: _Optional[str] = ..., candidates: _Optional[_Iterable[str]] = ..., local_bytes: _Optional[_Iterable[int]] = ..., queue_lengths: _Optional[_Iterable[int]] = ..., chosen_node: _Optional[str] = ...) -> None: ...

class ReturnWorkerRequest(_message.Message):
    __slots__ = ("lease_id", "worker_failed", "disconnect")
    LEASE_ID_FIELD_NUMBER: _ClassVar[int]
    WORKER_FAILED_FIELD_NUMBER: _ClassVar[int]
    DISCONNECT_FIELD_NUMBER: _ClassVar[int]
    lease_id: str
    worker_failed: bool
    disconnect: bool
    def __init__(self, lease_id: _Optional[str] = ..., worker_failed: _Optional[bool] = ..., disconnect: _Optional[bool] = ...) -> None: ...

class WithdrawLeaseRequestsRequest(_message.Message):
    __slots__ = ("requester_worker_id", "request_ids")
    REQUESTER_WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    REQUEST_IDS_FIELD_NUMBER: _ClassVar[int]
    requester_worker_id: str
    request_ids: _containers.RepeatedScalarFieldContainer[bytes]
    def __init__(self, requester_worker_id: _Optional[str] = ..., request_ids: _Optional[_Iterable[bytes]] = ...) -> None: ...

class WithdrawLeaseRequestsReply(_message.Message):
    __slots__ = ("withdrawn",)
    WITHDRAWN_FIELD_NUMBER: _ClassVar[int]
    withdrawn: int
    def __init__(self, withdrawn: _Optional[int] = ...) -> None: ...

class RegisterWorkerRequest(_message.Message):
    __slots__ = ("worker_id", "port", "pid", "is_driver", "task_port", "job_id")
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    PORT_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    IS_DRIVER_FIELD_NUMBER: _ClassVar[int]
    TASK_PORT_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    worker_id: str
    port: int
    pid: int
    is_driver: bool
    task_port: int
    job_id: bytes
    def __init__(self, worker_id: _Optional[str] = ..., port: _Optional[int] = ..., pid: _Optional[int] = ..., is_driver: _Optional[bool] = ..., task_port: _Optional[int] = ..., job_id: _Optional[bytes] = ...) -> None: ...

class RegisterWorkerReply(_message.Message):
    __slots__ = ("node_id", "session_dir", "object_path_prefix", "ip")
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_DIR_FIELD_NUMBER: _ClassVar[int]
    OBJECT_PATH_PREFIX_FIELD_NUMBER: _ClassVar[int]
    IP_FIELD_NUMBER: _ClassVar[int]
    node_id: str
    session_dir: str
    object_path_prefix: str
    ip: str
    def __init__(self, node_id: _Optional[str] = ..., session_dir: _Optional[str] = ..., object_path_prefix: _Optional[str] = ..., ip: _Optional[str] = ...) -> None: ...

class NotifyBlockedRequest(_message.Message):
    __slots__ = ("worker_id", "blocked")
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    BLOCKED_FIELD_NUMBER: _ClassVar[int]
    worker_id: str
    blocked: bool
    def __init__(self, worker_id: _Optional[str] = ..., blocked: _Optional[bool] = ...) -> None: ...

class SealObjectRequest(_message.Message):
    __slots__ = ("object_id", "size", "owner", "call_site", "owner_address")
    OBJECT_ID_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    CALL_SITE_FIELD_NUMBER: _ClassVar[int]
    OWNER_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    object_id: bytes
    size: int
    owner: str
    call_site: str
    owner_address: _common_pb2.Address
    def __init__(self, object_id: _Optional[bytes] = ..., size: _Optional[int] = ..., owner: _Optional[str] = ..., call_site: _Optional[str] = ..., owner_address: _Optional[_Union[_common_pb2.Address, _Mapping]] = ...) -> None: ...

class SealObjectReply(_message.Message):
    __slots__ = ("ok", "error", "store_used", "store_capacity")
    OK_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    STORE_USED_FIELD_NUMBER: _ClassVar[int]
    STORE_CAPACITY_FIELD_NUMBER: _ClassVar[int]
    ok: bool
    error: str
    store_used: int
    store_capacity: int
    def __init__(self, ok: _Optional[bool] = ..., error: _Optional[str] = ..., store_used: _Optional[int] = ..., store_capacity: _Optional[int] = ...) -> None: ...

class LocateObjectRequest(_message.Message):
    __slots__ = ("object_id", "from_raylet")
    OBJECT_ID_FIELD_NUMBER: _ClassVar[int]
    FROM_RAYLET_FIELD_NUMBER: _ClassVar[int]
    object_id: bytes
    from_raylet: _common_pb2.Address
    def __init__(self, object_id: _Optional[bytes] = ..., from_raylet: _Optional[_Union[_common_pb2.Address, _Mapping]] = ...) -> None: ...

class LocateObjectReply(_message.Message):
    __slots__ = ("found", "path", "spilled", "size", "error")
    FOUND_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    SPILLED_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    found: bool
    path: str
    spilled: bool
    size: int
    error: str
    def __init__(self, found: _Optional[bool] = ..., path: _Optional[str] = ..., spilled: _Optional[bool] = ..., size: _Optional[int] = ..., error: _Optional[str] = ...) -> None: ...

class FreeObjectsRequest(_message.Message):
    __slots__ = ("object_ids", "reason")
    OBJECT_IDS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    object_ids: _containers.RepeatedScalarFieldContainer[bytes]
    reason: str
    def __init__(self, object_ids: _Optional[_Iterable[bytes]] = ..., reason: _Optional[str] = ...) -> None: ...

class OwnerExitingRequest(_message.Message):
    __slots__ = ("owner",)
    OWNER_FIELD_NUMBER: _ClassVar[int]
    owner: _common_pb2.Address
    def __init__(self, owner: _Optional[_Union[_common_pb2.Address, _Mapping]] = ...) -> None: ...

class PullObjectRequest(_message.Message):
    __slots__ = ("object_id", "to_node_id", "to_raylet", "data_path")
    OBJECT_ID_FIELD_NUMBER: _ClassVar[int]
    TO_NODE_ID_FIELD_NUMBER: _ClassVar[int]
    TO_RAYLET_FIELD_NUMBER: _ClassVar[int]
    DATA_PATH_FIELD_NUMBER: _ClassVar[int]
    object_id: bytes
    to_node_id: str
    to_raylet: _common_pb2.Address
    data_path: bool
    def __init__(self, object_id: _Optional[bytes] = ..., to_node_id: _Optional[str] = ..., to_raylet: _Optional[_Union[_common_pb2.Address, _Mapping]] = ..., data_path: _Optional[bool] = ...) -> None: ...

class ObjectChunk(_message.Message):
    __slots__ = ("total_size", "data", "owner", "call_site", "data_port")
    TOTAL_SIZE_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    CALL_SITE_FIELD_NUMBER: _ClassVar[int]
    DATA_PORT_FIELD_NUMBER: _ClassVar[int]
    total_size: int
    data: bytes
    owner: _common_pb2.Address
    call_site: str
    data_port: int
    def __init__(self, total_size: _Optional[int] = ..., data: _Optional[bytes] = ..., owner: _Optional[_Union[_common_pb2.Address, _Mapping]] = ..., call_site: _Optional[str] = ..., data_port: _Optional[int] = ...) -> None: ...

class GetWorkerExitRequest(_message.Message):
    __slots__ = ("worker_id", "timeout_s")
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_S_FIELD_NUMBER: _ClassVar[int]
    worker_id: str
    timeout_s: float
    def __init__(self, worker_id: _Optional[str] = ..., timeout_s: _Optional[float] = ...) -> None: ...

class WorkerExitInfo(_message.Message):
    __slots__ = ("exited", "exit_code", "signal", "meaning", "node_memory_percent", "pid", "running_task_id", "running_attempt")
    EXITED_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    SIGNAL_FIELD_NUMBER: _ClassVar[int]
    MEANING_FIELD_NUMBER: _ClassVar[int]
    NODE_MEMORY_PERCENT_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    RUNNING_TASK_ID_FIELD_NUMBER: _ClassVar[int]
    RUNNING_ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    exited: bool
    exit_code: int
    signal: str
    meaning: str
    node_memory_percent: float
    pid: int
    running_task_id: str
    running_attempt: int
    def __init__(self, exited: _Optional[bool] = ..., exit_code: _Optional[int] = ..., signal: _Optional[str] = ..., meaning: _Optional[str] = ..., node_memory_percent: _Optional[float] = ..., pid: _Optional[int] = ..., running_task_id: _Optional[str] = ..., running_attempt: _Optional[int] = ...) -> None: ...

class GetNodeStatsRequest(_message.Message):
    __slots__ = ("include_objects", "include_references")
    INCLUDE_OBJECTS_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_REFERENCES_FIELD_NUMBER: _ClassVar[int]
    include_objects: bool
    include_references: bool
    def __init__(self, include_objects: _Optional[bool] = ..., include_references: _Optional[bool] = ...) -> None: ...

class WorkerRow(_message.Message):
    __slots__ = ("worker_id", "pid", "state", "actor_id", "exit_code", "exit_signal", "exit_meaning", "started_at", "ended_at")
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    ACTOR_ID_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    EXIT_SIGNAL_FIELD_NUMBER: _ClassVar[int]
    EXIT_MEANING_FIELD_NUMBER: _ClassVar[int]
    STARTED_AT_FIELD_NUMBER: _ClassVar[int]
    ENDED_AT_FIELD_NUMBER: _ClassVar[int]
    worker_id: str
    pid: int
    state: str
    actor_id: str
    exit_code: int
    exit_signal: str
    exit_meaning: str
    started_at: float
    ended_at: float
    def __init__(self, worker_id: _Optional[str] = ..., pid: _Optional[int] = ..., state: _Optional[str] = ..., actor_id: _Optional[str] = ..., exit_code: _Optional[int] = ..., exit_signal: _Optional[str] = ..., exit_meaning: _Optional[str] = ..., started_at: _Optional[float] = ..., ended_at: _Optional[float] = ...) -> None: ...

class StoredObjectRow(_message.Message):
    __slots__ = ("object_id", "size", "owner", "call_site", "spilled", "pinned", "primary")
    OBJECT_ID_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    CALL_SITE_FIELD_NUMBER: _ClassVar[int]
    SPILLED_FIELD_NUMBER: _ClassVar[int]
    PINNED_FIELD_NUMBER: _ClassVar[int]
    PRIMARY_FIELD_NUMBER: _ClassVar[int]
    object_id: bytes
    size: int
    owner: str
    call_site: str
    spilled: bool
    pinned: bool
    primary: bool
    def __init__(self, object_id: _Optional[bytes] = ..., size: _Optional[int] = ..., owner: _Optional[str] = ..., call_site: _Optional[str] = ..., spilled: _Optional[bool] = ..., pinned: _Optional[bool] = ..., primary: _Optional[bool] = ...) -> None: ...

class NodeStats(_message.Message):
    __slots__ = ("node_id", "ip", "pid", "resources_total", "resources_available", "store_used", "store_capacity", "num_objects", "spilled_bytes", "spilled_count", "restored_bytes", "restored_count", "workers", "pending_leases", "infeasible_leases", "objects", "reference_tables", "session_dir", "leases_reclaimed", "freed_count", "freed_bytes", "freed_by_reason", "store_pool_bytes", "store_pool_files", "store_pool_reused", "host_cpu_percent", "host_memory_percent")
    class ResourcesTotalEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    class ResourcesAvailableEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    class FreedByReasonEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    IP_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    RESOURCES_TOTAL_FIELD_NUMBER: _ClassVar[int]
    RESOURCES_AVAILABLE_FIELD_NUMBER: _ClassVar[int]
    STORE_USED_FIELD_NUMBER: _ClassVar[int]
    STORE_CAPACITY_FIELD_NUMBER: _ClassVar[int]
    NUM_OBJECTS_FIELD_NUMBER: _ClassVar[int]
    SPILLED_BYTES_FIELD_NUMBER: _ClassVar[int]
    SPILLED_COUNT_FIELD_NUMBER: _ClassVar[int]
    RESTORED_BYTES_FIELD_NUMBER: _ClassVar[int]
    RESTORED_COUNT_FIELD_NUMBER: _ClassVar[int]
    WORKERS_FIELD_NUMBER: _ClassVar[int]
    PENDING_LEASES_FIELD_NUMBER: _ClassVar[int]
    INFEASIBLE_LEASES_FIELD_NUMBER: _ClassVar[int]
    OBJECTS_FIELD_NUMBER: _ClassVar[int]
    REFERENCE_TABLES_FIELD_NUMBER: _ClassVar[int]
    SESSION_DIR_FIELD_NUMBER: _ClassVar[int]
    LEASES_RECLAIMED_FIELD_NUMBER: _ClassVar[int]
    FREED_COUNT_FIELD_NUMBER: _ClassVar[int]
    FREED_BYTES_FIELD_NUMBER: _ClassVar[int]
    FREED_BY_REASON_FIELD_NUMBER: _ClassVar[int]
    STORE_POOL_BYTES_FIELD_NUMBER: _ClassVar[int]
    STORE_POOL_FILES_FIELD_NUMBER: _ClassVar[int]
    STORE_POOL_REUSED_FIELD_NUMBER: _ClassVar[int]
    HOST_CPU_PERCENT_FIELD_NUMBER: _ClassVar[int]
    HOST_MEMORY_PERCENT_FIELD_NUMBER: _ClassVar[int]
    node_id: str
    ip: str
    pid: int
    resources_total: _containers.ScalarMap[str, float]
    resources_available: _containers.ScalarMap[str, float]
    store_used: int
    store_capacity: int
    num_objects: int
    spilled_bytes: int
    spilled_count: int
    restored_bytes: int
    restored_count: int
    workers: _containers.RepeatedCompositeFieldContainer[WorkerRow]
    pending_leases: int
    infeasible_leases: int
    objects: _containers.RepeatedCompositeFieldContainer[StoredObjectRow]
    reference_tables: _containers.RepeatedScalarFieldContainer[bytes]
    session_dir: str
    leases_reclaimed: int
    freed_count: int
    freed_bytes: int
    freed_by_reason: _containers.ScalarMap[str, int]
    store_pool_bytes: int
    store_pool_files: int
    store_pool_reused: int
    host_cpu_percent: float
    host_memory_percent: float
    def __init__(self, node_id: _Optional[str] = ..., ip: _Optional[str] = ..., pid: _Optional[int] = ..., resources_total: _Optional[_Mapping[str, float]] = ..., resources_available: _Optional[_Mapping[str, float]] = ..., store_used: _Optional[int] = ..., store_capacity: _Optional[int] = ..., num_objects: _Optional[int] = ..., spilled_bytes: _Optional[int] = ..., spilled_count: _Optional[int] = ..., restored_bytes: _Optional[int] = ..., restored_count: _Optional[int] = ..., workers: _Optional[_Iterable[_Union[WorkerRow, _Mapping]]] = ..., pending_leases: _Optional[int] = ..., infeasible_leases: _Optional[int] = ..., objects: _Optional[_Iterable[_Union[StoredObjectRow, _Mapping]]] = ..., reference_tables: _Optional[_Iterable[bytes]] = ..., session_dir: _Optional[str] = ..., leases_reclaimed: _Optional[int] = ..., freed_count: _Optional[int] = ..., freed_bytes: _Optional[int] = ..., freed_by_reason: _Optional[_Mapping[str, int]] = ..., store_pool_bytes: _Optional[int] = ..., store_pool_files: _Optional[int] = ..., store_pool_reused: _Optional[int] = ..., host_cpu_percent: _Optional[float] = ..., host_memory_percent: _Optional[float] = ...) -> None: ...

class KillWorkerRequest(_message.Message):
    __slots__ = ("worker_id", "force")
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    FORCE_FIELD_NUMBER: _ClassVar[int]
    worker_id: str
    force: bool
    def __init__(self, worker_id: _Optional[str] = ..., force: _Optional[bool] = ...) -> None: ...

class StartActorWorkerRequest(_message.Message):
    __slots__ = ("actor_id", "resources", "job_id")
    class ResourcesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    ACTOR_ID_FIELD_NUMBER: _ClassVar[int]
    RESOURCES_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    actor_id: bytes
    resources: _containers.ScalarMap[str, float]
    job_id: bytes
    def __init__(self, actor_id: _Optional[bytes] = ..., resources: _Optional[_Mapping[str, float]] = ..., job_id: _Optional[bytes] = ...) -> None: ...

class WithdrawActorCreationRequest(_message.Message):
    __slots__ = ("actor_id", "cause")
    ACTOR_ID_FIELD_NUMBER: _ClassVar[int]
    CAUSE_FIELD_NUMBER: _ClassVar[int]
    actor_id: bytes
    cause: str
    def __init__(self, actor_id: _Optional[bytes] = ..., cause: _Optional[str] = ...) -> None: ...

class WithdrawActorCreationReply(_message.Message):
    __slots__ = ("withdrawn", "killed_worker_pids", "adopted")
    WITHDRAWN_FIELD_NUMBER: _ClassVar[int]
    KILLED_WORKER_PIDS_FIELD_NUMBER: _ClassVar[int]
    ADOPTED_FIELD_NUMBER: _ClassVar[int]
    withdrawn: int
    killed_worker_pids: _containers.RepeatedScalarFieldContainer[int]
    adopted: _containers.RepeatedCompositeFieldContainer[AdoptedActorWorker]
    def __init__(self, withdrawn: _Optional[int] = ..., killed_worker_pids: _Optional[_Iterable[int]] = ..., adopted: _Optional[_Iterable[_Union[AdoptedActorWorker, _Mapping]]] = ...) -> None: ...

class AdoptedActorWorker(_message.Message):
    __slots__ = ("actor_id", "worker")
    ACTOR_ID_FIELD_NUMBER: _ClassVar[int]
    WORKER_FIELD_NUMBER: _ClassVar[int]
    actor_id: bytes
    worker: _common_pb2.Address
    def __init__(self, actor_id: _Optional[bytes] = ..., worker: _Optional[_Union[_common_pb2.Address, _Mapping]] = ...) -> None: ...

class ReleaseUnusedActorWorkersRequest(_message.Message):
    __slots__ = ("keep_worker_ids", "cause", "adopt_actor_ids")
    KEEP_WORKER_IDS_FIELD_NUMBER: _ClassVar[int]
    CAUSE_FIELD_NUMBER: _ClassVar[int]
    ADOPT_ACTOR_IDS_FIELD_NUMBER: _ClassVar[int]
    keep_worker_ids: _containers.RepeatedScalarFieldContainer[str]
    cause: str
    adopt_actor_ids: _containers.RepeatedScalarFieldContainer[bytes]
    def __init__(self, keep_worker_ids: _Optional[_Iterable[str]] = ..., cause: _Optional[str] = ..., adopt_actor_ids: _Optional[_Iterable[bytes]] = ...) -> None: ...

class ShutdownNodeRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ReadSessionFilesRequest(_message.Message):
    __slots__ = ("subdir", "offset", "keys")
    SUBDIR_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    KEYS_FIELD_NUMBER: _ClassVar[int]
    subdir: str
    offset: int
    keys: _containers.RepeatedScalarFieldContainer[bytes]
    def __init__(self, subdir: _Optional[str] = ..., offset: _Optional[int] = ..., keys: _Optional[_Iterable[bytes]] = ...) -> None: ...

class FileChunk(_message.Message):
    __slots__ = ("name", "data")
    NAME_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    name: str
    data: bytes
    def __init__(self, name: _Optional[str] = ..., data: _Optional[bytes] = ...) -> None: ...
