"""Values the object store tests put and read back."""

from __future__ import annotations

import pickle

import numpy as np

from tracedray.core.object_store.layout import unpack

KB = 1000


def array(fill: int, size: int = 300 * KB) -> np.ndarray:
    return np.full(size, fill, dtype=np.uint8)


def load(view: memoryview) -> object:
    inband, buffers = unpack(view)
    return pickle.loads(inband, buffers=buffers)
