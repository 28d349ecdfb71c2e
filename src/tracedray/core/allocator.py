"""The C allocator's settings and trims (glibc's ``mallopt`` and ``malloc_trim``).

CPython returns freed blocks to the C allocator, which keeps them mapped (RSS stays at
a burst's peak) until asked to trim; and glibc gives each thread that allocates under
contention an arena of its own (up to 8 per core), whose freed memory is rarely
returned. Elsewhere than glibc there are no such calls and nothing is done.
"""

from __future__ import annotations

import ctypes
from typing import Any

# Flushes that moved fewer entries than this free too little to be worth a trim (a trim
# walks the heap: about a millisecond per hundred MB).
TRIM_AFTER_ENTRIES = 2_000
_M_ARENA_MAX = -8  # mallopt's parameter number (glibc's malloc.h)


def _load_libc() -> Any:
    try:
        libc = ctypes.CDLL(None)  # the symbols the process has loaded: its C library's
        libc.malloc_trim, libc.mallopt  # noqa: B018  # both there: glibc
    except (OSError, AttributeError):  # not glibc
        return None
    return libc


_libc = _load_libc()


def trim_due(entries_moved: int) -> bool:
    return entries_moved >= TRIM_AFTER_ENTRIES


def release_free_memory() -> bool:
    """Ask the C allocator to return free memory to the system; False where it cannot."""
    if _libc is None:
        return False
    _libc.malloc_trim(0)
    return True


def limit_arenas(count: int) -> bool:
    """At most ``count`` malloc arenas in this process from now on (threads then share
    them); False where it cannot. Unlike ``MALLOC_ARENA_MAX`` in the environment, the
    processes this one starts keep the default."""
    if _libc is None:
        return False
    return bool(_libc.mallopt(_M_ARENA_MAX, count))
