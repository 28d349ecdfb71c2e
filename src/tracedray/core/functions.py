"""The function table: pickled function and class definitions, exported once per process
to the GCS and imported once per worker.

An entry is a one-line JSON header and the pickle. The header carries the directories a
driver imports its own modules from (its script's folder and its working directory), as
Ray puts them on its workers' ``sys.path``: a function pickled by reference to a module
beside the script then imports in the worker too.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import threading
from typing import TYPE_CHECKING, Any

import cloudpickle

from tracedray.core.serialization import serialize

if TYPE_CHECKING:
    from tracedray.core.gcs.client import GcsClient


def driver_import_paths() -> list[str]:
    """Where a driver imports its own modules from, as Ray adds them to workers' paths."""
    script = sys.argv[0] if sys.argv and sys.argv[0] not in ("", "-c", "-m") else ""
    paths = [os.path.dirname(os.path.abspath(script))] if script else []
    paths.append(os.getcwd())
    return list(dict.fromkeys(paths))


def encode_entry(pickled: bytes, import_paths: list[str]) -> bytes:
    return json.dumps({"import_paths": import_paths}).encode() + b"\n" + pickled


def decode_entry(entry: bytes) -> tuple[bytes, list[str]]:
    """The pickle and import paths of an entry (a bare pickle has none)."""
    if not entry.startswith(b"{"):
        return entry, []
    header, _, pickled = entry.partition(b"\n")
    paths = json.loads(header).get("import_paths", [])
    return pickled, [str(path) for path in paths]


def add_import_paths(paths: list[str]) -> None:
    """Put a driver's import paths on this worker's ``sys.path`` (after its first entry,
    as Ray does), once each and only where they exist on this machine."""
    for path in paths:
        if path not in sys.path and os.path.isdir(path):
            sys.path.insert(1, path)


class FunctionManager:
    def __init__(self, gcs: GcsClient, import_paths: list[str] | None = None) -> None:
        self._gcs = gcs
        self._import_paths = import_paths or []
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
        self._gcs.kv_put(f"fn:{function_id}", encode_entry(pickled, self._import_paths),
                         overwrite=False)
        with self._lock:
            self._exported[key] = function_id
            self._exported_objects.append(obj)
            self._imported[function_id] = obj
        return function_id

    def load(self, function_id: str) -> Any:
        obj = self._imported.get(function_id)
        if obj is None:
            entry = self._gcs.kv_get(f"fn:{function_id}")
            if entry is None:
                raise LookupError(f"function {function_id} is not in the GCS function table")
            pickled, import_paths = decode_entry(entry)
            add_import_paths(import_paths)
            obj = cloudpickle.loads(pickled)
            with self._lock:
                self._imported[function_id] = obj
        return obj
