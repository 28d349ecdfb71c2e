from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class TaskKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    NORMAL: _ClassVar[TaskKind]
    ACTOR_CREATION: _ClassVar[TaskKind]
    ACTOR_METHOD: _ClassVar[TaskKind]
NORMAL: TaskKind
ACTOR_CREATION: TaskKind
ACTOR_METHOD: TaskKind

class Address(_message.Message):
    __slots__ = ("node_id", "ip", "port", "worker_id", "pid", "task_port")
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    IP_FIELD_NUMBER: _ClassVar[int]
    PORT_FIELD_NUMBER: _ClassVar[int]
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    TASK_PORT_FIELD_NUMBER: _ClassVar[int]
    node_id: str
    ip: str
    port: int
    worker_id: str
    pid: int
    task_port: int
    def __init__(self, node_id: _Optional[str] = ..., ip: _Optional[str] = ..., port: _Optional[int] = ..., worker_id: _Optional[str] = ..., pid: _Optional[int] = ..., task_port: _Optional[int] = ...) -> None: ...

class SerializedValue(_message.Message):
    __slots__ = ("inband", "buffers", "is_error")
    INBAND_FIELD_NUMBER: _ClassVar[int]
    BUFFERS_FIELD_NUMBER: _ClassVar[int]
    IS_ERROR_FIELD_NUMBER: _ClassVar[int]
    inband: bytes
    buffers: _containers.RepeatedScalarFieldContainer[bytes]
    is_error: bool
    def __init__(self, inband: _Optional[bytes] = ..., buffers: _Optional[_Iterable[bytes]] = ..., is_error: _Optional[bool] = ...) -> None: ...

class ObjectRefInfo(_message.Message):
    __slots__ = ("object_id", "owner", "call_site")
    OBJECT_ID_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    CALL_SITE_FIELD_NUMBER: _ClassVar[int]
    object_id: bytes
    owner: Address
    call_site: str
    def __init__(self, object_id: _Optional[bytes] = ..., owner: _Optional[_Union[Address, _Mapping]] = ..., call_site: _Optional[str] = ...) -> None: ...

class ObjectValue(_message.Message):
    __slots__ = ("object_id", "inline_value", "store_node_id", "size", "contained_refs", "store_raylet")
    OBJECT_ID_FIELD_NUMBER: _ClassVar[int]
    INLINE_VALUE_FIELD_NUMBER: _ClassVar[int]
    STORE_NODE_ID_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    CONTAINED_REFS_FIELD_NUMBER: _ClassVar[int]
    STORE_RAYLET_FIELD_NUMBER: _ClassVar[int]
    object_id: bytes
    inline_value: SerializedValue
    store_node_id: str
    size: int
    contained_refs: _containers.RepeatedCompositeFieldContainer[ObjectRefInfo]
    store_raylet: Address
    def __init__(self, object_id: _Optional[bytes] = ..., inline_value: _Optional[_Union[SerializedValue, _Mapping]] = ..., store_node_id: _Optional[str] = ..., size: _Optional[int] = ..., contained_refs: _Optional[_Iterable[_Union[ObjectRefInfo, _Mapping]]] = ..., store_raylet: _Optional[_Union[Address, _Mapping]] = ...) -> None: ...

class ActorOptions(_message.Message):
    __slots__ = ("max_restarts", "max_task_retries", "max_concurrency", "name", "namespace", "detached", "class_name")
    MAX_RESTARTS_FIELD_NUMBER: _ClassVar[int]
    MAX_TASK_RETRIES_FIELD_NUMBER: _ClassVar[int]
    MAX_CONCURRENCY_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    DETACHED_FIELD_NUMBER: _ClassVar[int]
    CLASS_NAME_FIELD_NUMBER: _ClassVar[int]
    max_restarts: int
    max_task_retries: int
    max_concurrency: int
    name: str
    namespace: str
    detached: bool
    class_name: str
    def __init__(self, max_restarts: _Optional[int] = ..., max_task_retries: _Optional[int] = ..., max_concurrency: _Optional[int] = ..., name: _Optional[str] = ..., namespace: _Optional[str] = ..., detached: _Optional[bool] = ..., class_name: _Optional[str] = ...) -> None: ...

class TaskArg(_message.Message):
    __slots__ = ("value", "is_ref")
    VALUE_FIELD_NUMBER: _ClassVar[int]
    IS_REF_FIELD_NUMBER: _ClassVar[int]
    value: ObjectValue
    is_ref: bool
    def __init__(self, value: _Optional[_Union[ObjectValue, _Mapping]] = ..., is_ref: _Optional[bool] = ...) -> None: ...

class TaskSpec(_message.Message):
    __slots__ = ("task_id", "job_id", "kind", "function_id", "function_name", "args", "kwarg_names", "num_returns", "resources", "max_retries", "retry_exceptions", "attempt", "caller", "call_site", "actor_id", "method_name", "sequence_number", "actor_options", "parent_task_id", "depth", "namespace", "trace_id", "parent_span_id", "trace_flags", "trace_state", "submitted_at", "dispatched_at")
    class ResourcesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    FUNCTION_ID_FIELD_NUMBER: _ClassVar[int]
    FUNCTION_NAME_FIELD_NUMBER: _ClassVar[int]
    ARGS_FIELD_NUMBER: _ClassVar[int]
    KWARG_NAMES_FIELD_NUMBER: _ClassVar[int]
    NUM_RETURNS_FIELD_NUMBER: _ClassVar[int]
    RESOURCES_FIELD_NUMBER: _ClassVar[int]
    MAX_RETRIES_FIELD_NUMBER: _ClassVar[int]
    RETRY_EXCEPTIONS_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    CALLER_FIELD_NUMBER: _ClassVar[int]
    CALL_SITE_FIELD_NUMBER: _ClassVar[int]
    ACTOR_ID_FIELD_NUMBER: _ClassVar[int]
    METHOD_NAME_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_NUMBER_FIELD_NUMBER: _ClassVar[int]
    ACTOR_OPTIONS_FIELD_NUMBER: _ClassVar[int]
    PARENT_TASK_ID_FIELD_NUMBER: _ClassVar[int]
    DEPTH_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    TRACE_ID_FIELD_NUMBER: _ClassVar[int]
    PARENT_SPAN_ID_FIELD_NUMBER: _ClassVar[int]
    TRACE_FLAGS_FIELD_NUMBER: _ClassVar[int]
    TRACE_STATE_FIELD_NUMBER: _ClassVar[int]
    SUBMITTED_AT_FIELD_NUMBER: _ClassVar[int]
    DISPATCHED_AT_FIELD_NUMBER: _ClassVar[int]
    task_id: bytes
    job_id: bytes
    kind: TaskKind
    function_id: str
    function_name: str
    args: _containers.RepeatedCompositeFieldContainer[TaskArg]
    kwarg_names: _containers.RepeatedScalarFieldContainer[str]
    num_returns: int
    resources: _containers.ScalarMap[str, float]
    max_retries: int
    retry_exceptions: bool
    attempt: int
    caller: Address
    call_site: str
    actor_id: bytes
    method_name: str
    sequence_number: int
    actor_options: ActorOptions
    parent_task_id: bytes
    depth: int
    namespace: str
    trace_id: bytes
    parent_span_id: int
    trace_flags: int
    trace_state: str
    submitted_at: float
    dispatched_at: float
    def __init__(self, task_id: _Optional[bytes] = ..., job_id: _Optional[bytes] = ..., kind: _Optional[_Union[TaskKind, str]] = ..., function_id: _Optional[str] = ..., function_name: _Optional[str] = ..., args: _Optional[_Iterable[_Union[TaskArg, _Mapping]]] = ..., kwarg_names: _Optional[_Iterable[str]] = ..., num_returns: _Optional[int] = ..., resources: _Optional[_Mapping[str, float]] = ..., max_retries: _Optional[int] = ..., retry_exceptions: _Optional[bool] = ..., attempt: _Optional[int] = ..., caller: _Optional[_Union[Address, _Mapping]] = ..., call_site: _Optional[str] = ..., actor_id: _Optional[bytes] = ..., method_name: _Optional[str] = ..., sequence_number: _Optional[int] = ..., actor_options: _Optional[_Union[ActorOptions, _Mapping]] = ..., parent_task_id: _Optional[bytes] = ..., depth: _Optional[int] = ..., namespace: _Optional[str] = ..., trace_id: _Optional[bytes] = ..., parent_span_id: _Optional[int] = ..., trace_flags: _Optional[int] = ..., trace_state: _Optional[str] = ..., submitted_at: _Optional[float] = ..., dispatched_at: _Optional[float] = ...) -> None: ...

class TaskResult(_message.Message):
    __slots__ = ("task_id", "attempt", "returns", "is_application_error", "requeued", "worker_id", "worker_pid", "node_id", "retryable_error", "cancelled", "started_at", "finished_at", "error_type", "error_message", "report_seq", "reported_through")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    RETURNS_FIELD_NUMBER: _ClassVar[int]
    IS_APPLICATION_ERROR_FIELD_NUMBER: _ClassVar[int]
    REQUEUED_FIELD_NUMBER: _ClassVar[int]
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    WORKER_PID_FIELD_NUMBER: _ClassVar[int]
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    RETRYABLE_ERROR_FIELD_NUMBER: _ClassVar[int]
    CANCELLED_FIELD_NUMBER: _ClassVar[int]
    STARTED_AT_FIELD_NUMBER: _ClassVar[int]
    FINISHED_AT_FIELD_NUMBER: _ClassVar[int]
    ERROR_TYPE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    REPORT_SEQ_FIELD_NUMBER: _ClassVar[int]
    REPORTED_THROUGH_FIELD_NUMBER: _ClassVar[int]
    task_id: bytes
    attempt: int
    returns: _containers.RepeatedCompositeFieldContainer[ObjectValue]
    is_application_error: bool
    requeued: bool
    worker_id: str
    worker_pid: int
    node_id: str
    retryable_error: bool
    cancelled: bool
    started_at: float
    finished_at: float
    error_type: str
    error_message: str
    report_seq: int
    reported_through: int
    def __init__(self, task_id: _Optional[bytes] = ..., attempt: _Optional[int] = ..., returns: _Optional[_Iterable[_Union[ObjectValue, _Mapping]]] = ..., is_application_error: _Optional[bool] = ..., requeued: _Optional[bool] = ..., worker_id: _Optional[str] = ..., worker_pid: _Optional[int] = ..., node_id: _Optional[str] = ..., retryable_error: _Optional[bool] = ..., cancelled: _Optional[bool] = ..., started_at: _Optional[float] = ..., finished_at: _Optional[float] = ..., error_type: _Optional[str] = ..., error_message: _Optional[str] = ..., report_seq: _Optional[int] = ..., reported_through: _Optional[int] = ...) -> None: ...

class Empty(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...
