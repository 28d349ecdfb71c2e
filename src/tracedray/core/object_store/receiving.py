"""Writing a copy pulled from another node into its temporary file.

The store renames the complete file into place only after admission
(:meth:`~.store.ObjectStore.receive_into`; :meth:`~.store.ObjectStore.receive` feeds it
the chunks of the gRPC stream), so a reader never maps a partial copy; a failed write
leaves nothing behind.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from tracedray.core.object_store import files
from tracedray.exceptions import ObjectStoreFullError, RaySystemError


def chunks_filler(chunks: Iterable[bytes], size: int, what: str) -> Callable[[int], None]:
    """A ``fill`` for :func:`fill_file` that writes ``chunks`` one after the other and
    raises when they do not add up to ``size`` bytes (``what`` ended early)."""

    def fill(fd: int) -> None:
        written = 0
        for chunk in chunks:
            view = memoryview(chunk)
            done = 0
            while done < view.nbytes:
                done += os.pwrite(fd, view[done:], written + done)
            written += done
        if written != size:
            raise RaySystemError(f"{what} ended after {written} of {size} bytes")

    return fill


def fill_file(path: Path, size: int, fill: Callable[[int], object], pooled: int | None,
              shm_dir: Path) -> None:
    """Cut the file at ``path`` (open at ``pooled``, or new) to ``size`` bytes and let
    ``fill`` write it; the file is removed when that fails."""
    try:
        fd = pooled if pooled is not None else os.open(
            path, os.O_CREAT | os.O_EXCL | os.O_RDWR | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        raise RaySystemError(f"cannot create {path} for a received object: "
                             f"{exc}") from exc
    try:
        with _removed_on_failure(path, shm_dir):
            os.ftruncate(fd, size)
            fill(fd)
    finally:
        os.close(fd)


@contextmanager
def _removed_on_failure(path: Path, shm_dir: Path) -> Iterator[None]:
    """Remove the file at ``path`` when the block fails; an ``OSError`` becomes the
    store's error (:func:`write_error`)."""
    try:
        yield
    except OSError as exc:
        files.unlink_quietly(path)
        raise write_error(path, exc, shm_dir) from exc
    except BaseException:
        files.unlink_quietly(path)
        raise


def write_error(path: Path, exc: OSError, shm_dir: Path) -> Exception:
    if exc.errno == errno.ENOSPC:
        return ObjectStoreFullError(
            f"shared memory ({shm_dir}) ran out while receiving an object; "
            "lower object_store_memory")
    return RaySystemError(f"cannot write received object to {path}: {exc}")
