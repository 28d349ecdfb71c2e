"""When the telemetry agent converts (core/raylet/conversion_policy.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tracedray.core.raylet.conversion_policy import CpuMeter, conversion_due


@pytest.mark.parametrize(("busy", "waited", "max_defer", "due"), [
    (0.2, 0.5, 10.0, True),     # the machine has room
    (0.9, 0.5, 10.0, False),    # busy: wait...
    (0.9, 10.0, 10.0, True),    # ...but never longer than max_defer_s
    (0.25, 0.5, 10.0, False),   # a quarter of the machine busy counts as busy
    (None, 0.5, 10.0, True),    # load unknown (no /proc/stat): never defer
    (1.0, 0.5, 0.0, True),      # deferral turned off
])
def test_conversion_due(busy: float | None, waited: float, max_defer: float,
                        due: bool) -> None:
    assert conversion_due(busy, waited, max_defer_s=max_defer) is due


def _stat(path: Path, user: int, idle: int, iowait: int = 0, steal: int = 0) -> None:
    path.write_text(f"cpu  {user} 0 0 {idle} {iowait} 0 0 {steal} 0 0\ncpu0 1 2 3 4\n")


def test_the_meter_counts_others_busy_time_but_not_its_own(tmp_path: Path) -> None:
    stat = tmp_path / "stat"
    own = [0.0]
    _stat(stat, user=1000, idle=1000)
    meter = CpuMeter(stat, own_cpu_s=lambda: own[0])
    ticks = meter._ticks_per_s
    # 300 busy ticks and 100 idle since: 75% busy, of which this process used 100 ticks.
    _stat(stat, user=1300, idle=1100)
    own[0] = 100 / ticks
    assert meter.busy_fraction() == pytest.approx(0.5)
    # I/O wait is idle time; steal (the host took the CPU) is busy time.
    _stat(stat, user=1300, idle=1100 + 100, iowait=100, steal=200)
    assert meter.busy_fraction() == pytest.approx(0.5)


def test_an_unreadable_or_foreign_stat_file_means_unknown(tmp_path: Path) -> None:
    assert CpuMeter(tmp_path / "missing").busy_fraction() is None
    odd = tmp_path / "odd"
    odd.write_text("intr 1 2 3\n")
    assert CpuMeter(odd).busy_fraction() is None
    stat = tmp_path / "stat"
    _stat(stat, user=10, idle=10)
    meter = CpuMeter(stat)
    assert meter.busy_fraction() is None  # no time passed between the two readings


class _BusyMachine:
    """A CpuMeter whose machine stays fully busy."""

    def busy_fraction(self) -> float:
        return 1.0


_PREFIX = '{"resourceSpans":[{"resource":{},"scopeSpans":[{"spans":['


def _busy_agent_with_a_span(tmp_path: Path) -> tuple[Path, Any, Any]:
    """(a driver's spool holding one span, its writer, an agent on a machine that stays
    busy: every 0.05 s a round, put off for at most 0.5 s)."""
    from tracedray.core.raylet.telemetry_agent import SpoolConverter
    from tracedray.telemetry import spool_format as fmt
    from tracedray.telemetry.spool_writer import SpoolWriter

    traces = tmp_path / "traces"
    spool = traces / "driver-9.spool"
    writer = SpoolWriter(spool, _PREFIX)
    writer.append(fmt.span_payload(1, 2, 0, "task.submit", 0, 1, 2, {}))
    converter = SpoolConverter(traces, interval_s=0.05, max_defer_s=0.5,
                               meter=_BusyMachine())  # type: ignore[arg-type]
    return spool, writer, converter


def test_a_busy_machine_delays_the_agent_by_at_most_max_defer(tmp_path: Path) -> None:
    from tracedray.telemetry.spool_convert import jsonl_path

    spool, writer, converter = _busy_agent_with_a_span(tmp_path)
    times: list[float] = []
    import time

    started = time.monotonic()

    def should_stop() -> bool:
        if jsonl_path(spool).exists():
            times.append(time.monotonic() - started)
            return True
        assert time.monotonic() - started < 20, "the agent never converted"
        return False

    converter.run(should_stop)
    writer.close()
    stats = converter.statistics()
    assert stats.rounds_deferred >= 3  # it waited while the machine was busy...
    assert 0.4 <= times[0] < 10  # ...for max_defer_s, then converted anyway
    assert stats.spans_converted >= 1


def test_has_unconverted_sees_records_past_the_converted_mark_only(tmp_path: Path) -> None:
    from tracedray.telemetry import spool_format as fmt
    from tracedray.telemetry.spool_convert import convert_spool, has_unconverted
    from tracedray.telemetry.spool_writer import SpoolWriter

    traces = tmp_path / "traces"
    assert not has_unconverted(traces)  # no folder yet
    traces.mkdir()
    (traces / "notes.spool").write_bytes(b"not a spool at all, but long enough " * 4)
    spool = traces / "driver-9.spool"
    writer = SpoolWriter(spool, _PREFIX)
    try:
        assert not has_unconverted(traces)  # its resource record only
        writer.append(fmt.span_payload(1, 2, 0, "task.submit", 0, 1, 2, {}))
        assert has_unconverted(traces)
        convert_spool(spool)
        assert not has_unconverted(traces)
        writer.append(fmt.span_payload(1, 3, 0, "task.submit", 0, 1, 2, {}))
        assert has_unconverted(traces)
    finally:
        writer.close()


def test_spans_a_reader_converted_do_not_start_the_agents_deferral_clock(
        tmp_path: Path) -> None:
    """A busy machine: a reader converts the backlog while the agent defers; spans
    written later wait max_defer from when they appeared, not from the agent's start."""
    import time

    from tracedray.telemetry import spool_format as fmt
    from tracedray.telemetry.spool_convert import convert_spool, jsonl_path

    spool, writer, converter = _busy_agent_with_a_span(tmp_path)
    started = time.monotonic()
    marks: dict[str, float] = {}

    def should_stop() -> bool:  # polled by the agent's loop: the test's clock
        elapsed = time.monotonic() - started
        if "read" not in marks and elapsed >= 0.2:
            convert_spool(spool)  # a reader (the CLI, say) converts everything
            marks["read"] = elapsed
        if "written" not in marks and elapsed >= 0.9:
            writer.append(fmt.span_payload(1, 3, 0, "task.submit", 0, 1, 2, {}))
            marks["written"] = elapsed
        if "written" in marks and jsonl_path(spool).read_text().count('"spanId"') >= 2:
            marks["converted"] = elapsed
            return True
        assert elapsed < 20, "the agent never converted the later span"
        return False

    converter.run(should_stop)
    writer.close()
    # Before the change the agent counted from its start and converted within a round.
    assert marks["converted"] - marks["written"] >= 0.45
