from tracedray._proto.v1 import common_pb2 as _common_pb2
from tracedray._proto.v1 import debug_pb2 as _debug_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class TaskBatch(_message.Message):
    __slots__ = ("tasks",)
    TASKS_FIELD_NUMBER: _ClassVar[int]
    tasks: _containers.RepeatedCompositeFieldContainer[_common_pb2.TaskSpec]
    def __init__(self, tasks: _Optional[_Iterable[_Union[_common_pb2.TaskSpec, _Mapping]]] = ...) -> None: ...

class ResultBatch(_message.Message):
    __slots__ = ("results",)
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[_common_pb2.TaskResult]
    def __init__(self, results: _Optional[_Iterable[_Union[_common_pb2.TaskResult, _Mapping]]] = ...) -> None: ...

class GetObjectRequest(_message.Message):
    __slots__ = ("object_id", "timeout_s", "requester")
    OBJECT_ID_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_S_FIELD_NUMBER: _ClassVar[int]
    REQUESTER_FIELD_NUMBER: _ClassVar[int]
    object_id: bytes
    timeout_s: float
    requester: _common_pb2.Address
    def __init__(self, object_id: _Optional[bytes] = ..., timeout_s: _Optional[float] = ..., requester: _Optional[_Union[_common_pb2.Address, _Mapping]] = ...) -> None: ...

class GetObjectReply(_message.Message):
    __slots__ = ("status", "value")
    class Status(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        READY: _ClassVar[GetObjectReply.Status]
        PENDING: _ClassVar[GetObjectReply.Status]
        UNKNOWN: _ClassVar[GetObjectReply.Status]
    READY: GetObjectReply.Status
    PENDING: GetObjectReply.Status
    UNKNOWN: GetObjectReply.Status
    STATUS_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    status: GetObjectReply.Status
    value: _common_pb2.ObjectValue
    def __init__(self, status: _Optional[_Union[GetObjectReply.Status, str]] = ..., value: _Optional[_Union[_common_pb2.ObjectValue, _Mapping]] = ...) -> None: ...

class ReferenceUpdate(_message.Message):
    __slots__ = ("object_id", "borrower", "delta")
    OBJECT_ID_FIELD_NUMBER: _ClassVar[int]
    BORROWER_FIELD_NUMBER: _ClassVar[int]
    DELTA_FIELD_NUMBER: _ClassVar[int]
    object_id: bytes
    borrower: str
    delta: int
    def __init__(self, object_id: _Optional[bytes] = ..., borrower: _Optional[str] = ..., delta: _Optional[int] = ...) -> None: ...

class UpdateReferencesRequest(_message.Message):
    __slots__ = ("updates",)
    UPDATES_FIELD_NUMBER: _ClassVar[int]
    updates: _containers.RepeatedCompositeFieldContainer[ReferenceUpdate]
    def __init__(self, updates: _Optional[_Iterable[_Union[ReferenceUpdate, _Mapping]]] = ...) -> None: ...

class CancelTaskRequest(_message.Message):
    __slots__ = ("task_id", "force", "requeue", "recursive")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    FORCE_FIELD_NUMBER: _ClassVar[int]
    REQUEUE_FIELD_NUMBER: _ClassVar[int]
    RECURSIVE_FIELD_NUMBER: _ClassVar[int]
    task_id: bytes
    force: bool
    requeue: bool
    recursive: bool
    def __init__(self, task_id: _Optional[bytes] = ..., force: _Optional[bool] = ..., requeue: _Optional[bool] = ..., recursive: _Optional[bool] = ...) -> None: ...

class CancelTaskReply(_message.Message):
    __slots__ = ("found",)
    FOUND_FIELD_NUMBER: _ClassVar[int]
    found: bool
    def __init__(self, found: _Optional[bool] = ...) -> None: ...

class GetReferenceTableRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ReferenceRow(_message.Message):
    __slots__ = ("object_id", "reference_type", "size", "call_site", "task_status", "node_id", "owner_worker_id", "local_refs", "pending_tasks", "borrowers")
    OBJECT_ID_FIELD_NUMBER: _ClassVar[int]
    REFERENCE_TYPE_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    CALL_SITE_FIELD_NUMBER: _ClassVar[int]
    TASK_STATUS_FIELD_NUMBER: _ClassVar[int]
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    OWNER_WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    LOCAL_REFS_FIELD_NUMBER: _ClassVar[int]
    PENDING_TASKS_FIELD_NUMBER: _ClassVar[int]
    BORROWERS_FIELD_NUMBER: _ClassVar[int]
    object_id: bytes
    reference_type: str
    size: int
    call_site: str
    task_status: str
    node_id: str
    owner_worker_id: str
    local_refs: int
    pending_tasks: int
    borrowers: int
    def __init__(self, object_id: _Optional[bytes] = ..., reference_type: _Optional[str] = ..., size: _Optional[int] = ..., call_site: _Optional[str] = ..., task_status: _Optional[str] = ..., node_id: _Optional[str] = ..., owner_worker_id: _Optional[str] = ..., local_refs: _Optional[int] = ..., pending_tasks: _Optional[int] = ..., borrowers: _Optional[int] = ...) -> None: ...

class ReferenceTable(_message.Message):
    __slots__ = ("address", "component", "ip", "rows", "actor_id")
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    COMPONENT_FIELD_NUMBER: _ClassVar[int]
    IP_FIELD_NUMBER: _ClassVar[int]
    ROWS_FIELD_NUMBER: _ClassVar[int]
    ACTOR_ID_FIELD_NUMBER: _ClassVar[int]
    address: _common_pb2.Address
    component: str
    ip: str
    rows: _containers.RepeatedCompositeFieldContainer[ReferenceRow]
    actor_id: str
    def __init__(self, address: _Optional[_Union[_common_pb2.Address, _Mapping]] = ..., component: _Optional[str] = ..., ip: _Optional[str] = ..., rows: _Optional[_Iterable[_Union[ReferenceRow, _Mapping]]] = ..., actor_id: _Optional[str] = ...) -> None: ...

class ExitRequest(_message.Message):
    __slots__ = ("reason",)
    REASON_FIELD_NUMBER: _ClassVar[int]
    reason: str
    def __init__(self, reason: _Optional[str] = ...) -> None: ...

class GetExitBlockersRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ExitBlockers(_message.Message):
    __slots__ = ("reasons",)
    REASONS_FIELD_NUMBER: _ClassVar[int]
    reasons: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, reasons: _Optional[_Iterable[str]] = ...) -> None: ...

class OutputLine(_message.Message):
    __slots__ = ("task_name", "pid", "stream", "line", "ip")
    TASK_NAME_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    STREAM_FIELD_NUMBER: _ClassVar[int]
    LINE_FIELD_NUMBER: _ClassVar[int]
    IP_FIELD_NUMBER: _ClassVar[int]
    task_name: str
    pid: int
    stream: str
    line: str
    ip: str
    def __init__(self, task_name: _Optional[str] = ..., pid: _Optional[int] = ..., stream: _Optional[str] = ..., line: _Optional[str] = ..., ip: _Optional[str] = ...) -> None: ...

class OutputBatch(_message.Message):
    __slots__ = ("lines",)
    LINES_FIELD_NUMBER: _ClassVar[int]
    lines: _containers.RepeatedCompositeFieldContainer[OutputLine]
    def __init__(self, lines: _Optional[_Iterable[_Union[OutputLine, _Mapping]]] = ...) -> None: ...
