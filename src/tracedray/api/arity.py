"""Arguments checked against the callee's signature when ``.remote()`` is called.

As in Ray, ``f.remote(...)``, ``Actor.remote(...)`` and ``actor.method.remote(...)``
bind their arguments to the function's, constructor's or method's signature in the
caller and raise ``TypeError`` there (too few or too many positionals, an unknown
keyword, a missing keyword-only argument), with the message ``inspect`` gives, as
Ray's does (``TypeError: missing a required argument: 'y'``).

An ``Arity`` keeps only each parameter's name, kind and whether it has a default:
it is small, picklable (actor handles carry their methods' arities to other
processes) and never holds a default value. A call that fits is accepted after a
few precomputed lookups (``fits``, ~0.2 µs without keywords, ~0.5 µs with); only a
call that does not is given to ``bind``, for its message.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

_P = inspect.Parameter
_HAS_DEFAULT = object()  # stands for any default: the value itself never matters here
_KINDS = {int(kind): kind for kind in (_P.POSITIONAL_ONLY, _P.POSITIONAL_OR_KEYWORD,
                                       _P.VAR_POSITIONAL, _P.KEYWORD_ONLY, _P.VAR_KEYWORD)}


@dataclass(frozen=True)
class Arity:
    # (name, inspect.Parameter kind as int, has a default)
    parameters: tuple[tuple[str, int, bool], ...]
    # Derived, for the check without bind: what a fitting call looks like.
    min_positional: int = field(init=False, compare=False)
    max_positional: int | None = field(init=False, compare=False)  # None: *args
    needs_keywords: bool = field(init=False, compare=False)  # a required keyword-only
    _by_keyword: dict[str, int] = field(init=False, compare=False, repr=False)
    _keyword_only: frozenset[str] = field(init=False, compare=False, repr=False)
    _var_keyword: bool = field(init=False, compare=False, repr=False)
    # required positionals (index, name; "" for a positional-only one, which no
    # keyword can give), and required keyword-only names
    _required: tuple[tuple[int, str], ...] = field(init=False, compare=False, repr=False)
    _required_keywords: tuple[str, ...] = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        positional = [p for p in self.parameters
                      if p[1] in (_P.POSITIONAL_ONLY, _P.POSITIONAL_OR_KEYWORD)]
        kinds = {p[1] for p in self.parameters}
        keyword_only = [p for p in self.parameters if p[1] == _P.KEYWORD_ONLY]
        derived = {
            "min_positional": sum(1 for p in positional if not p[2]),
            "max_positional": None if _P.VAR_POSITIONAL in kinds else len(positional),
            "needs_keywords": any(not p[2] for p in keyword_only),
            "_by_keyword": {p[0]: i for i, p in enumerate(positional)
                            if p[1] == _P.POSITIONAL_OR_KEYWORD},
            "_keyword_only": frozenset(p[0] for p in keyword_only),
            "_var_keyword": _P.VAR_KEYWORD in kinds,
            "_required": tuple((i, "" if p[1] == _P.POSITIONAL_ONLY else p[0])
                               for i, p in enumerate(positional) if not p[2]),
            "_required_keywords": tuple(p[0] for p in keyword_only if not p[2]),
        }
        for name, value in derived.items():
            object.__setattr__(self, name, value)

    def __reduce__(self) -> tuple[Any, ...]:
        return (Arity, (self.parameters,))

    def check(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> None:
        """Raise ``TypeError`` (Ray's message) if the call does not fit the signature."""
        if self.fits(args, kwargs):
            return
        try:
            _signature(self).bind(*args, **kwargs)
        except TypeError as exc:
            raise TypeError(str(exc)) from None

    def fits(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> bool:
        """True for a call ``bind`` accepts, without building one (a few dict lookups).
        False may also mean "ask bind": only bind's verdict raises."""
        count = len(args)
        if self.max_positional is not None and count > self.max_positional:
            return False
        if not kwargs:
            return count >= self.min_positional and not self.needs_keywords
        for index, name in self._required:
            if index >= count and name not in kwargs:
                return False
        for key in kwargs:
            position = self._by_keyword.get(key)
            if position is not None:
                if position < count:  # given twice
                    return False
            elif key not in self._keyword_only and not self._var_keyword:
                return False
        return all(name in kwargs for name in self._required_keywords)


_SIGNATURES: dict[tuple[tuple[str, int, bool], ...], inspect.Signature] = {}


def _signature(arity: Arity) -> inspect.Signature:
    found = _SIGNATURES.get(arity.parameters)
    if found is None:
        found = inspect.Signature([
            _P(name, _KINDS[kind], default=_HAS_DEFAULT if has_default else _P.empty)
            for name, kind, has_default in arity.parameters])
        _SIGNATURES[arity.parameters] = found
    return found


def _from_signature(signature: inspect.Signature, *, drop_first: bool) -> Arity | None:
    parameters = list(signature.parameters.values())
    if drop_first:
        if not parameters or parameters[0].kind not in (
                _P.POSITIONAL_ONLY, _P.POSITIONAL_OR_KEYWORD, _P.VAR_POSITIONAL):
            return None  # no 'self' to drop: leave the call to fail where it runs
        if parameters[0].kind != _P.VAR_POSITIONAL:  # (*args) keeps taking anything
            parameters = parameters[1:]
    return Arity(tuple((p.name, int(p.kind), p.default is not _P.empty) for p in parameters))


def of_function(function: Callable[..., Any]) -> Arity | None:
    """The arity of a remote function; None when Python cannot tell its signature
    (some builtins), and then nothing is checked."""
    try:
        return _from_signature(inspect.signature(function), drop_first=False)
    except (TypeError, ValueError):
        return None


def of_method(cls: type, name: str) -> Arity | None:
    """The arity of ``cls.name`` as called on an actor (without ``self``)."""
    try:
        raw = inspect.getattr_static(cls, name)
    except AttributeError:
        return None
    try:
        if isinstance(raw, staticmethod):
            return _from_signature(inspect.signature(raw.__func__), drop_first=False)
        if isinstance(raw, classmethod):  # bound to the class: cls is not passed
            return _from_signature(inspect.signature(getattr(cls, name)), drop_first=False)
        if inspect.isfunction(raw):
            return _from_signature(inspect.signature(raw), drop_first=True)
        if name == "__init__":  # a builtin's, e.g. object.__init__: as Ray, (*args, **kw)
            return _from_signature(inspect.signature(getattr(cls, name)), drop_first=True)
    except (TypeError, ValueError):
        return None
    return None


def of_methods(cls: type, names: Sequence[str]) -> dict[str, Arity]:
    """The arities of the methods that have a signature Python can tell."""
    found = {}
    for name in names:
        arity = of_method(cls, name)
        if arity is not None:
            found[name] = arity
    return found
