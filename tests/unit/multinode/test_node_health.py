"""Node death verdicts and clock-offset estimates (pure functions)."""

from __future__ import annotations

import socket

from tracedray.core.gcs import node_health as nh


def test_a_silent_node_dies_at_the_timeout_whatever_the_probe() -> None:
    reason = nh.death_reason(nh.Liveness(6.0, 1.0, 5.0, nh.UNREACHABLE))
    assert reason.startswith("no heartbeat for 6.0s (timeout 5.0s)")


def test_a_late_node_whose_port_refuses_dies_before_the_timeout() -> None:
    assert "raylet exited" in nh.death_reason(nh.Liveness(2.5, 1.0, 30.0, nh.REFUSED))
    # Not late enough, or still listening, or unreachable: alive until the timeout.
    assert nh.death_reason(nh.Liveness(1.5, 1.0, 30.0, nh.REFUSED)) == ""
    assert nh.death_reason(nh.Liveness(10.0, 1.0, 30.0, nh.LISTENING)) == ""
    assert nh.death_reason(nh.Liveness(10.0, 1.0, 30.0, nh.UNREACHABLE)) == ""


def test_probe_tells_listening_from_refused() -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        assert nh.probe_port("127.0.0.1", port) == nh.LISTENING
    assert nh.probe_port("127.0.0.1", port) == nh.REFUSED


def test_clock_offset_uses_the_midpoint_of_the_round_trip() -> None:
    # Node clock 10 s ahead of the GCS; 40 ms out, 10 ms back.
    sent, server, received = 1000.0 + 10.0, 1000.040, 1000.050 + 10.0
    offset, rtt = nh.clock_offset(sent, received, server)
    assert abs(rtt - 0.050) < 1e-9
    assert abs(offset - 10.0) <= rtt / 2
    # The one-way difference would be off by the whole outbound delay.
    assert abs((sent - server) - 10.0) > abs(offset - 10.0)


def test_keep_better_prefers_short_round_trips_but_ages_old_ones() -> None:
    best = nh.keep_better(None, (0.001, 0.002))
    assert nh.keep_better(best, (0.5, 0.010)) == (0.001, 0.0022)  # kept, aged
    assert nh.keep_better(best, (0.003, 0.001)) == (0.003, 0.001)  # tighter wins
    estimate = best
    for _ in range(40):  # slow samples keep coming: eventually they are taken
        estimate = nh.keep_better(estimate, (0.7, 0.05))
    assert estimate == (0.7, 0.05)


def test_an_offset_is_worth_a_warning_only_beyond_its_error_bound() -> None:
    from tracedray.core.gcs.node_health import offset_needs_warning

    assert offset_needs_warning((2.0, 0.002))  # a skewed clock, measured closely
    assert offset_needs_warning((-0.2, 0.1))  # 0.15 s off at least
    assert not offset_needs_warning((0.05, 0.001))  # small
    # 0.13 s apart, but the heartbeat took 0.26 s: the clocks may well agree (seen on
    # one starved machine, where they are the same clock)
    assert not offset_needs_warning((-0.13, 0.26))


def test_the_time_the_gcs_was_stalled_is_left_out_of_a_nodes_silence() -> None:
    # 6 s silent against a 5 s timeout, but the GCS did not run for 1.5 s of it.
    assert nh.death_reason(nh.Liveness(6.0, 1.0, 5.0, nh.UNREACHABLE, stalled_s=1.5)) == ""
    reason = nh.death_reason(nh.Liveness(7.0, 1.0, 5.0, nh.UNREACHABLE, stalled_s=1.5))
    assert reason == ("no heartbeat for 7.0s (timeout 5.0s); 1.5s of it, while the GCS "
                      "itself was stalled, not counted")
    # A refused port is proof whatever the GCS's stalls.
    assert "raylet exited" in nh.death_reason(
        nh.Liveness(2.5, 1.0, 30.0, nh.REFUSED, stalled_s=2.0))


def test_a_stall_is_a_wake_late_by_a_quarter_second_or_more() -> None:
    assert nh.stall_after(10.0, 10.01) == 0.0  # jitter
    assert nh.stall_after(10.0, 10.2) == 0.0
    assert nh.stall_after(10.0, 14.0) == 4.0
    assert nh.stall_after(10.0, 9.9) == 0.0  # early (never, but harmless)


def test_only_the_stalls_within_a_silence_count() -> None:
    stalls = [(100.0, 101.0), (103.0, 105.0), (110.0, 110.5)]
    assert nh.stalled_within(stalls, 100.5, 104.0) == 1.5  # the end of one, part of another
    assert nh.stalled_within(stalls, 105.0, 110.0) == 0.0
    assert nh.stalled_within(stalls, 90.0, 120.0) == 3.5
    assert nh.stalled_within([], 0.0, 1e9) == 0.0


def test_a_late_node_is_suspect_only_past_several_intervals() -> None:
    assert not nh.suspect(1.4, 0.3)
    assert nh.suspect(1.6, 0.3)
