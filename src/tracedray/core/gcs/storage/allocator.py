"""Give freed heap memory back to the system after a big flush (glibc's ``malloc_trim``).

A flush drops thousands of records from memory at once; CPython returns their blocks
to the C allocator, which keeps them mapped (RSS stays at the burst's peak) until asked
to trim. Elsewhere than glibc there is no such call and nothing is done.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from collections.abc import Callable

# Flushes that moved fewer entries than this free too little to be worth a trim (a trim
# walks the heap: about a millisecond per hundred MB).
TRIM_AFTER_ENTRIES = 2_000


def _load_trim() -> Callable[[int], int] | None:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        trim: Callable[[int], int] = ctypes.CDLL(name).malloc_trim
    except (OSError, AttributeError):  # not glibc
        return None
    return trim


_trim = _load_trim()


def trim_due(entries_moved: int) -> bool:
    return entries_moved >= TRIM_AFTER_ENTRIES


def release_free_memory() -> bool:
    """Ask the C allocator to return free memory to the system; False where it cannot."""
    if _trim is None:
        return False
    _trim(0)
    return True
