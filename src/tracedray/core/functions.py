"""The function table: pickled function and class definitions, exported once per process
to the GCS and imported once per worker."""

from __future__ import annotations

import hashlib
import threading
from typing import TYPE_CHECKING, Any

import cloudpickle

from tracedray.core.serialization import serialize

if TYPE_CHECKING:
    from tracedray.core.gcs.client import GcsClient


class FunctionManager:
    def __init__(self, gcs: GcsClient) -> None:
        self._gcs = gcs
        self._exported: dict[int, str] = {}  # id(obj) -> function id
        self._exported_objects: list[Any] = []  # keeps id() keys valid
        self._imported: dict[str, Any] = {}
        self._lock = threading.Lock()

    def export(self, obj: Any, what: str) -> str:
        key = id(obj)
        function_id = self._exported.get(key)
        if function_id is not None:
            return function_id
        pickled = serialize(obj, what=what).inband
        function_id = hashlib.sha1(pickled).hexdigest()
        self._gcs.kv_put(f"fn:{function_id}", pickled, overwrite=False)
        with self._lock:
            self._exported[key] = function_id
            self._exported_objects.append(obj)
            self._imported[function_id] = obj
        return function_id

    def load(self, function_id: str) -> Any:
        obj = self._imported.get(function_id)
        if obj is None:
            pickled = self._gcs.kv_get(f"fn:{function_id}")
            if pickled is None:
                raise LookupError(f"function {function_id} is not in the GCS function table")
            obj = cloudpickle.loads(pickled)
            with self._lock:
                self._imported[function_id] = obj
        return obj
