"""Opening a spool to copy or convert it: the steps span and log spools share.

A spool is opened for writing where this process may (its converted mark is advanced
under the spool's lock), read-only where it may not (a copied session folder: its
unconverted part is read and nothing is changed), and not at all when it is gone.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path


def open_spool(path: Path, warnings: list[str]) -> tuple[int, bool] | None:
    """``(fd, writable)``; None for a missing file or one that cannot be read (said in
    ``warnings``). Never raises."""
    try:
        return os.open(path, os.O_RDWR), True
    except FileNotFoundError:
        return None
    except PermissionError:
        try:
            return os.open(path, os.O_RDONLY), False
        except OSError as exc:
            warnings.append(f"{path}: cannot read: {exc}")
            return None
    except OSError as exc:
        warnings.append(f"{path}: cannot open: {exc}")
        return None


def lock_spool(fd: int, *, blocking: bool) -> bool:
    """Take the spool's copy lock (released when ``fd`` closes); False when another
    copier holds it and ``blocking`` is off."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
    except BlockingIOError:
        return False
    return True
