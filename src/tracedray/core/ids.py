"""Identifiers. Binary ids travel in protos; hex strings appear in logs, spans and the CLI.

An object id is the id of the task that created it plus a 4-byte return index, so
``ObjectRef.task_id()`` is a prefix of ``ObjectRef.hex()``, as in Ray.
"""

from __future__ import annotations

import random
import secrets

TASK_ID_BYTES = 16
OBJECT_ID_BYTES = TASK_ID_BYTES + 4
ACTOR_ID_BYTES = 16
JOB_ID_BYTES = 4

# Return index for objects created by put() (high bit set, like Ray's put index space).
PUT_INDEX_BASE = 0x80000000


# Task ids come from a per-process generator seeded from the OS: as unique as
# os.urandom ids for our purposes, without a getrandom() system call per task
# (measured ~100 µs each under load). Ids are not secrets.
_task_ids = random.Random(secrets.randbits(128))


def new_task_id() -> bytes:
    return _task_ids.getrandbits(TASK_ID_BYTES * 8).to_bytes(TASK_ID_BYTES, "big")


def new_actor_id() -> bytes:
    return secrets.token_bytes(ACTOR_ID_BYTES)


def new_job_id() -> bytes:
    return secrets.token_bytes(JOB_ID_BYTES)


def new_node_id() -> str:
    return secrets.token_hex(14)


def new_worker_id() -> str:
    return secrets.token_hex(14)


def object_id_for(task_id: bytes, index: int) -> bytes:
    return task_id + index.to_bytes(4, "big")


def task_id_of(object_id: bytes) -> bytes:
    return object_id[:TASK_ID_BYTES]


class UniqueId:
    """A small immutable id with ``hex()`` / ``binary()`` (for TaskID, ActorID, JobID...)."""

    __slots__ = ("_bytes",)

    def __init__(self, value: bytes) -> None:
        self._bytes = bytes(value)

    def binary(self) -> bytes:
        return self._bytes

    def hex(self) -> str:
        return self._bytes.hex()

    def is_nil(self) -> bool:
        return not any(self._bytes)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, UniqueId) and type(other) is type(self) and \
            other._bytes == self._bytes

    def __hash__(self) -> int:
        return hash(self._bytes)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.hex()})"

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (self._bytes,))


class TaskID(UniqueId):
    pass
