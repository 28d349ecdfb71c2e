from __future__ import annotations

import io
import threading
from collections.abc import Callable

from tracedray.core.serializability import (
    FailureTuple,
    describe_unserializable,
    inspect_serializability,
)

GLOBAL_LOCK = threading.Lock()


def make_global_user() -> Callable[[], object]:
    # Nested, so cloudpickle pickles it by value, globals included (as for __main__ code).
    def uses_global() -> object:
        return GLOBAL_LOCK

    return uses_global


def make_closure_user() -> Callable[[], object]:
    lock = threading.Lock()
    count = 3

    def uses_closure() -> object:
        return lock, count

    return uses_closure


class Holder:
    def __init__(self) -> None:
        self.name = "fine"
        self.lock = threading.RLock()


def only(failures: set[FailureTuple]) -> FailureTuple:
    assert len(failures) == 1, failures
    return next(iter(failures))


def test_lock_in_a_global() -> None:
    out = io.StringIO()
    function = make_global_user()
    ok, failures = inspect_serializability(function, name="uses_global", print_file=out)
    assert not ok
    failure = only(failures)
    assert failure.name == "GLOBAL_LOCK" and failure.obj is GLOBAL_LOCK
    assert failure.parent is function and failure.path == (("global", "GLOBAL_LOCK"),)
    text = out.getvalue()
    assert "!!! FAIL serialization: cannot pickle '_thread.lock' object" in text
    assert "Detected 1 global variables. Checking serializability..." in text
    assert "    Serializing 'GLOBAL_LOCK' <unlocked _thread.lock object" in text
    assert "FailTuple(GLOBAL_LOCK [obj=" in text


def test_lock_in_a_closure() -> None:
    out = io.StringIO()
    ok, failures = inspect_serializability(make_closure_user(), print_file=out)
    assert not ok
    failure = only(failures)  # `count` pickles fine and is not blamed
    assert failure.name == "lock" and failure.path == (("closure", "lock"),)
    assert "Detected 2 closure variables" in out.getvalue()


def test_lock_in_an_attribute_two_levels_down() -> None:
    holder = Holder()

    def make() -> Callable[[], object]:
        def uses_holder() -> object:
            return holder

        return uses_holder

    ok, failures = inspect_serializability(make(), print_file=io.StringIO())
    assert not ok
    failure = only(failures)
    assert failure.obj is holder.lock and failure.parent is holder
    assert failure.path == (("closure", "holder"), ("attribute", "lock"))


def test_depth_limits_the_walk() -> None:
    ok, failures = inspect_serializability(Holder(), name="h", depth=0, print_file=io.StringIO())
    assert not ok and only(failures).name == "h"


def test_serializable_values_pass() -> None:
    out = io.StringIO()
    assert inspect_serializability({"a": [1, 2]}, name="d", print_file=out) == (True, set())
    assert "'d' is serializable" in out.getvalue()


def test_describe_names_the_culprit_and_why() -> None:
    text = describe_unserializable(make_global_user(), "uses_global")
    assert "'uses_global' captures the global variable 'GLOBAL_LOCK' (a _thread.lock)" in text
    assert "cannot pickle '_thread.lock' object" in text
    text = describe_unserializable(Holder(), "arg0")
    assert "arg0.lock (a _thread.RLock) cannot be pickled" in text
    text = describe_unserializable(threading.Lock(), "return value")
    assert text.startswith("'return value' (a _thread.lock) cannot be pickled")
    assert describe_unserializable([1], "ok").endswith("can be serialized.")


def test_a_cycle_does_not_recurse_forever() -> None:
    node: dict[str, object] = {"lock": threading.Lock()}
    node["self"] = node
    ok, failures = inspect_serializability(node, name="node", depth=10, print_file=io.StringIO())
    assert not ok and only(failures).name == "['lock']"
