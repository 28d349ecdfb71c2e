"""Deciding that a node is dead, and estimating its clock offset.

Two ways a node dies in the GCS's eyes: its heartbeats stop for longer than
``TRACEDRAY_NODE_DEATH_TIMEOUT_S``, or they are late and its raylet's port refuses
connections (the process exited: on a reachable host nobody listens there any more),
which is noticed within a couple of heartbeat intervals instead of the full timeout.
A probe that times out proves nothing (a busy or partitioned node), so only the
timeout can kill such a node.

The silence the timeout is held against leaves out the time the GCS itself was stalled
(its node watch woke late: the process was not scheduled, or its GIL was held). A
heartbeat sent meanwhile may still wait unread in the GCS's server queue: on a starved
machine, counting that time killed live nodes.

Each raylet also estimates its clock's offset to the head's (node clock minus head
clock) from its heartbeat round trips; the GCS node table keeps the latest, and the
raylet logs it (``node.clock_offset``) when it changes, for the CLI's merged views.
"""

from __future__ import annotations

import math
import socket
from collections.abc import Iterable
from dataclasses import dataclass

from tracedray import config

REFUSED, UNREACHABLE, LISTENING = "refused", "unreachable", "listening"
# Heartbeats this many intervals late make the GCS look at the raylet's port.
LATE_INTERVALS = 2.0
# This many intervals of silence make an ALIVE node SUSPECT in `tracedray status`.
SUSPECT_INTERVALS = 5.0


@dataclass(frozen=True)
class Liveness:
    """What the GCS knows about one ALIVE node at one moment."""

    silent_s: float  # since the last heartbeat
    heartbeat_interval_s: float
    timeout_s: float
    probe: str = ""  # REFUSED | UNREACHABLE | LISTENING | "" (not probed)
    stalled_s: float = 0.0  # of the silence, how long the GCS itself was stalled


def suspect(silent_s: float, heartbeat_interval_s: float) -> bool:
    """Whether an ALIVE node is late enough to be shown as SUSPECT (not yet dead): more
    heartbeats missed than a busy machine delays."""
    return silent_s > SUSPECT_INTERVALS * heartbeat_interval_s


def should_probe(silent_s: float, heartbeat_interval_s: float) -> bool:
    return silent_s > LATE_INTERVALS * heartbeat_interval_s


def timed_out(silent_s: float, stalled_s: float, timeout_s: float) -> bool:
    """Whether a node's silence is past the death timeout (pure). The timeout is held
    against the silence the GCS could see: less the time it was stalled itself."""
    return silent_s - stalled_s > timeout_s


def death_reason(state: Liveness) -> str:
    """Why the node is dead, or "" while it is not (pure)."""
    if timed_out(state.silent_s, state.stalled_s, state.timeout_s):
        reason = f"no heartbeat for {state.silent_s:.1f}s (timeout {state.timeout_s:.1f}s)"
        if state.stalled_s > 0:
            reason += (f"; {state.stalled_s:.1f}s of it, while the GCS itself was stalled, "
                       "not counted")
        return reason
    if state.probe == REFUSED and should_probe(state.silent_s, state.heartbeat_interval_s):
        return (f"its raylet exited: no heartbeat for {state.silent_s:.1f}s and its port "
                "refuses connections")
    return ""


# --- the GCS's own stalls
# The node watch asks to wake every half second or so. Waking this much later (its lock
# taken) means the GCS process did not run: worth leaving out of nodes' silence, and
# far above the jitter of a loaded but healthy machine (~10 ms).
STALL_MIN_S = 0.25


def stall_after(expected_s: float, woke_s: float) -> float:
    """How long the watch was stalled, if it woke at ``woke_s`` where it asked for
    ``expected_s`` (monotonic seconds): the lateness, or 0 under STALL_MIN_S (pure)."""
    late = woke_s - expected_s
    return late if late >= STALL_MIN_S else 0.0


def stalled_within(stalls: Iterable[tuple[float, float]], since: float, until: float) -> float:
    """Seconds of [since, until] that the (start, end) stretches ``stalls`` cover; the
    stretches do not overlap each other (pure)."""
    return sum(max(0.0, min(end, until) - max(start, since)) for start, end in stalls)


def probe_port(ip: str, port: int, timeout_s: float = 1.0) -> str:
    """Is anything listening at ip:port? (REFUSED means the process is gone.)"""
    try:
        with socket.create_connection((ip, port), timeout=timeout_s):
            return LISTENING
    except ConnectionRefusedError:
        return REFUSED
    except OSError:
        return UNREACHABLE


def clock_offset(sent_at: float, received_at: float, server_time: float) -> tuple[float, float]:
    """(offset, round trip) of a client clock against a server's, NTP style (pure).

    The server read its clock somewhere between the client's send and receive; taking
    the midpoint makes the error at most half the round trip, whatever the delay of
    either direction, unlike the one-way difference which includes the network delay.
    """
    rtt = max(0.0, received_at - sent_at)
    return (sent_at + received_at) / 2.0 - server_time, rtt


def keep_better(current: tuple[float, float] | None,
                sample: tuple[float, float]) -> tuple[float, float]:
    """The (offset, rtt) estimate to keep after a new sample (pure).

    A sample with a shorter round trip has a tighter error bound (rtt / 2), so it wins;
    a slower one is taken only when much slower samples keep coming, because the kept
    estimate's round trip ages (grows 10% per sample): clocks drift, and an old sample
    must not be kept forever.
    """
    if current is None or sample[1] <= current[1]:
        return sample
    aged = (current[0], current[1] * 1.1)
    return sample if sample[1] <= aged[1] else aged


# --- telling the CLI about the estimate
# The raylet logs a `node.clock_offset` line (the CLI puts every node's records on the
# head's clock from these lines, also after the cluster stopped) when its first estimate
# is made and afterwards only when the estimate moved by more than the error bound of the
# one last logged (half its round trip), and by at least this much: rare, not per heartbeat.
REPORT_MIN_CHANGE_S = 0.001
# An offset this large is logged as a warning: the node's clock should be synchronized (NTP).
WARN_OFFSET_S = 0.1


def offset_needs_warning(estimate: tuple[float, float]) -> bool:
    """Whether an (offset, rtt) estimate shows a clock off by WARN_OFFSET_S or more even
    at the near end of its error bound (half the round trip), pure. A heartbeat that took
    0.3 s on a starved machine can put two clocks of one host 0.15 s apart: no warning."""
    offset, rtt = estimate
    return abs(offset) - rtt / 2.0 >= WARN_OFFSET_S

TESTING_CLOCK_SKEW_S: config.Variable[float] = config.Variable(
    "TRACEDRAY_TESTING_CLOCK_SKEW_S",
    lambda text: _finite(float(text)),
    lambda: 0.0,
    "For tests only: seconds added to this node's measured clock offset (node clock minus "
    "head clock), so the CLI's clock correction can be exercised on one machine, where real "
    "offsets are ~0. Never set it on a real cluster: every record of the node would be "
    "shifted by it.",
)


def _finite(value: float) -> float:
    if not math.isfinite(value):
        raise ValueError(f"expected a finite number, got {value!r}")
    return value


def report_due(reported: tuple[float, float] | None, estimate: tuple[float, float]) -> bool:
    """Whether the raylet should log ``estimate`` (offset, rtt), given the one it logged
    last (pure)."""
    if reported is None:
        return True
    return abs(estimate[0] - reported[0]) > max(REPORT_MIN_CHANGE_S, reported[1] / 2.0)


def with_skew(sample: tuple[float, float], skew_s: float) -> tuple[float, float]:
    """A measured (offset, rtt) as if this node's clock were ``skew_s`` further ahead."""
    return sample[0] + skew_s, sample[1]
