"""A raylet's heartbeats (raylet/heartbeats.py) against a GCS client stand-in: a fixed
rate, the clock estimate, re-registering, failures and late gaps counted."""

from __future__ import annotations

import threading
import time
from typing import Any

from tracedray._proto.v1 import gcs_pb2
from tracedray.core.raylet.heartbeats import LATE_INTERVALS, Heartbeats, next_due
from tracedray.exceptions import RaySystemError


def test_the_next_heartbeat_keeps_the_rate_and_never_bursts() -> None:
    assert next_due(10.0, 1.0, 10.2) == 11.0  # the call took 0.2 s: still due at 11
    assert next_due(10.0, 1.0, 11.0) == 11.0
    assert next_due(10.0, 1.0, 13.5) == 13.5  # fell behind: at once, then every second


class FakeGcs:
    """Answers heartbeats; ``script`` says, per call, how to answer: "ok", "unknown"
    (the GCS does not know the node), "fail", or a number of seconds to take."""

    def __init__(self, script: list[Any]) -> None:
        self.script = list(script)
        self.requests: list[gcs_pb2.HeartbeatRequest] = []
        self.done = threading.Event()

    def heartbeat(self, request: gcs_pb2.HeartbeatRequest) -> gcs_pb2.HeartbeatReply:
        self.requests.append(gcs_pb2.HeartbeatRequest.FromString(request.SerializeToString()))
        step = self.script.pop(0) if self.script else "ok"
        if not self.script:
            self.done.set()
        if step == "fail":
            raise RaySystemError("the GCS at 127.0.0.1:1 is unreachable")
        if isinstance(step, float):
            time.sleep(step)
        return gcs_pb2.HeartbeatReply(gcs_time=time.time(), unknown_node=step == "unknown")


def run(script: list[Any], interval_s: float = 0.05) -> tuple[Heartbeats, FakeGcs, list[int]]:
    gcs, stopped, registered = FakeGcs(script), threading.Event(), []
    beats = Heartbeats(gcs=gcs, node_id="n1", interval_s=interval_s,  # type: ignore[arg-type]
                       request=lambda: gcs_pb2.HeartbeatRequest(node_id="n1"),
                       reregister=lambda: registered.append(1), stopped=stopped)
    thread = threading.Thread(target=beats.run)
    thread.start()
    try:
        assert gcs.done.wait(30)
    finally:
        stopped.set()
        thread.join(10)
    assert not thread.is_alive()
    return beats, gcs, registered


def test_heartbeats_carry_the_clock_estimate_and_reregister_when_unknown() -> None:
    beats, gcs, registered = run(["ok", "unknown", "ok", "ok"])
    assert not gcs.requests[0].has_clock_estimate  # nothing measured yet
    assert all(r.has_clock_estimate and abs(r.clock_offset_s) < 1.0 for r in gcs.requests[1:])
    assert all(r.sent_at > 0 and r.node_id == "n1" for r in gcs.requests)
    assert registered == [1]
    stats = beats.statistics()
    assert stats.sent_total >= 4 and stats.failed_total == 0


def test_a_failed_heartbeat_is_counted_and_the_next_one_goes_out() -> None:
    beats, gcs, _ = run(["fail", "fail", "ok"])
    stats = beats.statistics()
    assert stats.failed_total == 2 and stats.sent_total >= 1 and len(gcs.requests) >= 3


def test_a_gap_longer_than_late_intervals_is_counted_as_late() -> None:
    interval = 0.05
    slow = (LATE_INTERVALS + 2) * interval  # one call takes that long: the next is late
    beats, _, _ = run(["ok", slow, "ok", "ok"], interval_s=interval)
    stats = beats.statistics()
    assert stats.late_total >= 1 and stats.longest_gap_s >= slow, stats


def test_a_slow_call_does_not_push_the_following_heartbeats_later() -> None:
    # Interval 0.5 s; the first call takes 0.4 s. A loop that waited a whole interval
    # after each call would send the second at 0.9 s; a fixed rate sends it at 0.5 s.
    _, gcs, _ = run([0.4, "ok", "ok"], interval_s=0.5)
    gap = gcs.requests[1].sent_at - gcs.requests[0].sent_at
    assert gap < 0.8, gap
