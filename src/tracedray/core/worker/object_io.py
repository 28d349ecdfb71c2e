"""Moving values between this process and the node's shared-memory store.

Small values (< TRACEDRAY_INLINE_THRESHOLD_BYTES) travel inline in messages; larger
ones are written once into a shared-memory file and sealed by the local raylet.
Reads map the file read-only, so numpy arrays come back zero-copy.

A seal waits for the raylet's answer only when the store might refuse the object
(:func:`seal_mode`): the writer knows how full the store was at its last answered
seal and how much it sealed since without waiting. Otherwise the seal is sent and the
put returns; the raylet applies it before any lookup of the object.
"""

from __future__ import annotations

import enum
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from tracedray import config, logs
from tracedray._proto.v1 import common_pb2, raylet_pb2
from tracedray.core.object_store.writer import MappedFiles, MappedFilesStatistics
from tracedray.core.raylet.seal_channel import MAX_FREE_IDS, SealChannel, socket_name
from tracedray.core.serialization import Serialized, deserialize
from tracedray.exceptions import ObjectLostError, ObjectStoreFullError, RaySystemError

log = logs.get_logger(__name__)


@dataclass(frozen=True)
class ObjectIOStatistics:
    seals_waited: int  # seals that waited for the raylet's answer
    seals_sent: int  # seals sent without waiting (seal_mode)
    frees_sent: int  # frees of this node's objects sent over the seal socket
    mappings: MappedFilesStatistics


class SealMode(enum.Enum):
    WAIT = "wait"  # the store might refuse it: the put must raise ObjectStoreFullError
    SEND = "send"  # room enough: send the seal, do not wait


def seal_mode(size: int, room: int, capacity: int) -> SealMode:
    """Whether a seal of ``size`` bytes may go without waiting: only while a quarter of
    the store stays free after it, by the writer's own estimate ``room`` (room at the
    last answered seal, less what it sealed since)."""
    if capacity <= 0 or room - size < capacity // 4:
        return SealMode.WAIT
    return SealMode.SEND


class StoreRaylet(Protocol):
    """What ObjectIO asks of the local raylet over gRPC."""

    def seal_object(self, request: raylet_pb2.SealObjectRequest) -> raylet_pb2.SealObjectReply:
        ...

    def locate_object(self, request: raylet_pb2.LocateObjectRequest
                      ) -> raylet_pb2.LocateObjectReply:
        ...


class ObjectIO:
    def __init__(self, raylet: StoreRaylet, object_path_prefix: str, *, node_id: str,
                 raylet_address: common_pb2.Address, owner: common_pb2.Address,
                 release_dropped_refs: Callable[[], None],
                 after_loss: Callable[[common_pb2.ObjectValue], common_pb2.ObjectValue | None]
                 ) -> None:
        self._raylet = raylet
        self._object_path_prefix = object_path_prefix
        self._node_id = node_id
        self._raylet_address = raylet_address  # the local raylet's, in stored values
        self._owner = owner  # this process: the owner of what it puts
        self._release_dropped_refs = release_dropped_refs
        self._after_loss = after_loss  # the rebuilt value after a node loss, or None
        self.inline_threshold = config.INLINE_THRESHOLD.get()
        # Seals go over the raylet's Unix socket (seal_channel.py) unless it cannot be
        # reached; then over gRPC from then on.
        self._seals: SealChannel | None = SealChannel(socket_name(object_path_prefix))
        # The store's free room and capacity as of the last answered seal, less the
        # bytes sealed without waiting since (seal_mode).
        self._room_lock = threading.Lock()
        self._room = self._capacity = 0
        self._waited = self._sent = self._frees_sent = 0
        # Mappings of the files this process wrote, to write them again (writer.py),
        # within the pool's share of the store once its capacity is known.
        self._mappings = MappedFiles()

    def to_value(self, object_id: bytes, serialized: Serialized, *, call_site: str,
                 is_error: bool = False, owner: common_pb2.Address | None = None
                 ) -> common_pb2.ObjectValue:
        """Package a serialized value: inline, or sealed into the local store for its
        ``owner`` (a task's caller for its returns; by default this process), with
        which it goes (raylet/owner_death.py)."""
        size = serialized.size
        value = common_pb2.ObjectValue(object_id=object_id, size=size)
        if is_error or size < self.inline_threshold:
            value.inline_value.inband = serialized.inband
            value.inline_value.buffers.extend(bytes(b) for b in serialized.buffers)
            value.inline_value.is_error = is_error
        else:
            value.size = self._write_to_store(object_id, serialized, call_site,
                                              owner or self._owner)
            value.store_node_id = self._node_id
            value.store_raylet.CopyFrom(self._raylet_address)
        for ref in serialized.contained_refs:
            inner_owner = ref.owner_address
            info = value.contained_refs.add(object_id=ref.binary(), call_site=ref.call_site)
            if inner_owner is not None:
                info.owner.CopyFrom(inner_owner.to_proto())
        return value

    def _write_to_store(self, object_id: bytes, serialized: Serialized, call_site: str,
                        owner: common_pb2.Address) -> int:
        """Write and seal; returns the stored size (layout header and alignment included)."""
        from tracedray.core.object_store import client as store_client

        self._release_dropped_refs()  # its freed files may serve this put
        path = self._path_of(object_id)
        size = store_client.write_object(path, serialized.inband, serialized.buffers,
                                         self._mappings)
        request = raylet_pb2.SealObjectRequest(
            object_id=object_id, size=size, owner=owner.worker_id, call_site=call_site,
            owner_address=owner)
        reply = self._send_or_seal(request)
        if reply is None:  # sent; the raylet applies it before any lookup of the object
            with self._room_lock:
                self._sent += 1
            return size
        with self._room_lock:
            self._waited += 1
            self._room = reply.store_capacity - reply.store_used
            learned = self._capacity != reply.store_capacity
            self._capacity = reply.store_capacity
        if learned:
            self._mappings.set_budget(reply.store_capacity // 4)
        if not reply.ok:
            raise ObjectStoreFullError(reply.error)
        return size

    def _send_or_seal(self, request: raylet_pb2.SealObjectRequest
                      ) -> raylet_pb2.SealObjectReply | None:
        """The seal's reply, or ``None`` when it was sent without waiting (seal_mode)."""
        channel = self._seals
        if channel is None:
            return self._seal(request)
        with self._room_lock:
            mode = seal_mode(request.size, self._room, self._capacity)
            if mode is SealMode.SEND:
                self._room -= request.size
        if mode is SealMode.WAIT:
            return self._seal(request)
        try:
            return channel.send(request)
        except (OSError, RaySystemError) as exc:
            self._channel_failed(channel, exc)
            return self._seal(request)

    def _seal(self, request: raylet_pb2.SealObjectRequest) -> raylet_pb2.SealObjectReply:
        channel = self._seals
        if channel is not None:
            try:
                return channel.seal(request)
            except (OSError, RaySystemError) as exc:
                self._channel_failed(channel, exc)
        return self._raylet.seal_object(request)

    def free_local(self, object_ids: list[bytes]) -> bool:
        """Send a free of objects in this node's store over the seal channel, behind their
        seals; ``False`` when it cannot go that way (the caller frees over gRPC)."""
        channel = self._seals
        if channel is None or len(object_ids) > MAX_FREE_IDS:
            return False
        try:
            channel.free(raylet_pb2.FreeObjectsRequest(object_ids=object_ids))
        except (OSError, RaySystemError) as exc:
            self._channel_failed(channel, exc)
            return False
        with self._room_lock:
            self._frees_sent += 1
        # Their files are on their way to the pool: the next put may wait for its own.
        self._mappings.freed(self._object_path_prefix + oid.hex() for oid in object_ids)
        return True

    def statistics(self) -> ObjectIOStatistics:
        with self._room_lock:
            counts = (self._waited, self._sent, self._frees_sent)
        return ObjectIOStatistics(*counts, mappings=self._mappings.statistics())

    def _channel_failed(self, channel: SealChannel, exc: BaseException) -> None:
        self._seals = None
        channel.close()
        log.warning("object.seal_channel_unavailable", error=str(exc), fallback="grpc")

    def close(self) -> None:
        if self._seals is not None:
            self._seals.close()
        self._mappings.close()

    def load(self, value: common_pb2.ObjectValue) -> Any:
        """Deserialize a value; raises the stored error if the value is one."""
        if value.HasField("inline_value"):
            inline = value.inline_value
            obj = deserialize(inline.inband, list(inline.buffers))
            if inline.is_error:
                raise_stored_error(obj)
            return obj
        from tracedray.core.object_store import layout

        try:
            view = self._map(value)
        except ObjectLostError:
            # Its node may have died: as the owner, rebuild it (lineage) and read that.
            fresh = self._after_loss(value)
            if fresh is None:
                raise
            return self.load(fresh)
        inband, buffers = layout.unpack(view)
        return deserialize(inband, buffers)

    def _map(self, value: common_pb2.ObjectValue) -> memoryview:
        from tracedray.core.object_store import client as store_client

        if value.store_node_id == self._node_id:
            try:
                return store_client.map_object(self._path_of(value.object_id))
            except ObjectLostError:
                pass  # no file: spilled (or being restored), so ask the raylet
        request = raylet_pb2.LocateObjectRequest(object_id=value.object_id)
        if value.store_node_id != self._node_id:
            request.from_raylet.CopyFrom(value.store_raylet)
        reply = self._raylet.locate_object(request)
        if not reply.found:
            raise ObjectLostError(value.object_id.hex(), reply.error or
                                  f"no copy on node {value.store_node_id[:12]} any more")
        if reply.spilled:
            return store_client.read_spilled(_path(reply.path))
        return store_client.map_object(_path(reply.path))

    def _path_of(self, object_id: bytes) -> Path:
        return Path(self._object_path_prefix + object_id.hex())


def _path(text: str) -> Path:
    return Path(text)


def raise_stored_error(obj: Any) -> None:
    from tracedray.exceptions import RayTaskError

    if isinstance(obj, RayTaskError):
        raise obj.as_instanceof_cause()
    if isinstance(obj, BaseException):
        raise obj
    raise TypeError(f"stored error is not an exception: {obj!r}")
