from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class DumpStacksRequest(_message.Message):
    __slots__ = ("native", "timeout_s", "include_drivers", "breakpoints_only")
    NATIVE_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_S_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_DRIVERS_FIELD_NUMBER: _ClassVar[int]
    BREAKPOINTS_ONLY_FIELD_NUMBER: _ClassVar[int]
    native: bool
    timeout_s: float
    include_drivers: bool
    breakpoints_only: bool
    def __init__(self, native: _Optional[bool] = ..., timeout_s: _Optional[float] = ..., include_drivers: _Optional[bool] = ..., breakpoints_only: _Optional[bool] = ...) -> None: ...

class Breakpoint(_message.Message):
    __slots__ = ("breakpoint_id", "host", "port", "token", "task_id", "attempt", "function", "actor_id", "job_id", "pid", "worker_id", "node_id", "filename", "lineno", "since", "post_mortem", "error")
    BREAKPOINT_ID_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    PORT_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    FUNCTION_FIELD_NUMBER: _ClassVar[int]
    ACTOR_ID_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    FILENAME_FIELD_NUMBER: _ClassVar[int]
    LINENO_FIELD_NUMBER: _ClassVar[int]
    SINCE_FIELD_NUMBER: _ClassVar[int]
    POST_MORTEM_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    breakpoint_id: str
    host: str
    port: int
    token: str
    task_id: str
    attempt: int
    function: str
    actor_id: str
    job_id: str
    pid: int
    worker_id: str
    node_id: str
    filename: str
    lineno: int
    since: float
    post_mortem: bool
    error: str
    def __init__(self, breakpoint_id: _Optional[str] = ..., host: _Optional[str] = ..., port: _Optional[int] = ..., token: _Optional[str] = ..., task_id: _Optional[str] = ..., attempt: _Optional[int] = ..., function: _Optional[str] = ..., actor_id: _Optional[str] = ..., job_id: _Optional[str] = ..., pid: _Optional[int] = ..., worker_id: _Optional[str] = ..., node_id: _Optional[str] = ..., filename: _Optional[str] = ..., lineno: _Optional[int] = ..., since: _Optional[float] = ..., post_mortem: _Optional[bool] = ..., error: _Optional[str] = ...) -> None: ...

class StackFrame(_message.Message):
    __slots__ = ("filename", "lineno", "function", "line")
    FILENAME_FIELD_NUMBER: _ClassVar[int]
    LINENO_FIELD_NUMBER: _ClassVar[int]
    FUNCTION_FIELD_NUMBER: _ClassVar[int]
    LINE_FIELD_NUMBER: _ClassVar[int]
    filename: str
    lineno: int
    function: str
    line: str
    def __init__(self, filename: _Optional[str] = ..., lineno: _Optional[int] = ..., function: _Optional[str] = ..., line: _Optional[str] = ...) -> None: ...

class RunningTask(_message.Message):
    __slots__ = ("task_id", "attempt", "function", "kind", "actor_id", "started_at", "trace_id", "thread_id", "job_id")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    FUNCTION_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    ACTOR_ID_FIELD_NUMBER: _ClassVar[int]
    STARTED_AT_FIELD_NUMBER: _ClassVar[int]
    TRACE_ID_FIELD_NUMBER: _ClassVar[int]
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    attempt: int
    function: str
    kind: str
    actor_id: str
    started_at: float
    trace_id: str
    thread_id: int
    job_id: str
    def __init__(self, task_id: _Optional[str] = ..., attempt: _Optional[int] = ..., function: _Optional[str] = ..., kind: _Optional[str] = ..., actor_id: _Optional[str] = ..., started_at: _Optional[float] = ..., trace_id: _Optional[str] = ..., thread_id: _Optional[int] = ..., job_id: _Optional[str] = ...) -> None: ...

class ThreadStack(_message.Message):
    __slots__ = ("thread_id", "name", "daemon", "frames", "native_frames")
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    DAEMON_FIELD_NUMBER: _ClassVar[int]
    FRAMES_FIELD_NUMBER: _ClassVar[int]
    NATIVE_FRAMES_FIELD_NUMBER: _ClassVar[int]
    thread_id: int
    name: str
    daemon: bool
    frames: _containers.RepeatedCompositeFieldContainer[StackFrame]
    native_frames: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, thread_id: _Optional[int] = ..., name: _Optional[str] = ..., daemon: _Optional[bool] = ..., frames: _Optional[_Iterable[_Union[StackFrame, _Mapping]]] = ..., native_frames: _Optional[_Iterable[str]] = ...) -> None: ...

class StackDump(_message.Message):
    __slots__ = ("worker_id", "pid", "component", "job_id", "actor_id", "actor_class", "dumped_at", "threads", "tasks", "breakpoints")
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    COMPONENT_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    ACTOR_ID_FIELD_NUMBER: _ClassVar[int]
    ACTOR_CLASS_FIELD_NUMBER: _ClassVar[int]
    DUMPED_AT_FIELD_NUMBER: _ClassVar[int]
    THREADS_FIELD_NUMBER: _ClassVar[int]
    TASKS_FIELD_NUMBER: _ClassVar[int]
    BREAKPOINTS_FIELD_NUMBER: _ClassVar[int]
    worker_id: str
    pid: int
    component: str
    job_id: str
    actor_id: str
    actor_class: str
    dumped_at: float
    threads: _containers.RepeatedCompositeFieldContainer[ThreadStack]
    tasks: _containers.RepeatedCompositeFieldContainer[RunningTask]
    breakpoints: _containers.RepeatedCompositeFieldContainer[Breakpoint]
    def __init__(self, worker_id: _Optional[str] = ..., pid: _Optional[int] = ..., component: _Optional[str] = ..., job_id: _Optional[str] = ..., actor_id: _Optional[str] = ..., actor_class: _Optional[str] = ..., dumped_at: _Optional[float] = ..., threads: _Optional[_Iterable[_Union[ThreadStack, _Mapping]]] = ..., tasks: _Optional[_Iterable[_Union[RunningTask, _Mapping]]] = ..., breakpoints: _Optional[_Iterable[_Union[Breakpoint, _Mapping]]] = ...) -> None: ...

class ProcessStackDump(_message.Message):
    __slots__ = ("worker_id", "pid", "component", "state", "dump", "error", "native_error", "actor_id")
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    COMPONENT_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    DUMP_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    NATIVE_ERROR_FIELD_NUMBER: _ClassVar[int]
    ACTOR_ID_FIELD_NUMBER: _ClassVar[int]
    worker_id: str
    pid: int
    component: str
    state: str
    dump: StackDump
    error: str
    native_error: str
    actor_id: str
    def __init__(self, worker_id: _Optional[str] = ..., pid: _Optional[int] = ..., component: _Optional[str] = ..., state: _Optional[str] = ..., dump: _Optional[_Union[StackDump, _Mapping]] = ..., error: _Optional[str] = ..., native_error: _Optional[str] = ..., actor_id: _Optional[str] = ...) -> None: ...

class NodeStackDumps(_message.Message):
    __slots__ = ("node_id", "ip", "processes")
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    IP_FIELD_NUMBER: _ClassVar[int]
    PROCESSES_FIELD_NUMBER: _ClassVar[int]
    node_id: str
    ip: str
    processes: _containers.RepeatedCompositeFieldContainer[ProcessStackDump]
    def __init__(self, node_id: _Optional[str] = ..., ip: _Optional[str] = ..., processes: _Optional[_Iterable[_Union[ProcessStackDump, _Mapping]]] = ...) -> None: ...
