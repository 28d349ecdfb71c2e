"""Queries over finished spans, so a test asserts in one line.

``Spans`` is a tuple of OTel ``ReadableSpan``s with filters that return ``Spans``
again (``named``, ``where``, ``in_trace``, ``children_of``, ``of_task``, ...) and
``one()``, which returns the single match or fails with a message listing what was
there. Pure: no I/O, and light at import (the pytest plugin imports it for every run).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Iterable, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import ReadableSpan

#: An attribute's wanted value: the value itself, or a predicate on it.
Wanted = Any

_COMPONENT = "tracedray.component"
_TASK_ID = "tracedray.task.id"
_ACTOR_ID = "tracedray.actor.id"
# Shown after a span's name in a listing: the keys that tell spans of one name apart.
_LISTED_KEYS = ("tracedray.task.function", _TASK_ID, _ACTOR_ID, "tracedray.object.id",
                "tracedray.worker.pid", "error.type")
_LISTING_LIMIT = 40


def span_id_of(span: ReadableSpan) -> int:
    context = span.context
    return context.span_id if context is not None else 0


def trace_id_of(span: ReadableSpan) -> int:
    context = span.context
    return context.trace_id if context is not None else 0


def parent_id_of(span: ReadableSpan) -> int | None:
    return span.parent.span_id if span.parent is not None else None


def _trace_key(trace: ReadableSpan | int | str) -> int:
    if isinstance(trace, int):
        return trace
    if isinstance(trace, str):
        try:
            return int(trace, 16)
        except ValueError:
            raise ValueError(f"in_trace({trace!r}): a trace id is 32 hex digits") from None
    return trace_id_of(trace)


def _id_hex(value: Any) -> str:
    """A task or actor id as the hex text spans carry: from a ref, a handle, bytes or hex."""
    if isinstance(value, str):
        return value.lower()
    if isinstance(value, bytes):
        return value.hex()
    for method in ("task_id", "_actor_id"):
        found = getattr(value, method, None)
        if found is not None:
            found = found() if callable(found) else found
            return found.hex() if isinstance(found, bytes) else _id_hex(found)
    binary = getattr(value, "binary", None)  # a TaskID / ActorID
    if callable(binary):
        return _id_hex(binary())
    raise TypeError(f"cannot tell the id of {value!r}: pass an ObjectRef, an actor handle, "
                    "bytes or hex text")


def _matches(span: ReadableSpan, wanted: Mapping[str, Wanted]) -> bool:
    attributes = span.attributes or {}
    resource = span.resource.attributes if span.resource is not None else {}
    for key, want in wanted.items():
        if key in attributes:
            value = attributes[key]
        elif key in resource:
            value = resource[key]
        else:
            return False
        if callable(want):
            if not want(value):
                return False
        elif value != want:
            return False
    return True


def _describe_wanted(name: str | None, wanted: Mapping[str, Wanted]) -> str:
    parts = [] if name is None else [f"name={name!r}"]
    for key, want in wanted.items():
        shown = getattr(want, "__name__", "predicate") if callable(want) else repr(want)
        parts.append(f"{key}={shown}")
    return ", ".join(parts) or "anything"


def describe(span: ReadableSpan) -> str:
    """One line: name, component, status and the attributes that tell spans apart."""
    resource = span.resource.attributes if span.resource is not None else {}
    attributes = span.attributes or {}
    parts = [span.name, f"[{resource.get(_COMPONENT, '?')}]"]
    if span.status is not None and span.status.status_code.name == "ERROR":
        parts.append("ERROR")
    parts.extend(f"{key}={attributes[key]!s}" for key in _LISTED_KEYS if key in attributes)
    return " ".join(parts)


def begun_before(spans: Iterable[ReadableSpan], earlier: Collection[int]) -> set[int]:
    """The span ids, among ``spans``, of work begun before: descendants of ``earlier``.

    ``earlier`` holds the ids of spans that ended before a window began (a test's
    start). A span whose parent, or its parent's parent and so on, is one of them
    belongs to that earlier work: a task a previous test submitted and did not wait
    for, and every task that task submitted. Spans whose ancestry leaves ``spans``
    without reaching ``earlier`` (a root, or a parent still running) are kept.
    """
    by_id = {span_id_of(span): span for span in spans}
    verdict: dict[int, bool] = {}
    for start in by_id:
        chain: list[int] = []
        current: int | None = start
        result = False
        while current is not None:
            if current in verdict:
                result = verdict[current]
                break
            span = by_id.get(current)
            if span is None:  # left the window: a root's absent parent, or still running
                break
            chain.append(current)
            parent = parent_id_of(span)
            if parent is not None and parent in earlier:
                result = True
                break
            if parent in chain:  # a cycle cannot come from OTel; end it rather than loop
                break
            current = parent
        for span_id in chain:
            verdict[span_id] = result
    return {span_id for span_id, stale in verdict.items() if stale}


class SpanQueries:
    """The query methods; subclasses say where the spans come from (``_all``)."""

    def _all(self) -> Spans:
        raise NotImplementedError

    def named(self, *names: str) -> Spans:
        """The spans with one of these names (``task.execute``, ``object.put``, ...)."""
        wanted = set(names)
        return Spans(span for span in self._all() if span.name in wanted)

    def where(self, attributes: Mapping[str, Wanted] | None = None, /,
              **more: Wanted) -> Spans:
        """The spans whose attributes (or, failing that, resource attributes) match.

        Each value is either the wanted value or a predicate on the value, e.g.
        ``where({"tracedray.task.function": lambda f: f.endswith(".square")})``.
        Keys with dots go in the mapping or as ``**{"key": value}``; a span without
        the key does not match.
        """
        wanted = {**(attributes or {}), **more}
        return Spans(span for span in self._all() if _matches(span, wanted))

    def component(self, *components: str) -> Spans:
        """The spans recorded by these process kinds (``driver``, ``worker``, ``raylet``,
        ``gcs``): the ``tracedray.component`` resource attribute."""
        wanted = set(components)
        return Spans(span for span in self._all()
                     if span.resource is not None
                     and span.resource.attributes.get(_COMPONENT) in wanted)

    def in_trace(self, trace: ReadableSpan | int | str) -> Spans:
        """The spans of one trace: given a span of it, its id, or its 32-digit hex."""
        key = _trace_key(trace)
        return Spans(span for span in self._all() if trace_id_of(span) == key)

    def of_task(self, task: Any) -> Spans:
        """The spans that name a task (``tracedray.task.id``): pass the ``ObjectRef`` its
        ``.remote()`` returned, its task id (bytes) or the hex text."""
        key = _id_hex(task)
        return Spans(span for span in self._all() if (span.attributes or {}).get(_TASK_ID) == key)

    def of_actor(self, actor: Any) -> Spans:
        """The spans that name an actor (``tracedray.actor.id``): a handle or its id."""
        key = _id_hex(actor)
        return Spans(span for span in self._all()
                     if (span.attributes or {}).get(_ACTOR_ID) == key)

    def children_of(self, span: ReadableSpan) -> Spans:
        """The spans whose parent is ``span`` (in any process: context crosses them)."""
        parent = span_id_of(span)
        return Spans(child for child in self._all() if parent_id_of(child) == parent)

    def descendants_of(self, span: ReadableSpan) -> Spans:
        """Children, their children and so on, in the order they ended."""
        everything = self._all()
        found: set[int] = {span_id_of(span)}
        grew = True
        while grew:
            grew = False
            for candidate in everything:
                if parent_id_of(candidate) in found and span_id_of(candidate) not in found:
                    found.add(span_id_of(candidate))
                    grew = True
        found.discard(span_id_of(span))
        return Spans(other for other in everything if span_id_of(other) in found)

    def parent_of(self, span: ReadableSpan) -> ReadableSpan | None:
        """The span's parent, if it is among these spans."""
        parent = parent_id_of(span)
        if parent is None:
            return None
        return next((other for other in self._all() if span_id_of(other) == parent), None)

    def one(self, name: str | None = None, attributes: Mapping[str, Wanted] | None = None, /,
            **more: Wanted) -> ReadableSpan:
        """The only span with this name and attributes; an ``AssertionError`` listing
        the spans that were there when there is none or more than one."""
        everything = self._all()
        wanted = {**(attributes or {}), **more}
        found = [span for span in everything
                 if (name is None or span.name == name) and _matches(span, wanted)]
        if len(found) == 1:
            return found[0]
        what = _describe_wanted(name, wanted)
        if found:
            raise AssertionError(f"expected one span matching {what}, found {len(found)}:\n"
                                 + Spans(found).listing())
        raise AssertionError(f"expected one span matching {what}, found none among "
                             f"{len(everything)} span(s):\n" + everything.listing())

    def names(self) -> Counter[str]:
        """How many spans of each name."""
        return Counter(span.name for span in self._all())

    def listing(self, limit: int = _LISTING_LIMIT) -> str:
        """One line per span (``describe``), in the order they ended, up to ``limit``."""
        everything = self._all()
        if not everything:
            return "  (no spans)"
        lines = [f"  {describe(span)}" for span in everything[:limit]]
        if len(everything) > limit:
            lines.append(f"  ... and {len(everything) - limit} more")
        return "\n".join(lines)

    def tree(self) -> str:
        """The spans as an indented tree (children under their parent), for messages."""
        everything = self._all()
        present = {span_id_of(span) for span in everything}
        children: dict[int | None, list[ReadableSpan]] = {}
        for span in everything:
            parent = parent_id_of(span)
            children.setdefault(parent if parent in present else None, []).append(span)
        lines: list[str] = []
        stack = [(span, 0) for span in reversed(children.get(None, []))]
        while stack:
            span, depth = stack.pop()
            lines.append("  " * (depth + 1) + describe(span))
            stack.extend((child, depth + 1)
                         for child in reversed(children.get(span_id_of(span), [])))
        return "\n".join(lines) if lines else "  (no spans)"


class Spans(tuple["ReadableSpan", ...], SpanQueries):
    """An immutable sequence of ``ReadableSpan`` with the query methods above.

    It is a tuple: indexing, ``len``, iteration and ``== ()`` work as on one.
    """

    def __new__(cls, spans: Iterable[ReadableSpan] = ()) -> Spans:
        return super().__new__(cls, spans)

    def _all(self) -> Spans:
        return self

    def __getitem__(self, index: Any) -> Any:
        got = super().__getitem__(index)
        return Spans(got) if isinstance(index, slice) else got

