"""A remote exception's traceback names the user's file, line and source (issue 21, point 6).

Functions pickled by value (this module is registered as such, a closure, a ``__main__``
script) used to read ``File "<dynamic-code>", line 40`` with no source line.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import cloudpickle
import pytest
from multinode_support import log_events
from typer.testing import CliRunner

import tracedray
from tracedray import exceptions
from tracedray.cli.app import app

cloudpickle.register_pickle_by_value(sys.modules[__name__])

pytestmark = pytest.mark.integration
THIS_FILE = str(Path(__file__).resolve())


def _line(marker: str, text: str | None = None) -> tuple[int, str]:
    """(number, stripped source) of the line holding ``marker``, in this file or ``text``."""
    lines = (Path(THIS_FILE).read_text() if text is None else text).splitlines()
    number = next(i for i, line in enumerate(lines, start=1)
                  if marker in line and "_line(" not in line)
    return number, lines[number - 1].strip()


def _frame(path: str, marker: str, function: str, text: str | None = None) -> str:
    number, source = _line(marker, text)
    return f'File "{path}", line {number}, in {function}\n    {source}'


def _parse_ratio(text: str) -> float:
    numerator, denominator = text.split("/")
    return int(numerator) / int(denominator)  # RAISES_HERE


@tracedray.remote(max_retries=0)
def parse_ratio(text: str) -> float:
    return _parse_ratio(text)  # CALLS_PARSE


def test_get_trace_logs_and_span_name_the_module_function(shared_ray: Any) -> None:
    ray = shared_ray
    ref = parse_ratio.remote("1/0")
    with pytest.raises(exceptions.RayTaskError) as info:
        ray.get(ref, timeout=60)
    wanted = [_frame(THIS_FILE, "# CALLS_PARSE", "parse_ratio"),
              _frame(THIS_FILE, "# RAISES_HERE", "_parse_ratio")]
    text = str(info.value)
    assert "<dynamic-code>" not in text
    for frame in wanted:
        assert frame in text, text

    worker = tracedray.api.calls.global_worker()
    worker.flush_background_work()
    address = tracedray.api.calls._require_cluster().gcs_address
    shown = CliRunner().invoke(app, ["trace", ref.task_id().hex(), "--address", address,
                                     "--format", "json"])
    assert shown.exit_code == 0, shown.output
    story = json.loads(shown.output)
    # `trace` reads the span's exception event.
    tracebacks = [e["traceback"] for e in story["events"] if e["traceback"]]
    assert tracebacks and all(frame in tracebacks[-1] for frame in wanted), story["events"]

    session = Path(worker.session_dir)
    failed = [r for r in log_events(session, "task.failed")
              if r.get("task_id") == ref.task_id().hex()]
    assert failed and all(frame in failed[0]["traceback"] for frame in wanted), failed


def test_a_closure_names_its_file_and_line(shared_ray: Any) -> None:
    ray = shared_ray
    offset = 3

    @ray.remote(max_retries=0)
    def pick(items: list[int]) -> int:
        return items[offset]  # CLOSURE_LINE

    with pytest.raises(IndexError) as info:
        ray.get(pick.remote([1, 2]), timeout=60)
    assert _frame(THIS_FILE, "# CLOSURE_LINE", "pick") in str(info.value), str(info.value)


def test_an_actor_method_names_its_file_and_line(shared_ray: Any) -> None:
    ray = shared_ray

    @ray.remote
    class Account:
        def withdraw(self, amount: int) -> int:
            raise ValueError(f"cannot withdraw {amount}")  # METHOD_LINE

    account = Account.remote()  # type: ignore[attr-defined]
    with pytest.raises(ValueError) as info:
        ray.get(account.withdraw.remote(5), timeout=60)
    assert _frame(THIS_FILE, "# METHOD_LINE", "withdraw") in str(info.value), str(info.value)


SCRIPT = textwrap.dedent('''
    import linecache, os, sys
    import tracedray as ray

    def mean(values):
        return sum(values) / len(values)  # MEAN_LINE

    @ray.remote(max_retries=0)
    def summarise(values):
        return {"mean": mean(values)}  # SUMMARISE_LINE

    if __name__ == "__main__":
        linecache.getlines(__file__)  # what the driver knows of its source...
        os.remove(__file__)  # ...and what no worker can read
        ray.init(num_cpus=1)
        try:
            ray.get(summarise.remote([]))
        except ZeroDivisionError as exc:
            print(str(exc))
        finally:
            ray.shutdown()
''')


def test_a_main_script_the_worker_cannot_read_is_shown(tmp_path: Path) -> None:
    script = tmp_path / "analysis.py"
    script.write_text(SCRIPT)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=120, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert not script.exists()
    for marker, function in (("# SUMMARISE_LINE", "summarise"), ("# MEAN_LINE", "mean")):
        frame = _frame(str(script), marker, function, SCRIPT)
        assert frame in done.stdout, done.stdout
