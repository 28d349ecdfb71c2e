"""ObjectRef: a future for a value owned by some process in the cluster."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from tracedray.core import current_worker
from tracedray.core.address import Address
from tracedray.core.ids import TASK_ID_BYTES, TaskID

if TYPE_CHECKING:
    from tracedray.core.worker.core_worker import CoreWorker


def _no_api(ref: ObjectRef) -> Any:
    raise RuntimeError(f"{ref!r}: no API layer in this process resolves it "
                       "(tracedray.api.calls installs it)")


# How ``future()`` and ``await`` resolve a ref: the API's ``get``, which the API layer
# (``tracedray.api.calls``, above the core) installs when it is imported.
_resolve: Callable[[ObjectRef], Any] = _no_api


def set_resolver(resolve: Callable[[ObjectRef], Any]) -> None:
    global _resolve
    _resolve = resolve


class ObjectRef:
    """A reference to a (possibly not yet computed) object.

    Creating one counts as a local reference in the current process; when the last
    reference anywhere disappears the object is freed. Pickling a ref (as an argument,
    inside a put value or a return value) makes the receiving process a borrower.
    """

    __slots__ = ("_id", "_owner", "_call_site", "_worker", "__weakref__")

    def __init__(self, object_id: bytes, owner: Address | None = None, call_site: str = "",
                 *, _worker: CoreWorker | None = None, _owned: bool = False) -> None:
        if not isinstance(object_id, bytes | bytearray) or len(object_id) <= TASK_ID_BYTES:
            raise TypeError(f"ObjectRef needs a binary object id, got {object_id!r}")
        self._id = bytes(object_id)
        self._owner = owner
        self._call_site = call_site
        worker = _worker if _worker is not None else current_worker.current()
        self._worker = worker
        if worker is not None:
            worker.references.add_local_ref(self._id, owner, call_site, owned=_owned)

    @classmethod
    def _owned_by(cls, worker: CoreWorker, object_id: bytes, owner: Address,
                  call_site: str) -> ObjectRef:
        """A ref to an object ``worker`` owns, under an id it made itself (a return of a
        task it submits, a put): the constructor without its checks, at every
        ``.remote()``."""
        ref = _new_ref(cls)
        ref._id = object_id
        ref._owner = owner
        ref._call_site = call_site
        ref._worker = worker
        worker.references.add_local_ref(object_id, owner, call_site, owned=True)
        return ref

    def __del__(self) -> None:
        worker = self._worker
        if worker is not None:
            # never raise from a finalizer (it may run at interpreter exit)
            with contextlib.suppress(Exception):
                worker.references.remove_local_ref(self._id)

    def binary(self) -> bytes:
        return self._id

    def hex(self) -> str:
        return self._id.hex()

    def task_id(self) -> TaskID:
        return TaskID(self._id[:TASK_ID_BYTES])

    @property
    def owner_address(self) -> Address | None:
        return self._owner

    @property
    def call_site(self) -> str:
        return self._call_site

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ObjectRef) and other._id == self._id

    def __hash__(self) -> int:
        return hash(self._id)

    def __repr__(self) -> str:
        return f"ObjectRef({self.hex()})"

    def __reduce__(self) -> tuple[Any, ...]:
        from tracedray.core import serialization

        serialization.note_serialized_ref(self)
        return (_rebuild, (self._id, tuple(self._owner) if self._owner else None, self._call_site))

    def future(self) -> Any:
        """A concurrent.futures.Future resolved with the value (or the error)."""
        import concurrent.futures
        import threading

        fut: concurrent.futures.Future[Any] = concurrent.futures.Future()

        def resolve() -> None:
            try:
                fut.set_result(_resolve(self))
            except BaseException as exc:  # noqa: BLE001 - delivered through the future
                fut.set_exception(exc)

        threading.Thread(target=resolve, daemon=True, name="tracedray-ref-future").start()
        return fut

    def __await__(self) -> Any:
        import asyncio

        return asyncio.wrap_future(self.future()).__await__()


_new_ref = object.__new__


def _rebuild(object_id: bytes, owner: tuple[Any, ...] | None, call_site: str) -> ObjectRef:
    # The reference table registers this process as a borrower (ObjectRef.__init__).
    return ObjectRef(object_id, Address(*owner) if owner else None, call_site)
