"""One cluster for a whole pytest session, and when a test may not have it.

``SharedCluster`` starts tracedray once and stops it at the session's end. A test
that does not ask for it must see the world it would see without the plugin (no
cluster running: it may call ``tracedray.init()`` itself), so the cluster is
stopped before such a test and started again for the next test that asks
(``before_test``). Heavy imports stay inside the methods.
"""

from __future__ import annotations

import enum
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

SHARED_FIXTURES = ("tracedray_cluster", "tracedray_spans")
ISOLATED_FIXTURE = "tracedray_isolated_spans"


class ClusterNeed(enum.Enum):
    NONE = "none"  # asks for no tracedray fixture
    SHARED = "shared"  # tracedray_cluster, or tracedray_spans in session scope
    ISOLATED = "isolated"  # tracedray_isolated_spans, or tracedray_spans made per-test


class BeforeTest(enum.Enum):
    KEEP = "keep"
    STOP = "stop"  # the shared cluster runs and this test must not find it


def cluster_need(fixturenames: Collection[str], *, isolated: bool) -> ClusterNeed:
    """What a test needs, from the fixtures it uses and its opt-out (marker or ini)."""
    if "tracedray_cluster" in fixturenames:
        return ClusterNeed.SHARED
    if "tracedray_spans" in fixturenames:
        return ClusterNeed.ISOLATED if isolated else ClusterNeed.SHARED
    if ISOLATED_FIXTURE in fixturenames:
        return ClusterNeed.ISOLATED
    return ClusterNeed.NONE


def before_test(need: ClusterNeed, shared_running: bool) -> BeforeTest:
    return BeforeTest.STOP if shared_running and need is not ClusterNeed.SHARED else \
        BeforeTest.KEEP


@dataclass(frozen=True)
class SharedClusterStatistics:
    starts: int  # clusters this plugin started (one per session unless stopped between)
    stops: int
    adopted: int  # times a test used a cluster something else had started instead
    running: bool
    session_dir: str | None  # of the running shared cluster


class SharedCluster:
    """The session's cluster: ``ensure()`` starts it (or uses one already running),
    ``stop()`` shuts down only a cluster it started itself."""

    def __init__(self) -> None:
        self._session_dir: str | None = None  # of the cluster we started, while it runs
        self.options: dict[str, Any] = {}  # tracedray.init() keywords of the last start
        self._starts = 0
        self._stops = 0
        self._adopted = 0

    def running(self) -> bool:
        """Ours, and still the cluster this process is connected to (a test may have
        shut it down, or shut it down and started its own)."""
        if self._session_dir is None:
            return False  # nothing of ours: no need to import the runtime to know
        from tracedray.api import calls as api

        return api.is_initialized() and str(api.current_session_dir()) == self._session_dir

    @property
    def session_dir(self) -> str | None:
        return self._session_dir if self.running() else None

    def ensure(self, options: Mapping[str, Any] | None = None) -> None:
        """Make sure a cluster runs: ours if it still does, else one already running
        (left to its owner), else a new one started with ``options``."""
        import tracedray
        from tracedray.api import calls as api

        if self.running():
            return
        self._session_dir = None
        if tracedray.is_initialized():
            self._adopted += 1
            return
        chosen = dict(self.options if options is None else options)
        tracedray.init(**chosen)
        self.options = chosen
        self._session_dir = str(api.current_session_dir())
        self._starts += 1

    def restart_if_stopped(self) -> None:
        """Start ours again if it ran before and was stopped (its fixture value is cached
        for the session, so the fixture itself will not)."""
        if self._starts and not self.running():
            self.ensure()

    def stop(self) -> None:
        if not self.running():
            self._session_dir = None
            return
        import tracedray

        self._session_dir = None
        tracedray.shutdown()
        self._stops += 1

    def statistics(self) -> SharedClusterStatistics:
        running = self.running()
        return SharedClusterStatistics(starts=self._starts, stops=self._stops,
                                       adopted=self._adopted, running=running,
                                       session_dir=self._session_dir if running else None)
