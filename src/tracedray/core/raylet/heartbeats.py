"""A raylet's heartbeats to the GCS: on a thread of their own, at a fixed rate.

The GCS declares a node dead when its heartbeats stop for the death timeout, so nothing
else may delay them: the refresh of the raylet's view of its peers (a GetNodes call,
then re-deciding queued requests under the raylet's lock) runs on another thread, and
the time a heartbeat's own call takes does not push the next ones later.

Each heartbeat also measures this node's clock offset to the head's (node_health), and
a reply that says the GCS does not know the node (a restarted GCS without storage)
makes the raylet register again. A gap between two heartbeats of more than
``LATE_INTERVALS`` intervals is logged (``heartbeat.late``): this raylet did not run
on time, which is what a node wrongly declared dead has in its log.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from tracedray import logs
from tracedray._proto.v1 import gcs_pb2
from tracedray.core.gcs import node_health
from tracedray.core.gcs.client import GcsClient
from tracedray.exceptions import RaySystemError

log = logs.get_logger(__name__)

# A gap between heartbeats worth a warning, in intervals (the GCS looks at a node's
# port after node_health.LATE_INTERVALS of silence).
LATE_INTERVALS = node_health.LATE_INTERVALS


def next_due(due: float, interval_s: float, now: float) -> float:
    """When the heartbeat after the one that was due at ``due`` is due, ``now`` being
    when that one's call returned (pure): a fixed rate, so a call's time does not push
    the next heartbeats later; one that fell behind is sent at once, not in a burst to
    catch up."""
    return max(due + interval_s, now)


@dataclass(frozen=True)
class HeartbeatStatistics:
    sent_total: int
    failed_total: int
    late_total: int  # gaps between sends longer than LATE_INTERVALS intervals
    longest_gap_s: float  # between two sends


class Heartbeats:
    """Sends ``request()`` to the GCS every ``interval_s`` until ``stopped`` is set."""

    def __init__(self, *, gcs: GcsClient, node_id: str, interval_s: float,
                 request: Callable[[], gcs_pb2.HeartbeatRequest],
                 reregister: Callable[[], None], stopped: threading.Event,
                 fence: Callable[[str], None] = lambda reason: None,
                 clock_skew_s: float = 0.0) -> None:
        self._gcs = gcs
        self._node_id = node_id
        self._interval_s = interval_s
        self._request = request
        self._reregister = reregister
        self._fence = fence
        self._stopped = stopped
        self._skew_s = clock_skew_s
        self._estimate: tuple[float, float] | None = None  # clock (offset, rtt)
        self._reported: tuple[float, float] | None = None  # the estimate last logged
        self._lock = threading.Lock()
        self._sent = self._failed = self._late = 0
        self._longest_gap_s = 0.0

    def run(self) -> None:
        due = time.monotonic() + self._interval_s
        last_sent: float | None = None
        while not self._stopped.wait(max(0.0, due - time.monotonic())):
            now = time.monotonic()
            if last_sent is not None:
                self._note_gap(now - last_sent)
            last_sent = now
            self._beat()
            due = next_due(due, self._interval_s, time.monotonic())

    def _note_gap(self, gap_s: float) -> None:
        late = gap_s > LATE_INTERVALS * self._interval_s
        with self._lock:
            self._longest_gap_s = max(self._longest_gap_s, gap_s)
            self._late += late
        if late:
            log.warning("heartbeat.late", node_id=self._node_id, gap_s=round(gap_s, 3),
                        interval_s=self._interval_s,
                        why="this raylet's heartbeat thread did not run on time (a starved "
                            "machine, a stopped process, or a held interpreter lock)")

    def _beat(self) -> None:
        request = self._request()
        request.sent_at = time.time()
        if self._estimate is not None:
            request.clock_offset_s, request.clock_rtt_s = self._estimate
            request.has_clock_estimate = True
        try:
            reply = self._gcs.heartbeat(request)
            self._note_clock(node_health.clock_offset(request.sent_at, time.time(),
                                                      reply.gcs_time))
            if reply.declared_dead:
                self._fence(reply.death_reason)
                return
            if reply.unknown_node:
                log.warning("node.reregister", reason="the GCS does not know this node")
                self._reregister()
        except RaySystemError as exc:
            with self._lock:
                self._failed += 1
            log.warning("heartbeat.failed", error=str(exc))
            return
        with self._lock:
            self._sent += 1

    def _note_clock(self, sample: tuple[float, float]) -> None:
        estimate = node_health.keep_better(self._estimate,
                                           node_health.with_skew(sample, self._skew_s))
        self._estimate = estimate
        if node_health.report_due(self._reported, estimate):
            self._reported = estimate
            (log.warning if node_health.offset_needs_warning(estimate) else log.info)(
                "node.clock_offset", node_id=self._node_id, offset_s=estimate[0],
                rtt_s=estimate[1])

    def statistics(self) -> HeartbeatStatistics:
        with self._lock:
            return HeartbeatStatistics(sent_total=self._sent, failed_total=self._failed,
                                       late_total=self._late,
                                       longest_gap_s=self._longest_gap_s)
