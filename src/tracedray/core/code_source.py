"""The file, lines and source text of code pickled by value, for remote tracebacks.

cloudpickle pickles by value the functions a worker could not import: those of
``__main__``, closures, and modules registered with ``register_pickle_by_value``. Their
code objects travel in the pickle, and cloudpickle (3.0 on) writes ``<dynamic-code>``
as their file name, for payloads that do not depend on where a function was written.
A worker's traceback then reads ``File "<dynamic-code>", line 40`` with no source line,
and the worker may not have the file anyway (another node, a script in a temp folder).

``reduce_code`` is the pickler's reducer for code objects: cloudpickle's, plus the real
``co_filename`` and the source lines the code spans (``co_firstlineno`` to its last
line), read where it is pickled, through linecache as a local traceback would.
``rebuild_code``, on the unpickling side, puts the file name back and tells that
process's linecache the lines (unless the file there says the same), so tracebacks,
``inspect.getsource`` and ``logging.exception`` show the user's file, line and source.

The lines a process learns are kept here, file by file, on top of that file's lines on
its own disk if it has it (code of the same file imported by reference keeps its
source); ``ensure_known`` puts them back in linecache should user code clear it.
"""

from __future__ import annotations

import linecache
import threading
import types
from collections.abc import Sequence
from typing import Any

import cloudpickle

# cloudpickle's own reducer: the constructor arguments of an equal code object.
_CLOUDPICKLE_REDUCE = cloudpickle.Pickler.dispatch_table[types.CodeType]
# A code object spanning more lines than this ships none (generated code, not a person's).
MAX_SHIPPED_LINES = 20_000

_lock = threading.Lock()
# file name -> the lines this process knows for it (1-based line n at index n - 1); the
# same list object linecache holds, so a merge updates linecache too.
_known: dict[str, list[str]] = {}


def reduce_code(code: types.CodeType) -> tuple[Any, tuple[Any, ...]]:
    """Reducer for ``types.CodeType`` (a pickler's ``dispatch_table`` entry)."""
    _constructor, args = _CLOUDPICKLE_REDUCE(code)
    first, lines = source_lines(code)
    return rebuild_code, (args, code.co_filename, first, lines)


def rebuild_code(args: tuple[Any, ...], filename: str, first: int,
                 lines: Sequence[str]) -> types.CodeType:
    code = types.CodeType(*args)
    if code.co_filename != filename:
        code = code.replace(co_filename=filename)
    if lines:
        learn_lines(filename, first, lines)
    return code


def span(code: types.CodeType) -> tuple[int, int]:
    """The first and last line of ``code`` (decorators included, as in co_firstlineno);
    its nested code objects lie within."""
    last = code.co_firstlineno
    for _start, _end, line in code.co_lines():
        if line is not None and line > last:
            last = line
    positions = getattr(code, "co_positions", None)  # 3.11 on: an expression's last line
    if positions is not None:
        for _line, end_line, _col, _end_col in positions():
            if end_line is not None and end_line > last:
                last = end_line
    return code.co_firstlineno, last


def source_lines(code: types.CodeType) -> tuple[int, tuple[str, ...]]:
    """(first line number, the lines from there to the code's last line), as this
    process's linecache has them; no lines when it has none (``python -c``, ``exec``).

    The line strings are linecache's own objects: every code object of a file pickled
    in one payload refers to the same strings, which the pickle stores once."""
    first, last = span(code)
    if first < 1 or last - first >= MAX_SHIPPED_LINES:
        return first, ()
    try:
        every = linecache.getlines(code.co_filename)
    except Exception:  # noqa: BLE001 - a loader's get_source may raise anything
        return first, ()
    if len(every) < last:
        return first, ()  # not the file this code was compiled from
    return first, tuple(every[first - 1:last])


def learn_lines(filename: str, first: int, lines: Sequence[str]) -> None:
    """Make ``lines`` (``first`` is the first one's number) this process's source for
    ``filename``, unless the file here already says the same."""
    end = first - 1 + len(lines)
    with _lock:
        known = _known.get(filename)
        if known is None:
            linecache.checkcache(filename)
            local = linecache.getlines(filename)
            if local[first - 1:end] == list(lines):
                return  # this process reads the same file: linecache finds it
            known = _known[filename] = list(local)
        if len(known) < end:
            known.extend("\n" for _ in range(end - len(known)))
        known[first - 1:end] = lines
        _install(filename, known)


def ensure_known() -> None:
    """Put the learnt lines back into linecache where they are missing (a
    ``linecache.clearcache()`` drops them); call before formatting a traceback."""
    with _lock:
        for filename, known in _known.items():
            entry = linecache.cache.get(filename)
            if entry is None or len(entry) < 3 or entry[2] is not known:
                _install(filename, known)


def _install(filename: str, known: list[str]) -> None:
    # No modification time: linecache.checkcache leaves such an entry alone (as it
    # does for a module loader's source), instead of reading the file here again.
    linecache.cache[filename] = (sum(len(line) for line in known), None, known, filename)
