"""Span shapes: what the spans of one hot path share, recorded once instead of per span.

The runtime's hot spans repeat most of what they carry: every ``task.dispatch`` on one
lease names the same node, worker, pid and lease; every ``task.submit`` from one call
site the same function, kind, call site, job and retry budget; every ``task.execute``
of one function in one worker the same function, kind, node and worker. Recording
those as an attribute dict per span cost each span ~8k instructions in ``marshal``
(~650 per string) and the converter a Python loop over every attribute.

A :class:`SpanShape` holds the span's name and kind, the attribute values its spans
share (``constant``), and the keys of the ones each span brings (``variable``), and
is marshalled once into ``blob``. A span of that shape is recorded as a SHAPED spool
record (spool_format.py) carrying the blob and only its own values: the blob is a
bytes object, which ``marshal`` copies rather than encodes, and the converter
decodes each distinct blob once and keeps its attributes' JSON. The record is
self-describing, so a converter that starts in the middle of a spool needs nothing
from before it.

A span whose attributes stop fitting its shape (``set_attribute`` on a task's
``task.execute``, an error) turns into an ordinary attribute dict first; nothing
about the span recorded changes.

A value that is ``bytes`` is an id: its attribute is the id in lowercase hex (the
same text as ``ObjectRef.hex()``). Callers hand over the binary id they already
have, and a PACKED record carries its 16 or 20 bytes rather than 32 or 40 characters.

A shape declared with a ``packing`` (``struct`` codes for its values: ``q`` for an
int, ``<n>p`` for an id of up to n-1 bytes) is recorded, on the hot paths, as a
PACKED record instead: one ``struct.pack_into`` of fixed-size fields straight into
the spool's mapped window, pointing at a SHAPE record the spool wrote once with the
blob. That skips ``marshal``, its buffer's allocations and the blob's copy: ~10-15%
of a record's instructions and three quarters of its bytes. Values that do not
fit the packing (a str where an id goes, an int beyond 64 bits) fall back to a
SHAPED record. ``struct`` cuts a longer ``bytes`` value to its ``p`` size without
a word, so a packing's id fields are sized for ids of one fixed length (ids.py).
"""

from __future__ import annotations

import marshal
import re
import struct
from collections.abc import Mapping, Sequence
from typing import Any

from opentelemetry.trace import SpanKind
from opentelemetry.util.types import AttributeValue

_dumps: Any = marshal.dumps  # typed loosely: marshal's stub rejects tuples holding Any
MAX_SHAPES = 1024  # per ShapeCache: call sites, functions and leases are few; bound it anyway
# A PACKED record's fields before its values (spool_format.py): a mark, the offset of
# its SHAPE record, the trace id's high and low 64 bits, span id, parent span id,
# start, duration.
PACKED_HEAD = "<BQQQQQqq"
_CODE = r"q|[1-9][0-9]{0,2}p"  # a value's code in a packing: an int, or an id's field
_PACKING = re.compile(f"(?:{_CODE})*")


class SpanShape:
    """The name, kind and shared attributes of a family of spans (see the module doc).

    ``blob`` is None when a constant value is of a type ``marshal`` cannot carry: the
    spans of such a shape are recorded with an attribute dict instead.
    """

    __slots__ = ("name", "kind", "constant", "variable", "blob", "packing", "packer",
                 "packed_size")

    def __init__(self, name: str, variable: Sequence[str],
                 constant: Mapping[str, AttributeValue] | None = None,
                 kind: SpanKind = SpanKind.INTERNAL, packing: str | None = None) -> None:
        self.name = name
        self.kind = kind
        self.variable = tuple(variable)
        # A variable key wins over a constant one of the same name, as in attributes().
        self.constant = tuple((key, value) for key, value in (constant or {}).items()
                              if key not in self.variable)
        try:
            self.blob: bytes | None = _dumps((name, kind.value, self.constant, self.variable), 2)
        except ValueError:
            self.blob = None
        # ``packer`` packs a whole PACKED payload; ``packed_size`` is its record's size
        # in the spool (length word and padding included). None: SHAPED records only.
        self.packing = packing
        self.packer: struct.Struct | None = None
        self.packed_size = 0
        if packing is not None:
            codes = packing_codes(packing) if _PACKING.fullmatch(packing) else []
            if len(codes) != len(self.variable) or any(
                    code != "q" and not 2 <= int(code[:-1]) <= 256 for code in codes):
                raise ValueError(f"packing {packing!r} does not describe the "
                                 f"{len(self.variable)} values of {self.variable}")
            if self.blob is not None:
                self.packer = struct.Struct(PACKED_HEAD + packing)
                self.packed_size = (4 + self.packer.size + 7) & ~7  # spool_format.record_size

    def attributes(self, values: Sequence[Any]) -> dict[str, AttributeValue]:
        """The attribute dict of a span of this shape with ``values`` (one per variable
        key, in order): the variable attributes first, then the constant ones; an id
        (``bytes``) as its hex."""
        attributes: dict[str, AttributeValue] = {
            key: value.hex() if type(value) is bytes else value
            for key, value in zip(self.variable, values, strict=True)}
        attributes.update(self.constant)
        return attributes

    def __repr__(self) -> str:
        return f"SpanShape({self.name!r}, variable={self.variable}, constant={self.constant})"


def packing_codes(packing: str) -> list[str]:
    """The struct code of each value in a packing: ``"q17p"`` -> ``["q", "17p"]``."""
    return re.findall(_CODE, packing)


def decode_blob(blob: bytes) -> tuple[str, int, tuple[tuple[str, Any], ...], tuple[str, ...]]:
    """(name, kind value, constant items, variable keys) of a shape's blob; ValueError
    (or EOFError / TypeError) when it is not one."""
    name, kind, constant, variable = marshal.loads(blob)
    if not (type(name) is str and type(kind) is int and type(constant) is tuple
            and type(variable) is tuple):
        raise ValueError("not a span shape")
    return name, kind, constant, variable


class ShapeCache:
    """The shapes of one span name and attribute layout, by their constant values.

    For a hot path whose shared attributes take a few values over a process's life
    (a call site's function and job, a worker's functions): ``get`` with those values
    in ``constant_keys`` order returns the same SpanShape each time. Thread-safe as
    far as single dict operations are (two threads may build one shape twice; both
    are equal). The values are dict keys here, so the values of one key must keep
    one type: ``True == 1`` would find the shape of the other.
    """

    def __init__(self, name: str, variable: Sequence[str], constant_keys: Sequence[str],
                 max_shapes: int = MAX_SHAPES, packing: str | None = None) -> None:
        self._name = name
        self._packing = packing
        self._variable = tuple(variable)
        self._constant_keys = tuple(constant_keys)
        self._max = max_shapes
        self._shapes: dict[tuple[Any, ...], SpanShape] = {}

    def get(self, constant_values: tuple[Any, ...]) -> SpanShape:
        shape = self._shapes.get(constant_values)
        if shape is None:
            if len(self._shapes) >= self._max:
                self._shapes.clear()  # a runaway key (ids in a constant): start afresh
            shape = SpanShape(self._name, self._variable,
                              dict(zip(self._constant_keys, constant_values, strict=True)),
                              packing=self._packing)
            self._shapes[constant_values] = shape
        return shape

    def __len__(self) -> int:
        return len(self._shapes)
