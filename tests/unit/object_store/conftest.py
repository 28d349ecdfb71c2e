"""Fixtures for object store tests: stores in temporary folders that are always shut down."""

from __future__ import annotations

import pickle
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tracedray.core.address import Address
from tracedray.core.object_store.client import write_object
from tracedray.core.object_store.store import ObjectStore

StoreFactory = Callable[..., ObjectStore]


@pytest.fixture
def make_store(tmp_path: Path) -> Iterator[StoreFactory]:
    stores: list[ObjectStore] = []

    def factory(capacity_bytes: int = 1 << 20, *, name: str = "node1", **kwargs: Any
                ) -> ObjectStore:
        shm_dir = tmp_path / f"{name}-shm"
        shm_dir.mkdir(exist_ok=True)
        kwargs.setdefault("shm_dir", shm_dir)
        kwargs.setdefault("spill_dir", tmp_path / f"{name}-spill")
        store = ObjectStore(node_id=name, capacity_bytes=capacity_bytes,
                            name_prefix=f"td-{name}", **kwargs)
        stores.append(store)
        return store

    yield factory
    for store in stores:
        store.shutdown()


def _put(store: ObjectStore, object_id: str, value: object, *, owner: str = "driver",
         call_site: str = "test.py:1 in test", primary: bool = True,
         owner_address: Address | None = None) -> int:
    """What a core worker does: serialize, write the file, ask the raylet to seal it."""
    buffers: list[pickle.PickleBuffer] = []
    inband = pickle.dumps(value, protocol=5, buffer_callback=buffers.append)
    size = write_object(store.object_path(object_id), inband, buffers)
    store.seal(object_id, size, owner=owner, call_site=call_site, primary=primary,
               owner_address=owner_address)
    return size


PutFunction = Callable[..., int]


@pytest.fixture
def put() -> PutFunction:
    return _put
