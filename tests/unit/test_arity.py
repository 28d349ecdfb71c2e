"""Arguments checked against signatures at .remote() (api/arity.py), as Ray does."""

from __future__ import annotations

import functools
import inspect
import pickle
from typing import Any

import pytest

from tracedray.api import arity


def f(x: int, y: int, *, k: int, m: int = 1) -> None:
    pass


def variadic(a: int, /, *args: Any, **kwargs: Any) -> None:
    pass


CALLS = [
    ((1,), {"k": 1}),  # too few positionals
    ((1, 2, 3), {"k": 1}),  # too many
    ((1, 2), {}),  # a keyword-only argument missing
    ((1, 2), {"k": 1, "z": 2}),  # an unknown keyword
    ((1,), {"y": 2, "k": 1, "x": 3}),  # given twice
]


@pytest.mark.parametrize(("args", "kwargs"), CALLS)
def test_the_message_is_the_one_bind_gives_as_in_ray(args: tuple[Any, ...],
                                                    kwargs: dict[str, Any]) -> None:
    with pytest.raises(TypeError) as expected:
        inspect.signature(f).bind(*args, **kwargs)
    checked = arity.of_function(f)
    assert checked is not None
    with pytest.raises(TypeError) as raised:
        checked.check(args, kwargs)
    assert str(raised.value) == str(expected.value)
    assert raised.value.__cause__ is None and raised.value.__suppress_context__


def test_calls_that_fit_pass() -> None:
    checked = arity.of_function(f)
    assert checked is not None
    checked.check((1, 2), {"k": 3})
    checked.check((), {"x": 1, "y": 2, "k": 3, "m": 4})
    loose = arity.of_function(variadic)
    assert loose is not None
    loose.check((1, 2, 3, 4), {"anything": 5})
    with pytest.raises(TypeError, match="missing a required argument: 'a'"):
        loose.check((), {})
    with pytest.raises(TypeError, match="'a' parameter is positional only"):
        loose.check((), {"a": 1})


def test_fast_path_counts() -> None:
    checked = arity.of_function(f)
    assert checked is not None
    assert (checked.min_positional, checked.max_positional, checked.needs_keywords) == (
        2, 2, True)
    loose = arity.of_function(variadic)
    assert loose is not None
    assert (loose.min_positional, loose.max_positional, loose.needs_keywords) == (1, None, False)


def test_arity_pickles_without_defaults() -> None:
    unpicklable_default = object()

    def g(a: Any = unpicklable_default) -> None:
        pass

    checked = arity.of_function(g)
    assert checked is not None
    again = pickle.loads(pickle.dumps(checked))
    assert again == checked and again.max_positional == 1
    with pytest.raises(TypeError, match="too many positional arguments"):
        again.check((1, 2), {})


def test_wrapped_and_builtin_functions() -> None:
    @functools.wraps(f)
    def wrapper(*args: Any, **kwargs: Any) -> None:
        pass

    checked = arity.of_function(wrapper)  # the signature of what it wraps
    assert checked is not None and checked.max_positional == 2
    partial = arity.of_function(functools.partial(f, 1))
    assert partial is not None and partial.max_positional == 1
    # Python cannot tell some builtins' signatures: nothing is checked then
    assert arity.of_function(max) is None


class Base:
    def inherited(self, a: int) -> None:
        pass


class Actor(Base):
    def __init__(self, start: int, *, step: int = 1) -> None:
        pass

    def method(self, x: int, y: int = 0) -> None:
        pass

    @staticmethod
    def static(x: int, y: int) -> None:
        pass

    @classmethod
    def klass(cls, x: int) -> None:
        pass

    async def coroutine(self, x: int) -> None:
        pass

    def __call__(self, z: int) -> None:
        pass


class NoInit:
    pass


@pytest.mark.parametrize(("name", "fits", "does_not_fit"), [
    ("__init__", ((1,), {"step": 2}), ((), {})),
    ("method", ((1,), {}), ((1, 2, 3), {})),
    ("static", ((1, 2), {}), ((1,), {})),
    ("klass", ((1,), {}), ((1, 2), {})),
    ("coroutine", ((1,), {}), ((), {"y": 1})),
    ("inherited", ((1,), {}), ((), {})),
    ("__call__", ((1,), {}), ((1, 2), {})),
])
def test_methods_are_checked_without_self(name: str, fits: Any, does_not_fit: Any) -> None:
    checked = arity.of_method(Actor, name)
    assert checked is not None
    checked.check(*fits)
    with pytest.raises(TypeError):
        checked.check(*does_not_fit)


def test_of_methods_and_a_class_without_init() -> None:
    found = arity.of_methods(Actor, ["method", "static", "missing"])
    assert sorted(found) == ["method", "static"]
    # object.__init__, as Ray reads it: (*args, **kwargs) once self is dropped
    loose = arity.of_method(NoInit, "__init__")
    assert loose is not None
    loose.check((1, 2), {"a": 3})


def _every_call() -> list[tuple[tuple[Any, ...], dict[str, Any]]]:
    values: list[tuple[Any, ...]] = [(), (1,), (1, 2), (1, 2, 3), (1, 2, 3, 4)]
    keywords: list[dict[str, Any]] = [{}, {"a": 0}, {"x": 0}, {"y": 0}, {"k": 0}, {"m": 0},
                                      {"z": 0}, {"x": 0, "y": 0}, {"y": 0, "k": 0},
                                      {"x": 0, "y": 0, "k": 0}, {"k": 0, "m": 0, "z": 0}]
    return [(args, kwargs) for args in values for kwargs in keywords]


def _kinds(a: int, /, x: int, y: int = 0, *args: Any, k: int, m: int = 0,
           **kwargs: Any) -> None:
    pass


def _plain(a: int, /, x: int, y: int = 0, *, k: int = 0) -> None:
    pass


@pytest.mark.parametrize("function", [f, variadic, _kinds, _plain])
def test_fits_agrees_with_bind_on_every_call(function: Any) -> None:
    checked = arity.of_function(function)
    assert checked is not None
    signature = inspect.signature(function)
    for args, kwargs in _every_call():
        try:
            signature.bind(*args, **kwargs)
            binds = True
        except TypeError:
            binds = False
        # fits() may defer to bind (False) but never accepts what bind refuses
        assert not (checked.fits(args, kwargs) and not binds), (function, args, kwargs)
        if binds:
            checked.check(args, kwargs)
        else:
            with pytest.raises(TypeError):
                checked.check(args, kwargs)
