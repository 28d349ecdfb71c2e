"""When the telemetry agent converts: when the machine has CPU to spare, or when the
spans have waited long enough.

Even at the lowest priority the agent's conversion is not free while the runtime's
processes run: on the 2-vCPU benchmark machine a burst of small tasks ran ~5% slower
with the agent converting every half second than with it waiting, and a driver doing
put+get on one core slowed too while the agent converted on the other
(benchmarks/telemetry.py; the host's cores are shared, caches and memory bandwidth
too). Nothing is lost by waiting — every ended span is already in its spool, and every
reader converts what the agent has not — so the agent defers a round while other
processes used at least BUSY_THRESHOLD of the machine's CPU time since its last look,
for at most ``max_defer_s``; after that it converts whatever the load, so a tailer of
``traces/*.jsonl`` never lags by more than about that.

The decision is :func:`conversion_due`, a pure function; :class:`CpuMeter` reads
``/proc/stat`` at the edge (None where there is none: the agent then never defers).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

BUSY_THRESHOLD = 0.25  # of all cores' time: unless three quarters of the machine sat idle, wait


def conversion_due(busy_fraction: float | None, waited_s: float, *, max_defer_s: float,
                   busy_threshold: float = BUSY_THRESHOLD) -> bool:
    """Whether a round converts now.

    ``busy_fraction``: the share of the machine's CPU time others used since the last
    look (None: unknown); ``waited_s``: how long since the agent last converted.
    ``max_defer_s`` 0 never defers.
    """
    if busy_fraction is None or max_defer_s <= 0:
        return True
    return busy_fraction < busy_threshold or waited_s >= max_defer_s


def machine_ticks(stat_text: str) -> list[int] | None:
    """The whole machine's CPU ticks from the text of ``/proc/stat``: user, nice,
    system, idle, iowait, irq, softirq, steal (as many as the kernel gives, at least
    four; guest time is in user). None when the text is not that."""
    first = stat_text.split("\n", 1)[0].split()
    if len(first) < 5 or first[0] != "cpu":
        return None
    try:
        return [int(value) for value in first[1:9]]
    except ValueError:
        return None


def _own_cpu_s() -> float:
    times = os.times()
    return times.user + times.system


class CpuMeter:
    """The share of the machine's CPU time used by other processes between two calls
    of :meth:`busy_fraction` (this process's own use is left out: a converting agent
    must not count as load that makes it wait)."""

    def __init__(self, stat_path: Path = Path("/proc/stat"),
                 own_cpu_s: Callable[[], float] = _own_cpu_s) -> None:
        self._path = stat_path
        self._own_cpu_s = own_cpu_s
        try:
            self._ticks_per_s = float(os.sysconf("SC_CLK_TCK"))
        except (ValueError, OSError, AttributeError):
            self._ticks_per_s = 100.0
        self._last = self._read()

    def _read(self) -> tuple[float, float, float] | None:
        """(all CPU seconds, busy CPU seconds, own CPU seconds) so far; None if unknown."""
        try:
            ticks = machine_ticks(self._path.read_text())
        except OSError:
            return None
        if ticks is None:
            return None
        idle = ticks[3] + ticks[4]  # waiting for I/O leaves the CPU free too
        total = sum(ticks)
        return total / self._ticks_per_s, (total - idle) / self._ticks_per_s, self._own_cpu_s()

    def busy_fraction(self) -> float | None:
        now = self._read()
        last, self._last = self._last, now
        if now is None or last is None:
            return None
        total = now[0] - last[0]
        if total <= 0:
            return None
        others = (now[1] - last[1]) - (now[2] - last[2])
        return min(max(others / total, 0.0), 1.0)
