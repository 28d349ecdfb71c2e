"""The raylet's object RPCs: seals, lookups, frees, an owner's exit, pulls."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tracedray._proto.v1 import common_pb2
from tracedray.core.address import Address
from tracedray.core.object_store.store import FREE_RELEASED
from tracedray.core.raylet import owner_death as od

if TYPE_CHECKING:
    from tracedray.core.raylet.server import Raylet


class ObjectRpcs:
    _r: Raylet

    def SealObject(self, request: Any, context: Any) -> Any:
        return self._r.objects.seal(request)

    def LocateObject(self, request: Any, context: Any) -> Any:
        return self._r.objects.locate(request)

    def FreeObjects(self, request: Any, context: Any) -> Any:
        self._r.frees.free([oid.hex() for oid in request.object_ids],
                           request.reason or FREE_RELEASED)
        return common_pb2.Empty()

    def OwnerExiting(self, request: Any, context: Any) -> Any:
        self._r.frees.owner_gone(od.exited(Address.from_proto(request.owner), "it shut down"))
        return common_pb2.Empty()

    def PullObject(self, request: Any, context: Any) -> Any:
        return self._r.objects.pull_stream(request, context)
