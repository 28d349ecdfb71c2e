"""pytest plugin (entry point ``pytest11``): a session-wide cluster and its spans.

Fixtures:

- ``tracedray_cluster`` (session): one cluster for the whole pytest session.
- ``tracedray_spans`` (function): the spans of the current test only, read from every
  process of that shared cluster, with query helpers (``tracedray.testing.spans``).
- ``tracedray_isolated_spans`` (function): a cluster of its own for one test, as
  ``tracedray_spans`` did before; the ``tracedray_isolated`` marker or the ini option
  ``tracedray_cluster_scope = function`` make ``tracedray_spans`` behave so.
- ``tracedray_init_options`` (session): the ``tracedray.init()`` keywords of the
  clusters the plugin starts; override it in a ``conftest.py``.

Imports stay inside functions: pytest loads this module for every run, including
``pytest --help``, and must not pay for grpc or the OTel SDK there.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from tracedray.testing.finished_spans import FinishedSpans, FinishedSpansStatistics
from tracedray.testing.shared_cluster import (
    BeforeTest,
    ClusterNeed,
    SharedCluster,
    before_test,
    cluster_need,
)
from tracedray.testing.spans import Spans

__all__ = ["FinishedSpans", "FinishedSpansStatistics", "SharedCluster", "Spans"]

MARKER = "tracedray_isolated"
SCOPE_INI = "tracedray_cluster_scope"
_SCOPES = ("session", "function")
_DOUBLE_INIT_HINT = (
    "tracedray's pytest plugin was running its shared cluster (tracedray_spans / "
    "tracedray_cluster) when this test or one of its fixtures called tracedray.init(). "
    "Give such a test a cluster of its own: mark it @pytest.mark.tracedray_isolated, use "
    "the tracedray_isolated_spans fixture, or set `tracedray_cluster_scope = function` "
    "in the pytest ini file; or let it use the shared cluster instead of calling init().")


@dataclass
class _PluginState:
    cluster: SharedCluster = field(default_factory=SharedCluster)
    spans: FinishedSpans = field(default_factory=FinishedSpans)
    shared_tests: int = 0
    isolated_tests: int = 0


_STATE = pytest.StashKey[_PluginState]()


def _state(config: pytest.Config) -> _PluginState:
    state = config.stash.get(_STATE, None)
    if state is None:
        state = config.stash[_STATE] = _PluginState()
    return state


def _isolated(item: pytest.Item) -> bool:
    return (item.get_closest_marker(MARKER) is not None
            or item.config.getini(SCOPE_INI) == "function")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini(SCOPE_INI, "tracedray: 'session' (default): tracedray_spans shares one "
                  "cluster for the whole session; 'function': a cluster per test",
                  default="session")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", f"{MARKER}: tracedray_spans starts a cluster for this test alone "
        "instead of using the session's shared one")
    scope = config.getini(SCOPE_INI)
    if scope not in _SCOPES:
        raise pytest.UsageError(f"{SCOPE_INI} = {scope!r} in the pytest ini file: use "
                                f"{' or '.join(_SCOPES)}")
    _state(config)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Before any fixture of the test: stop the shared cluster if the test does not use
    it, and mark where the test's spans begin if it does."""
    state = _state(item.config)
    fixturenames = getattr(item, "fixturenames", ())
    need = cluster_need(fixturenames, isolated=_isolated(item))
    if before_test(need, state.cluster.running()) is BeforeTest.STOP:
        state.cluster.stop()
    if need is ClusterNeed.ISOLATED:
        state.isolated_tests += 1
    if need is not ClusterNeed.SHARED:
        return
    state.shared_tests += 1
    if "tracedray_cluster" in fixturenames:
        state.cluster.restart_if_stopped()
    if "tracedray_spans" in fixturenames:
        state.spans.start_test()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[Any]:
    outcome: Any = yield
    excinfo = call.excinfo
    if excinfo is None or excinfo.typename != "RaySystemError":
        return
    if "called twice" in str(excinfo.value) and _state(item.config).cluster.running():
        outcome.get_result().sections.append(("tracedray", _DOUBLE_INIT_HINT))


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int,
                            config: pytest.Config) -> None:
    state = config.stash.get(_STATE, None)
    if state is None or not state.shared_tests:
        return
    stats = state.cluster.statistics()
    terminalreporter.write_line(
        f"tracedray: {stats.starts} shared cluster start(s) for {state.shared_tests} "
        f"test(s) using tracedray_spans/tracedray_cluster; {state.isolated_tests} "
        "isolated test(s)")


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session) -> None:
    # The session fixture's teardown stops it; this covers a run that never tore down.
    state = session.config.stash.get(_STATE, None)
    if state is not None:
        state.cluster.stop()


@pytest.fixture(scope="session")
def tracedray_init_options() -> dict[str, Any]:
    """Keywords for ``tracedray.init()`` when the plugin starts a cluster (default: none,
    as a plain ``tracedray.init()``). Override in ``conftest.py``, session-scoped."""
    return {}


@pytest.fixture(scope="session")
def tracedray_cluster(request: pytest.FixtureRequest,
                      tracedray_init_options: dict[str, Any]) -> Iterator[SharedCluster]:
    """One tracedray cluster for the whole pytest session, shut down at its end.

    A cluster already running when it is first needed (a test's own ``init()``) is
    used and left to its owner. The shared cluster is stopped before a test that
    uses no tracedray fixture, and started again for the next one that does.
    """
    cluster = _state(request.config).cluster
    cluster.ensure(tracedray_init_options)
    yield cluster
    cluster.stop()


def _isolated_spans(options: dict[str, Any]) -> Iterator[FinishedSpans]:
    import tracedray

    started_here = False
    if not tracedray.is_initialized():
        tracedray.init(**options)
        started_here = True
    try:
        yield FinishedSpans()
    finally:
        if started_here:
            tracedray.shutdown()


@pytest.fixture
def tracedray_spans(request: pytest.FixtureRequest) -> Iterator[FinishedSpans]:
    """The spans of this test, from every process of the session's shared cluster.

    Only spans that ended since the test began are returned, without those of work
    an earlier test began (a task it did not wait for, and that task's children).
    With the ``tracedray_isolated`` marker or ``tracedray_cluster_scope = function``
    it behaves as ``tracedray_isolated_spans``.
    """
    if _isolated(request.node):
        yield from _isolated_spans(request.getfixturevalue("tracedray_init_options"))
        return
    cluster: SharedCluster = request.getfixturevalue("tracedray_cluster")
    cluster.ensure()  # again: a test before may have stopped it, or shut it down
    yield _state(request.config).spans


@pytest.fixture
def tracedray_isolated_spans(
        tracedray_init_options: dict[str, Any]) -> Iterator[FinishedSpans]:
    """Start tracedray if the test has not, collect every span of the cluster, and shut
    it down after the test if this fixture started it (a cluster per test)."""
    yield from _isolated_spans(tracedray_init_options)
