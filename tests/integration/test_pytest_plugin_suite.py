"""The pytest plugin at suite scale: a user's test suite run by pytest, with the plugin.

A generated suite of ~20 tests that use ``tracedray_spans`` must start one cluster for
the whole session (one session folder), each test must see only its own spans (not
those of a task an earlier test left running), and nothing may be left behind.
"""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import psutil
import pytest

pytestmark = pytest.mark.integration

# The store's /dev/shm files are named tracedray-<last 24 chars of the session dir>-...
_FRAGMENT = 24

CONFTEST = textwrap.dedent('''
    import pytest


    @pytest.fixture(scope="session")
    def tracedray_init_options():
        return {"num_cpus": 4, "object_store_memory": 128 << 20}
''')

SUITE = textwrap.dedent('''
    import os
    import time

    import pytest
    import tracedray

    FLAG = {flag!r}
    LEFT = {{}}


    @tracedray.remote
    def work(i):
        return i * 2


    @tracedray.remote
    def child_of_leftover():
        return 1


    @tracedray.remote
    def leftover():
        deadline = time.monotonic() + 60
        while not os.path.exists(FLAG) and time.monotonic() < deadline:
            time.sleep(0.05)
        return tracedray.get(child_of_leftover.remote()) + 1


    def test_options_reach_the_shared_cluster(tracedray_cluster):
        assert tracedray.cluster_resources()["CPU"] == 4
        assert tracedray_cluster.session_dir


    @pytest.mark.parametrize("i", range(18))
    def test_sees_only_its_own_task(tracedray_spans, i):
        ref = work.remote(i)
        assert tracedray.get(ref) == i * 2
        spans = tracedray_spans.get_finished_spans()
        tasks = {{s.attributes["tracedray.task.id"]
                 for s in spans.named("task.submit", "task.dispatch", "task.execute")}}
        assert tasks == {{ref.task_id().hex()}}, spans.listing()
        execute = tracedray_spans.one("task.execute", {{"tracedray.task.id": ref.task_id().hex()}})
        assert execute.resource.attributes["tracedray.component"] == "worker"
        submit = tracedray_spans.of_task(ref).one("task.submit")
        assert spans.children_of(submit).named("task.execute") == (execute,)


    def test_leaves_a_task_running(tracedray_spans):
        LEFT["ref"] = leftover.remote()
        assert tracedray_spans.named("task.submit").one().attributes[
            "tracedray.task.id"] == LEFT["ref"].task_id().hex()


    def test_does_not_see_the_leftover_task(tracedray_spans):
        open(FLAG, "w").close()
        assert tracedray.get(LEFT["ref"]) == 2  # it and its child end during this test
        mine = work.remote(100)
        assert tracedray.get(mine) == 200
        spans = tracedray_spans.get_finished_spans()
        functions = {{s.attributes.get("tracedray.task.function", "").rsplit(".", 1)[-1]
                     for s in spans}} - {{""}}
        assert functions == {{"work"}}, spans.tree()
        assert tracedray_spans.statistics().hidden_earlier_work >= 4
''')

COMPAT = textwrap.dedent('''
    import pytest
    import tracedray


    @tracedray.remote
    def one():
        return 1


    @pytest.fixture
    def own_cluster():
        tracedray.init(num_cpus=1)
        yield
        tracedray.shutdown()


    def test_shared_first(tracedray_spans):
        assert tracedray.get(one.remote()) == 1
        assert tracedray_spans.named("task.execute")


    def test_without_fixtures_may_start_its_own():
        assert not tracedray.is_initialized()
        tracedray.init(num_cpus=1)
        assert tracedray.get(one.remote()) == 1
        tracedray.shutdown()


    @pytest.mark.tracedray_isolated
    def test_marked_isolated_with_its_own_cluster(own_cluster, tracedray_spans):
        assert tracedray.cluster_resources()["CPU"] == 1
        assert tracedray.get(one.remote()) == 1
        assert tracedray_spans.named("task.execute")


    def test_isolated_fixture(tracedray_isolated_spans):
        assert tracedray.get(one.remote()) == 1
        assert {{"driver", "raylet", "worker"}} <= {{
            s.resource.attributes["tracedray.component"]
            for s in tracedray_isolated_spans.get_finished_spans()}}


    def test_shared_again(tracedray_spans):
        assert tracedray.get(one.remote()) == 1
        assert tracedray_spans.named("task.execute")


    def test_conflict_explained(tracedray_spans, own_cluster):
        pass
''')


def _sessions(root: Path) -> list[Path]:
    return sorted(root.glob("session_2*"))


def _leftovers(root: Path) -> tuple[list[int], list[str]]:
    """Processes still running for sessions under ``root``, and their /dev/shm files."""
    alive = []
    for proc in psutil.process_iter():
        try:
            if proc.environ().get("TRACEDRAY_TEMP_DIR") == str(root):
                alive.append(proc)
        except psutil.Error:
            continue
    _, still = psutil.wait_procs(alive, timeout=10)
    for proc in still:
        proc.kill()
    fragments = {path.name[-_FRAGMENT:] for path in _sessions(root)}
    try:
        shm = [name for name in os.listdir("/dev/shm")
               if any(f"tracedray-{fragment}" in name for fragment in fragments)]
    except OSError:
        shm = []
    return [proc.pid for proc in still], shm


def _run(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, root: Path,
         *args: str) -> pytest.RunResult:
    root.mkdir()
    pytester.makeconftest(CONFTEST)
    monkeypatch.delenv("OTEL_SDK_DISABLED", raising=False)
    monkeypatch.setenv("TRACEDRAY_TEMP_DIR", str(root))
    return pytester.runpytest_subprocess("-q", "-p", "no:cacheprovider", *args, timeout=240)


def test_a_suite_shares_one_cluster_and_each_test_sees_its_own_spans(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    root = pytester.path / "root"
    pytester.makepyfile(test_suite=SUITE.format(flag=str(pytester.path / "flag")))
    result = _run(pytester, monkeypatch, root)
    result.assert_outcomes(passed=21)
    result.stdout.fnmatch_lines(["tracedray: 1 shared cluster start(s) for 21 test(s)*"])
    assert len(_sessions(root)) == 1, _sessions(root)
    assert _leftovers(root) == ([], [])


def test_tests_that_start_their_own_cluster_keep_working(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    root = pytester.path / "root"
    pytester.makepyfile(test_compat=COMPAT.format())
    result = _run(pytester, monkeypatch, root)
    result.assert_outcomes(passed=5, errors=1)
    # the last test asks for the shared cluster and starts its own: told what to do
    result.stdout.fnmatch_lines(["*called twice*", "*- tracedray -*",
                                 "*shared cluster*mark it @pytest.mark.tracedray_isolated*"])
    result.stdout.fnmatch_lines(["tracedray: 2 shared cluster start(s) for 3 test(s)*"])
    # shared, its own, the marked test's own, the isolated fixture's, shared again
    assert len(_sessions(root)) == 5, _sessions(root)
    assert _leftovers(root) == ([], [])
