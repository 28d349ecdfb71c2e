"""Find out *what* makes a value unpicklable, the way Ray's ``inspect_serializability`` does.

cloudpickle's own error says what failed ("cannot pickle '_thread.lock' object")
but not where it hides.  This walks what pickling a value would walk (a
function's referenced globals, closure cells and defaults; an object's
attributes; container items), retries cloudpickle on each, and reports the
deepest values that still fail: the culprits.

::

    >>> ok, failures = inspect_serializability(f, name="f")
    ===========================================================
    Checking Serializability of <function f at 0x...>
    ===========================================================
    !!! FAIL serialization: cannot pickle '_thread.lock' object
    Detected 1 global variables. Checking serializability...
        Serializing 'lock' <unlocked _thread.lock object at 0x...>...
        !!! FAIL serialization: cannot pickle '_thread.lock' object
    ...
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import io
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO, Any

import cloudpickle

# How a child value is reached from its parent, as the report names it.
_KIND_LABELS = {
    "global": "global variable",
    "closure": "closure variable",
    "default": "default argument",
    "attribute": "attribute",
    "item": "item",
    "method": "method",
    "instance": "bound instance",
    "function": "function",
    "argument": "argument",
}
_MAX_CHILDREN = 100  # per value: a huge container is sampled, not walked entirely
_RULE = 60


@dataclass(frozen=True, eq=False)  # eq=False: hashed by identity, objs may be unhashable
class FailureTuple:
    """A value that cannot be serialized, found while inspecting ``parent`` (as in Ray).

    Besides Ray's ``obj``, ``name`` and ``parent``: ``error`` is cloudpickle's
    message and ``path`` the ``(kind, name)`` steps from the inspected value down to
    this one (empty when the inspected value itself is the culprit).
    """

    obj: Any
    name: str
    parent: Any
    error: str = ""
    path: tuple[tuple[str, str], ...] = ()

    def __repr__(self) -> str:
        return f"FailTuple({self.name} [obj={_short(self.obj)}, parent={_short(self.parent)}])"


def _short(value: Any, limit: int = 120) -> str:
    try:
        text = repr(value)
    except Exception:  # noqa: BLE001 -- a broken __repr__ must not break the report
        text = f"<{type(value).__qualname__} object>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _type_name(value: Any) -> str:
    cls = type(value)
    return (
        cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"
    )


def _pickle_error(value: Any) -> str | None:
    try:
        cloudpickle.dumps(value)
    except Exception as exc:  # noqa: BLE001 -- any failure is what we are looking for
        return str(exc) or type(exc).__name__
    return None


def _children(value: Any) -> Iterator[tuple[str, str, Any]]:
    """``(kind, name, child)`` for everything pickling ``value`` by value would include."""
    if inspect.isfunction(value):
        try:
            closure = inspect.getclosurevars(value)
        except (TypeError, ValueError):
            closure = None
        if closure is not None:
            for name, child in closure.globals.items():
                yield "global", name, child
            for name, child in closure.nonlocals.items():
                yield "closure", name, child
        for index, child in enumerate(value.__defaults__ or ()):
            yield "default", f"default[{index}]", child
        for name, child in (value.__kwdefaults__ or {}).items():
            yield "default", name, child
    elif inspect.ismethod(value):
        yield "instance", "__self__", value.__self__
        yield "function", value.__func__.__name__, value.__func__
    elif isinstance(value, functools.partial):
        yield "function", "func", value.func
        for index, child in enumerate(value.args):
            yield "argument", f"args[{index}]", child
        for name, child in value.keywords.items():
            yield "argument", name, child
    elif isinstance(value, dict):
        for key, child in value.items():
            yield "item", f"[{key!r}]", child
    elif isinstance(value, list | tuple | set | frozenset):
        for index, child in enumerate(value):
            yield "item", f"[{index}]", child
    elif isinstance(value, type):
        for name, child in vars(value).items():
            if name.startswith("__") and name.endswith("__"):
                continue
            kind = "method" if inspect.isfunction(child) else "attribute"
            yield kind, name, child
    else:
        yield from _attributes(value)


def _attributes(value: Any) -> Iterator[tuple[str, str, Any]]:
    # The instance's own state only: walking getmembers() would run properties.
    with contextlib.suppress(TypeError):
        for name, child in vars(value).items():
            yield "attribute", name, child
    for cls in type(value).__mro__:
        slots = cls.__dict__.get("__slots__", ())
        for name in (slots,) if isinstance(slots, str) else slots:
            if name in ("__dict__", "__weakref__"):
                continue
            with contextlib.suppress(AttributeError):
                yield "attribute", name, getattr(value, name)


class _Printer:
    def __init__(self, file: IO[str] | None) -> None:
        self._file = file
        self._level = 0

    def line(self, text: str) -> None:
        file = self._file if self._file is not None else sys.stdout
        file.write("    " * self._level + text + "\n")

    @contextlib.contextmanager
    def indent(self) -> Iterator[None]:
        self._level += 1
        try:
            yield
        finally:
            self._level -= 1


class _Inspector:
    def __init__(self, printer: _Printer) -> None:
        self.printer = printer
        self.failures: list[FailureTuple] = []
        self._seen: set[int] = set()

    def check(
        self, value: Any, name: str, depth: int, parent: Any, path: tuple[tuple[str, str], ...]
    ) -> bool:
        """True if ``value`` pickles; otherwise record its culprits and return False."""
        if path:
            self.printer.line(f"Serializing {name!r} {_short(value)}...")
        error = _pickle_error(value)
        if error is None:
            return True
        self.printer.line(f"!!! FAIL serialization: {error}")
        if id(value) in self._seen:  # a cycle: already being reported further up
            return False
        self._seen.add(id(value))
        found = had_children = False
        if depth > 0:
            found, had_children = self._check_children(value, depth, path)
            if not found and had_children:
                self.printer.line(
                    f"WARNING: Did not find non-serializable object in {_short(value)}. "
                    "This may be an oversight."
                )
        if not found:  # nothing inside fails on its own: this value is the culprit
            self.failures.append(FailureTuple(value, name, parent, error, path))
        return False

    def _check_children(
        self, value: Any, depth: int, path: tuple[tuple[str, str], ...]
    ) -> tuple[bool, bool]:
        """(a child fails on its own, there were children to check)."""
        groups: dict[str, list[tuple[str, Any]]] = {}
        for count, (kind, name, child) in enumerate(_children(value)):
            if count >= _MAX_CHILDREN:
                break
            groups.setdefault(kind, []).append((name, child))
        found = False
        for kind, members in groups.items():
            self.printer.line(
                f"Detected {len(members)} {_KIND_LABELS[kind]}s. Checking serializability..."
            )
            with self.printer.indent():
                for name, child in members:
                    if not self.check(child, name, depth - 1, value, (*path, (kind, name))):
                        found = True
        return found, bool(groups)


def _default_name(value: Any) -> str:
    return str(
        getattr(value, "__qualname__", None) or getattr(value, "__name__", None) or _short(value)
    )


def inspect_serializability(
    obj: Any,
    name: str | None = None,
    depth: int = 3,
    print_file: IO[str] | None = None,
) -> tuple[bool, set[FailureTuple]]:
    """Check that ``obj`` pickles; if not, print a tree of what fails and return the culprits.

    Returns ``(ok, failures)``: ``failures`` holds the deepest non-serializable values
    found within ``depth`` levels (globals, closure variables, attributes, items).
    Output goes to ``print_file`` (default: stdout).
    """
    printer = _Printer(print_file)
    label = name if name is not None else _default_name(obj)
    declaration = f"Checking Serializability of {_short(obj)}"
    printer.line("=" * _RULE)
    printer.line(declaration)
    printer.line("=" * _RULE)
    inspector = _Inspector(printer)
    ok = inspector.check(obj, label, depth, None, ())
    if ok:
        printer.line(f"{label!r} is serializable.")
        printer.line("=" * _RULE)
        return True, set()
    printer.line("=" * _RULE)
    listed = "\n".join(f"\t{failure!r}" for failure in inspector.failures)
    printer.line(
        f"Variable:\n\n{listed}\n\nwas found to be non-serializable. There may be "
        "multiple other undetected variables that were non-serializable."
    )
    printer.line(
        "Consider either removing the instantiation/imports of these variables or "
        "moving the instantiation into the scope of the function/class."
    )
    printer.line("=" * _RULE)
    return False, set(inspector.failures)


def _describe_culprit(top: str, failure: FailureTuple) -> str:
    """E.g. "'f' captures the closure variable 'h', and h.lock (a _thread.lock) cannot ..."."""
    expression = top
    captured = ""
    for kind, name in failure.path:
        if kind == "attribute":
            expression += f".{name}"
        elif kind == "item":
            expression += name
        else:  # a named variable: the expression restarts from it
            captured = f"the {_KIND_LABELS[kind]} {name!r}"
            expression = name
    kind_of = f"(a {_type_name(failure.obj)})"
    if captured and expression == failure.path[-1][1]:
        return f"{top!r} captures {captured} {kind_of}, which cannot be pickled: {failure.error}"
    fails = f"{expression} {kind_of} cannot be pickled: {failure.error}"
    return f"{top!r} captures {captured}, and {fails}" if captured else fails


def describe_unserializable(obj: Any, name: str) -> str:
    """One paragraph naming what in ``obj`` cannot be pickled and why (for error messages)."""
    sink = io.StringIO()
    ok, failures = inspect_serializability(obj, name=name, print_file=sink)
    if ok:
        return f"{name!r} ({_type_name(obj)}) can be serialized."
    ordered = sorted(failures, key=lambda f: f.path)
    if len(ordered) == 1 and not ordered[0].path:
        return (
            f"{name!r} (a {_type_name(obj)}) cannot be pickled: {ordered[0].error}. "
            "Pass a picklable value instead, or create it where it is used."
        )
    culprits = "; ".join(_describe_culprit(name, failure) for failure in ordered)
    return (
        f"{name!r} cannot be serialized: {culprits}. Create such values inside the function "
        "or actor instead of capturing them, or pass picklable ones."
    )


__all__ = ["FailureTuple", "describe_unserializable", "inspect_serializability"]
