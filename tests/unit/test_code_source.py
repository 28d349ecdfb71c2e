"""Code pickled by value keeps its file name and carries its source lines (code_source.py).

The unpickling side is a fresh interpreter where the file is gone, as a worker on
another node (or one started after the driver's script moved) would be: its traceback
must still name the file, the line and the source text.
"""

from __future__ import annotations

import importlib.util
import linecache
import pickle
import subprocess
import sys
import textwrap
import types
from pathlib import Path
from typing import Any

import cloudpickle

from tracedray.core import code_source
from tracedray.core.serialization import serialize

MODULE = '''\
"""A module a worker cannot import."""


def fails(x):
    total = x + 1
    return helper(total)


def helper(total):
    values = [1 / (v - total)
              for v in range(total + 1)]
    return values


def make_closure(k):
    @decorated
    def inner(y):
        return y[k]  # inner's own line

    return inner


def decorated(f):
    return f
'''

RUN_PICKLED = textwrap.dedent('''
    import pickle, sys, traceback
    function, argument = pickle.loads(sys.stdin.buffer.read())
    try:
        function(argument)
    except Exception:
        sys.stdout.write(traceback.format_exc())
''')


def _load(path: Path, name: str) -> types.ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    cloudpickle.register_pickle_by_value(module)
    return module


def _written_module(tmp_path: Path, name: str, text: str = MODULE) -> tuple[Path, Any]:
    path = tmp_path / f"{name}.py"
    path.write_text(text)
    return path, _load(path, name)


def _traceback_elsewhere(payload: bytes) -> str:
    """Unpickle ``payload`` (function, argument) in a fresh interpreter, call it, and
    return the traceback it prints."""
    done = subprocess.run([sys.executable, "-c", RUN_PICKLED], input=payload,
                          capture_output=True, timeout=60, check=True)
    return done.stdout.decode()


def test_a_worker_without_the_file_shows_its_path_lines_and_source(tmp_path: Path) -> None:
    path, module = _written_module(tmp_path, "td_code_source_gone")
    payload = serialize((module.fails, 2), what="test").inband
    path.unlink()  # the unpickling process cannot read it
    linecache.checkcache(str(path))
    try:
        text = _traceback_elsewhere(payload)
    finally:
        sys.modules.pop(module.__name__, None)
    assert "<dynamic-code>" not in text
    assert f'File "{path}", line 6, in fails\n    return helper(total)' in text, text
    assert f'File "{path}", line 10, in helper\n    values = [1 / (v - total)' in text, text
    assert "ZeroDivisionError" in text


def test_a_closure_keeps_its_file_and_decorated_range(tmp_path: Path) -> None:
    path, module = _written_module(tmp_path, "td_code_source_closure")
    closure = module.make_closure(5)
    payload = serialize((closure, [1, 2]), what="test").inband
    # The range starts at the decorator, as co_firstlineno does: inspect.getsource works.
    first, lines = code_source.source_lines(closure.__code__)
    assert first == 16 and lines[0].strip() == "@decorated"
    assert lines[-1].strip() == "return y[k]  # inner's own line"
    path.unlink()
    linecache.checkcache(str(path))
    try:
        text = _traceback_elsewhere(payload)
    finally:
        sys.modules.pop(module.__name__, None)
    assert f'File "{path}", line 18, in inner\n    return y[k]  # inner\'s own line' in text, text
    assert "IndexError" in text


def test_the_lines_that_ran_win_over_a_changed_file(tmp_path: Path) -> None:
    path, module = _written_module(tmp_path, "td_code_source_changed")
    payload = serialize((module.fails, 2), what="test").inband
    path.write_text(MODULE.replace("return helper(total)", "return 'edited since'"))
    linecache.checkcache(str(path))
    try:
        text = _traceback_elsewhere(payload)
    finally:
        sys.modules.pop(module.__name__, None)
    assert "    return helper(total)" in text and "edited since" not in text, text


def test_a_process_with_the_same_file_keeps_reading_it(tmp_path: Path) -> None:
    path, module = _written_module(tmp_path, "td_code_source_same")
    try:
        payload = serialize(module.fails, what="test").inband
        linecache.checkcache(str(path))
        rebuilt = pickle.loads(payload)
        assert rebuilt.__code__.co_filename == str(path)
        entry = linecache.cache.get(str(path))
        # Nothing learnt: linecache holds the file as read from disk (with its mtime).
        assert str(path) not in code_source._known
        assert entry is None or len(entry) == 1 or entry[1] is not None
    finally:
        sys.modules.pop(module.__name__, None)


def test_learnt_lines_survive_a_cleared_linecache(tmp_path: Path) -> None:
    filename = str(tmp_path / "nowhere.py")
    code_source.learn_lines(filename, 3, ["def f():\n", "    boom()\n"])
    assert linecache.getline(filename, 4) == "    boom()\n"
    assert linecache.getline(filename, 1) == "\n"  # lines not shipped are blank
    linecache.checkcache()  # a missing file does not drop learnt lines
    assert linecache.getline(filename, 4) == "    boom()\n"
    linecache.clearcache()
    code_source.ensure_known()
    assert linecache.getline(filename, 3) == "def f():\n"
    code_source.learn_lines(filename, 6, ["def g():\n"])  # a second function, same file
    assert linecache.getlines(filename)[2:5] == ["def f():\n", "    boom()\n", "\n"]
    assert linecache.getline(filename, 6) == "def g():\n"


def test_code_without_source_keeps_its_name_and_ships_nothing() -> None:
    namespace: dict[str, Any] = {}
    exec(compile("def f():\n    return 1\n", "<generated>", "exec"), namespace)  # noqa: S102
    function = namespace["f"]
    assert code_source.source_lines(function.__code__) == (1, ())
    rebuilt = pickle.loads(serialize(function, what="test").inband)
    assert rebuilt.__code__.co_filename == "<generated>" and rebuilt() == 1
