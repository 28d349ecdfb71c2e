from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Trace(_message.Message):
    __slots__ = ("packet",)
    PACKET_FIELD_NUMBER: _ClassVar[int]
    packet: _containers.RepeatedCompositeFieldContainer[TracePacket]
    def __init__(self, packet: _Optional[_Iterable[_Union[TracePacket, _Mapping]]] = ...) -> None: ...

class TracePacket(_message.Message):
    __slots__ = ("timestamp", "trusted_packet_sequence_id", "track_event", "sequence_flags", "track_descriptor")
    TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    TRUSTED_PACKET_SEQUENCE_ID_FIELD_NUMBER: _ClassVar[int]
    TRACK_EVENT_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_FLAGS_FIELD_NUMBER: _ClassVar[int]
    TRACK_DESCRIPTOR_FIELD_NUMBER: _ClassVar[int]
    timestamp: int
    trusted_packet_sequence_id: int
    track_event: TrackEvent
    sequence_flags: int
    track_descriptor: TrackDescriptor
    def __init__(self, timestamp: _Optional[int] = ..., trusted_packet_sequence_id: _Optional[int] = ..., track_event: _Optional[_Union[TrackEvent, _Mapping]] = ..., sequence_flags: _Optional[int] = ..., track_descriptor: _Optional[_Union[TrackDescriptor, _Mapping]] = ...) -> None: ...

class TrackDescriptor(_message.Message):
    __slots__ = ("uuid", "name", "process", "thread", "parent_uuid")
    UUID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    PROCESS_FIELD_NUMBER: _ClassVar[int]
    THREAD_FIELD_NUMBER: _ClassVar[int]
    PARENT_UUID_FIELD_NUMBER: _ClassVar[int]
    uuid: int
    name: str
    process: ProcessDescriptor
    thread: ThreadDescriptor
    parent_uuid: int
    def __init__(self, uuid: _Optional[int] = ..., name: _Optional[str] = ..., process: _Optional[_Union[ProcessDescriptor, _Mapping]] = ..., thread: _Optional[_Union[ThreadDescriptor, _Mapping]] = ..., parent_uuid: _Optional[int] = ...) -> None: ...

class ProcessDescriptor(_message.Message):
    __slots__ = ("pid", "process_name")
    PID_FIELD_NUMBER: _ClassVar[int]
    PROCESS_NAME_FIELD_NUMBER: _ClassVar[int]
    pid: int
    process_name: str
    def __init__(self, pid: _Optional[int] = ..., process_name: _Optional[str] = ...) -> None: ...

class ThreadDescriptor(_message.Message):
    __slots__ = ("pid", "tid", "thread_name")
    PID_FIELD_NUMBER: _ClassVar[int]
    TID_FIELD_NUMBER: _ClassVar[int]
    THREAD_NAME_FIELD_NUMBER: _ClassVar[int]
    pid: int
    tid: int
    thread_name: str
    def __init__(self, pid: _Optional[int] = ..., tid: _Optional[int] = ..., thread_name: _Optional[str] = ...) -> None: ...

class TrackEvent(_message.Message):
    __slots__ = ("debug_annotations", "type", "track_uuid", "categories", "name", "flow_ids", "terminating_flow_ids")
    class Type(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        TYPE_UNSPECIFIED: _ClassVar[TrackEvent.Type]
        TYPE_SLICE_BEGIN: _ClassVar[TrackEvent.Type]
        TYPE_SLICE_END: _ClassVar[TrackEvent.Type]
        TYPE_INSTANT: _ClassVar[TrackEvent.Type]
    TYPE_UNSPECIFIED: TrackEvent.Type
    TYPE_SLICE_BEGIN: TrackEvent.Type
    TYPE_SLICE_END: TrackEvent.Type
    TYPE_INSTANT: TrackEvent.Type
    DEBUG_ANNOTATIONS_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    TRACK_UUID_FIELD_NUMBER: _ClassVar[int]
    CATEGORIES_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    FLOW_IDS_FIELD_NUMBER: _ClassVar[int]
    TERMINATING_FLOW_IDS_FIELD_NUMBER: _ClassVar[int]
    debug_annotations: _containers.RepeatedCompositeFieldContainer[DebugAnnotation]
    type: TrackEvent.Type
    track_uuid: int
    categories: _containers.RepeatedScalarFieldContainer[str]
    name: str
    flow_ids: _containers.RepeatedScalarFieldContainer[int]
    terminating_flow_ids: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, debug_annotations: _Optional[_Iterable[_Union[DebugAnnotation, _Mapping]]] = ..., type: _Optional[_Union[TrackEvent.Type, str]] = ..., track_uuid: _Optional[int] = ..., categories: _Optional[_Iterable[str]] = ..., name: _Optional[str] = ..., flow_ids: _Optional[_Iterable[int]] = ..., terminating_flow_ids: _Optional[_Iterable[int]] = ...) -> None: ...

class DebugAnnotation(_message.Message):
    __slots__ = ("name", "bool_value", "uint_value", "int_value", "double_value", "string_value")
    NAME_FIELD_NUMBER: _ClassVar[int]
    BOOL_VALUE_FIELD_NUMBER: _ClassVar[int]
    UINT_VALUE_FIELD_NUMBER: _ClassVar[int]
    INT_VALUE_FIELD_NUMBER: _ClassVar[int]
    DOUBLE_VALUE_FIELD_NUMBER: _ClassVar[int]
    STRING_VALUE_FIELD_NUMBER: _ClassVar[int]
    name: str
    bool_value: bool
    uint_value: int
    int_value: int
    double_value: float
    string_value: str
    def __init__(self, name: _Optional[str] = ..., bool_value: _Optional[bool] = ..., uint_value: _Optional[int] = ..., int_value: _Optional[int] = ..., double_value: _Optional[float] = ..., string_value: _Optional[str] = ...) -> None: ...
