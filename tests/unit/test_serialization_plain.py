"""Plain values (None, bool, int, float, str, bytes) skip cloudpickle's pickler: the
bytes, buffers and captured refs are what the full path gives."""

from __future__ import annotations

import pickle

import pytest

from tracedray.core.serialization import deserialize, dumps, serialize

PLAIN = [None, True, False, 0, -5, 2**70, 3.5, float("inf"), "", "abc", "é" * 100, b"",
         b"x" * 100_000]


@pytest.mark.parametrize("value", PLAIN, ids=lambda v: type(v).__name__)
def test_plain_value_bytes_are_cloudpickles(value: object) -> None:
    buffers: list[pickle.PickleBuffer] = []
    expected = dumps(value, buffer_callback=buffers.append)
    got = serialize(value)
    assert got.inband == expected
    assert got.buffers == [] and buffers == []
    assert got.contained_refs == []
    assert deserialize(got.inband, []) == value


def test_subclass_of_a_plain_type_keeps_its_class() -> None:
    class Name(str):
        pass

    value = deserialize(serialize(Name("x")).inband, [])
    assert type(value).__name__ == "Name" and value == "x"
