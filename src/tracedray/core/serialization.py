"""Values to bytes and back: cloudpickle with pickle protocol 5 out-of-band buffers.

Large contiguous buffers (numpy arrays, bytes-like objects that support it) are
kept out of the pickle stream, so they can be written into shared memory with one
copy and read back with none: an array deserialized from a mapped object points
into the mapping and is read-only.

ObjectRefs met while pickling are collected (they are "captured in" the value and
must stay alive as long as the value does).

Code pickled by value keeps its file name and carries its source lines (code_source.py),
so a worker's traceback shows the user's file, line and source.
"""

from __future__ import annotations

import io
import pickle
import threading
import types
from collections import ChainMap
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import cloudpickle

from tracedray.core.code_source import reduce_code
from tracedray.core.serializability import describe_unserializable
from tracedray.exceptions import SerializationError

if TYPE_CHECKING:
    from tracedray.core.object_ref import ObjectRef

_tls = threading.local()


class _Pickler(cloudpickle.Pickler):
    """cloudpickle's pickler, but code objects keep where they were written."""

    dispatch_table = ChainMap({types.CodeType: reduce_code}, cloudpickle.Pickler.dispatch_table)


def dumps(value: Any, buffer_callback: Any = None) -> bytes:
    """``cloudpickle.dumps(value, protocol=5)``, with code_source's reducer for code."""
    with io.BytesIO() as file:
        _Pickler(file, protocol=5, buffer_callback=buffer_callback).dump(value)
        return file.getvalue()


@dataclass
class Serialized:
    inband: bytes
    buffers: list[memoryview]
    contained_refs: list[ObjectRef] = field(default_factory=list)

    @property
    def size(self) -> int:
        return len(self.inband) + sum(b.nbytes for b in self.buffers)


def note_serialized_ref(ref: ObjectRef) -> None:
    refs = getattr(_tls, "refs", None)
    if refs is not None:
        refs.append(ref)


# Exact instances of these pickle to the same bytes with the plain C pickler (pickle
# never asks cloudpickle's reducer_override about them, nor holds a buffer out of band
# or meets a ref), for a tenth of the cost: a task that returns None pays ~0.2 µs.
_PLAIN_TYPES = frozenset({type(None), bool, int, float, str, bytes})


def serialize(value: Any, *, what: str = "value") -> Serialized:
    if type(value) in _PLAIN_TYPES:
        return Serialized(pickle.dumps(value, protocol=5), [], [])
    buffers: list[pickle.PickleBuffer] = []
    refs: list[ObjectRef] = []
    outer = getattr(_tls, "refs", None)
    _tls.refs = refs
    try:
        inband = dumps(value, buffer_callback=buffers.append)
    except Exception as exc:
        raise SerializationError(_describe_failure(value, what, exc)) from exc
    finally:
        _tls.refs = outer
    views: list[memoryview] = []
    for buf in buffers:
        try:
            views.append(buf.raw())
        except BufferError:
            # Non-contiguous buffer: fall back to a contiguous copy.
            views.append(memoryview(bytes(memoryview(buf))))
    return Serialized(inband, views, refs)


def deserialize(inband: bytes | memoryview, buffers: Sequence[memoryview | bytes]) -> Any:
    return pickle.loads(inband, buffers=buffers)


def serialize_error(exc: BaseException) -> Serialized:
    """Serialize an exception; one that cannot be pickled is replaced by a description."""
    try:
        return serialize(exc, what="exception")
    except SerializationError:
        from tracedray.exceptions import RayError

        return serialize(RayError(f"{type(exc).__qualname__}: {exc} (the original exception "
                                  "could not be pickled)"))


def _describe_failure(value: Any, what: str, exc: BaseException) -> str:
    try:
        detail = describe_unserializable(value, what)
    except Exception:  # noqa: BLE001 - the description is best effort; the cause is kept
        detail = ""
    message = f"could not serialize {what} of type {type(value).__qualname__}: {exc}"
    if detail:
        message += f"\n{detail}"
    message += ("\nCheck it with tracedray.util.inspect_serializability(obj) to find the "
                "culprit, then pass it differently (e.g. create it inside the task).")
    return message
