"""File naming and file operations shared by the store (raylet side) and tools.

Object files are ``<shm_dir>/<name_prefix>-<object_id_hex>``; spilled copies
are ``<spill_dir>/<object_id_hex>``.  Temporary files (a copy in progress) are
named after their destination plus a suffix, so a crash mid-copy leaves
nothing that looks like a complete object, and :func:`remove_orphans` still
finds what a crashed node left in shared memory.
"""

from __future__ import annotations

import os
import re
import shutil
import threading
from pathlib import Path

from tracedray.exceptions import RaySystemError

_OBJECT_ID = re.compile(r"[0-9a-fA-F]{1,128}")
_NAME_PREFIX = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")


def validate_object_id(object_id: str) -> str:
    """``object_id`` if it is a hex id; anything else could escape the store's folder."""
    if not _OBJECT_ID.fullmatch(object_id):
        raise RaySystemError(f"invalid object id {object_id!r}: expected up to 128 hex digits")
    return object_id


def validate_name_prefix(name_prefix: str) -> str:
    if not _NAME_PREFIX.fullmatch(name_prefix):
        raise RaySystemError(
            f"invalid object file name prefix {name_prefix!r}: use letters, digits, '_', '.', '-'")
    return name_prefix


def session_name_prefix(session_dir: Path) -> str:
    """The prefix of every shared-memory name of the session in ``session_dir``."""
    return f"tracedray-{session_dir.name[-24:]}"


def store_name_prefix(session_dir: Path, node_id: str) -> str:
    """The prefix of the shared-memory names of node ``node_id``'s store: its raylet names
    its files so, and whoever stops a raylet that could not clean up sweeps by it."""
    return f"{session_name_prefix(session_dir)}-{node_id[:8]}"


def shm_path(shm_dir: Path, name_prefix: str, object_id: str) -> Path:
    return shm_dir / f"{name_prefix}-{validate_object_id(object_id)}"


def spill_path(spill_dir: Path, object_id: str) -> Path:
    return spill_dir / validate_object_id(object_id)


def temp_path(destination: Path, purpose: str) -> Path:
    """A sibling of ``destination``, unique to this thread, to write and then rename."""
    return destination.with_name(
        f"{destination.name}.{purpose}-{os.getpid()}-{threading.get_ident()}")


def copy_atomically(source: Path, destination: Path) -> None:
    """Copy ``source`` to ``destination`` so that ``destination`` appears only when complete.

    ``shutil.copyfile`` uses ``sendfile`` on Linux: the bytes never enter this
    process.  Raises ``OSError``; callers translate it (a full spill disk and a
    full shared memory mean different things to the user).
    """
    temporary = temp_path(destination, "copying")
    try:
        shutil.copyfile(source, temporary)
        os.chmod(temporary, 0o600)  # owner-only, whatever the process's umask
        os.replace(temporary, destination)
    except BaseException:
        unlink_quietly(temporary)
        raise


def check_written_size(path: Path, size: int) -> int:
    """Check the writer's file has ``size`` bytes (else remove it and raise); returns its
    inode."""
    try:
        stat = os.stat(path)
    except FileNotFoundError as exc:
        raise RaySystemError(f"cannot seal {path}: the writer's file does not exist") from exc
    if stat.st_size != size:
        unlink_quietly(path)
        raise RaySystemError(f"cannot seal {path}: the file has {stat.st_size} bytes, "
                             f"the writer reported {size}")
    return stat.st_ino


def unlink_quietly(path: Path) -> bool:
    """Remove ``path``; ``False`` when it was already gone."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        return False
    return True


def remove_orphans(shm_dir: Path, name_prefix: str) -> int:
    """Remove every ``<name_prefix>-*`` file in ``shm_dir``; returns how many were removed.

    For ``tracedray stop`` after a crash: a killed raylet cannot clean up its
    shared memory.  A prefix also matches longer prefixes that extend it with
    ``-`` (``tracedray`` matches ``tracedray-<session>-...``), which is how the
    CLI removes the files of every stopped session at once. Pool folders go too.
    """
    validate_name_prefix(name_prefix)
    removed = remove_pool_folders(shm_dir, name_prefix)
    try:
        entries = list(os.scandir(shm_dir))
    except FileNotFoundError:
        return removed
    for entry in entries:
        if entry.name.startswith(f"{name_prefix}-") and entry.is_file(follow_symlinks=False) \
                and unlink_quietly(Path(entry.path)):
            removed += 1
    return removed


def remove_pool_folders(shm_dir: Path, name_prefix: str) -> int:
    """Remove the pool folders (``<name_prefix>-*-pool-<class>/``, pool.py) of the stores
    the prefix matches; returns how many files they held."""
    removed = 0
    try:
        entries = list(os.scandir(shm_dir))
    except FileNotFoundError:
        return 0
    for entry in entries:
        if entry.name.startswith(f"{name_prefix}-") and "-pool-" in entry.name \
                and entry.is_dir(follow_symlinks=False):
            try:
                removed += len(os.listdir(entry.path))
            except OSError:
                continue
            shutil.rmtree(entry.path, ignore_errors=True)
    return removed
