"""The node's objects as other processes ask for them: a local writer's seal, a lookup
that may first pull the object from another node, and the stream another node pulls
from. The store (``object_store/``), the data path (``object_data.py``) and the frees
passed on to copies (``object_frees.py``) do the work."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import grpc

from tracedray import logs
from tracedray._proto.v1 import raylet_pb2
from tracedray.core.address import Address
from tracedray.core.object_store.store import ObjectStore
from tracedray.core.protocol.raylet_client import RayletClient
from tracedray.core.raylet import object_data
from tracedray.core.raylet.object_frees import ObjectFrees
from tracedray.core.raylet.transfers import TransferTable
from tracedray.exceptions import ObjectStoreFullError, RaySystemError
from tracedray.telemetry.cluster_events import RayletEvents

log = logs.get_logger(__name__)
_events = RayletEvents(log)


@dataclass(frozen=True)
class _Receipt:
    """Whose a pulled copy is (it goes with its owner, as the primary does)."""

    owner: str  # worker id
    owner_address: Address | None
    call_site: str


class NodeObjects:
    def __init__(self, *, node_id: str, address: Callable[[], Address], store: ObjectStore,
                 transfers: TransferTable, frees: ObjectFrees,
                 data_port: Callable[[], int]) -> None:
        self._node_id = node_id
        self._address = address
        self.store = store
        self.transfers = transfers
        self.frees = frees
        self._data_port = data_port

    def locate(self, request: raylet_pb2.LocateObjectRequest) -> raylet_pb2.LocateObjectReply:
        object_hex = request.object_id.hex()
        if not self.store.contains(object_hex) and request.HasField("from_raylet"):
            source = Address.from_proto(request.from_raylet)
            try:
                if self.transfers.run(object_hex, lambda: self._pull(request.object_id, source)):
                    log.info("object.transfer_shared", object_id=object_hex,
                             from_node=source.node_id)
            except RaySystemError as exc:
                # The holder is gone or lost the object: the owner decides whether it can
                # be rebuilt (lineage), so say exactly what failed.
                return raylet_pb2.LocateObjectReply(
                    found=False, error=f"the pull from node {source.node_id[:12]} "
                    f"({source.target}) failed: {exc}")
        if not self.store.contains(object_hex):
            refused = self.store.refusal(object_hex)
            return raylet_pb2.LocateObjectReply(
                found=False, error=f"its seal was refused: {refused}" if refused
                else f"not in the store of node {self._node_id[:12]}")
        location = self.store.ensure_local(object_hex)
        return raylet_pb2.LocateObjectReply(found=True, path=str(location.path),
                                            spilled=location.kind == "spilled", size=location.size)

    def seal(self, request: raylet_pb2.SealObjectRequest) -> raylet_pb2.SealObjectReply:
        """Take over a file a local writer made (gRPC's SealObject and the seal channel)."""
        owner = (Address.from_proto(request.owner_address)
                 if request.HasField("owner_address") else None)
        try:
            self.store.seal(request.object_id.hex(), request.size, owner=request.owner,
                            call_site=request.call_site, owner_address=owner)
        except ObjectStoreFullError as exc:
            used, capacity = self.store.usage()
            return raylet_pb2.SealObjectReply(ok=False, error=str(exc), store_used=used,
                                              store_capacity=capacity)
        used, capacity = self.store.usage()
        return raylet_pb2.SealObjectReply(ok=True, store_used=used, store_capacity=capacity)

    def _pull(self, object_id: bytes, source: Address) -> None:
        """Copy an object from another node's store into this one (``transfers`` makes
        concurrent pulls of one object share this call). The bytes come over the
        holder's data path when it offers one, else in the gRPC stream."""
        started = time.monotonic()
        with _events.object_transfer(object_id, source.node_id, self._node_id) as transfer:
            client = RayletClient(source.target)
            chunks = client.pull_object(object_id, self._node_id, self._address().to_proto(),
                                        data_path=True)
            first = next(chunks)
            for _ in chunks:  # a data-path offer is the stream's only message
                pass
            total = first.total_size
            # The copy goes with its owner, as the primary does.
            owner = Address.from_proto(first.owner) if first.HasField("owner") else None
            receipt = _Receipt(owner.worker_id if owner is not None else "", owner,
                               first.call_site)
            streams = 0
            if first.data_port:
                streams = self._pull_data_path(object_id, source, first.data_port, total,
                                               receipt)
            if not streams:
                chunks = client.pull_object(object_id, self._node_id, self._address().to_proto())
                first = next(chunks)

                def data() -> Any:
                    yield first.data
                    for chunk in chunks:
                        yield chunk.data

                self.store.receive(object_id.hex(), total, data(), owner=receipt.owner,
                                   owner_address=receipt.owner_address,
                                   call_site=receipt.call_site)
            transfer.received(total, streams)
        self.frees.after_pull(object_id.hex())
        _events.object_transferred(object_id, total, source.node_id, streams,
                                   time.monotonic() - started)

    def _pull_data_path(self, object_id: bytes, source: Address, port: int, total: int,
                        receipt: _Receipt) -> int:
        """Receive the object over the holder's data path; returns the connections used,
        0 when the port cannot be reached (the caller falls back to the gRPC stream)."""
        try:
            first = object_data.connect(source.ip, port)
        except OSError as exc:
            log.warning("object.data_path_unreachable", object_id=object_id.hex(),
                        from_node=source.node_id, address=f"{source.ip}:{port}", error=str(exc))
            return 0
        used = [0]

        def fill(fd: int) -> None:
            used[0] = object_data.fetch(first, source.ip, port, object_id, total, fd)

        try:
            self.store.receive_into(object_id.hex(), total, fill, owner=receipt.owner,
                                    owner_address=receipt.owner_address,
                                    call_site=receipt.call_site)
        finally:
            first.close()  # fetch closed it unless it never ran (already stored)
        return used[0] or 1

    def pull_stream(self, request: raylet_pb2.PullObjectRequest,
                    context: Any) -> Iterator[raylet_pb2.ObjectChunk]:
        """What another node pulls: the object's first chunk (its size, owner and call
        site) and then its bytes, or an offer of the data path for them."""
        store = self.store
        object_hex = request.object_id.hex()
        info = store.describe(object_hex)
        if info is None:
            context.abort(grpc.StatusCode.NOT_FOUND, f"object {object_hex} is not on this node")
            return
        if request.HasField("to_raylet"):  # a free of the object here is passed on to it
            self.frees.copy_holders.add(object_hex, Address.from_proto(request.to_raylet))
        first = raylet_pb2.ObjectChunk(total_size=info.size, call_site=info.call_site)
        if info.owner_address is not None:
            first.owner.CopyFrom(info.owner_address.to_proto())
        if request.data_path and info.size > 0:  # the puller reads the bytes there
            first.data_port = self._data_port()
            yield first
            return
        for index, chunk in enumerate(store.read_chunks(object_hex)):
            if index == 0:
                first.data = bytes(chunk)
                yield first
            else:
                yield raylet_pb2.ObjectChunk(total_size=info.size, data=bytes(chunk))
