"""The pure admission policy and the full-store message."""

from __future__ import annotations

import pytest

from tracedray.core.object_store.policy import (
    Admit,
    Full,
    MakeRoom,
    StoredObject,
    StoreState,
    describe_full,
    plan_admission,
    usage_by_call_site,
)

MiB = 1 << 20


def obj(object_id: str, size: int, *, last_access: float, primary: bool = True,
        pinned: bool = False, spilled: bool = False, call_site: str = "app.py:1") -> StoredObject:
    return StoredObject(object_id=object_id, size=size, primary=primary, pinned=pinned,
                        last_access=last_access, owner="driver", call_site=call_site,
                        spilled=spilled)


def state(capacity: int, *objects: StoredObject) -> StoreState:
    used = sum(o.size for o in objects if not o.spilled)
    return StoreState(capacity=capacity, used=used, objects={o.object_id: o for o in objects})


def test_admit_when_it_fits_exactly() -> None:
    s = state(10, obj("a", 4, last_access=1))
    assert plan_admission(s, 6, spilling_enabled=False) == Admit()


def test_spills_least_recently_used_primaries_only_as_many_as_needed() -> None:
    s = state(10, obj("old", 3, last_access=1), obj("mid", 3, last_access=2),
              obj("new", 3, last_access=3))
    # 1 free, need 5 -> 4 more -> old (3) + mid (3)
    assert plan_admission(s, 5, spilling_enabled=True) == MakeRoom(evict=(), spill=("old", "mid"))
    assert plan_admission(s, 3, spilling_enabled=True) == MakeRoom(evict=(), spill=("old",))


def test_secondary_copies_are_evicted_before_anything_is_spilled() -> None:
    s = state(10, obj("primary-old", 4, last_access=0),
              obj("copy", 4, last_access=5, primary=False))
    assert plan_admission(s, 5, spilling_enabled=True) == MakeRoom(evict=("copy",), spill=())
    # copies alone are not enough: evict them and spill the rest
    assert plan_admission(s, 9, spilling_enabled=True) == \
        MakeRoom(evict=("copy",), spill=("primary-old",))


def test_spilling_disabled_still_evicts_copies_but_never_spills() -> None:
    s = state(10, obj("p", 4, last_access=0), obj("copy", 4, last_access=5, primary=False))
    assert plan_admission(s, 6, spilling_enabled=False) == MakeRoom(evict=("copy",), spill=())
    plan = plan_admission(s, 9, spilling_enabled=False)
    assert isinstance(plan, Full)
    assert "spilling is disabled" in plan.reason


def test_pinned_and_already_spilled_objects_never_move() -> None:
    s = state(10, obj("pinned", 6, last_access=0, pinned=True), obj("free", 3, last_access=9),
              obj("gone", 50, last_access=0, spilled=True))
    assert s.used == 9
    assert plan_admission(s, 4, spilling_enabled=True) == MakeRoom(evict=(), spill=("free",))
    plan = plan_admission(s, 5, spilling_enabled=True)
    assert isinstance(plan, Full)
    assert "not pinned" in plan.reason


def test_an_object_larger_than_the_store_is_full_even_when_empty() -> None:
    plan = plan_admission(state(10), 11, spilling_enabled=True)
    assert isinstance(plan, Full)
    assert "larger than the whole store" in plan.reason


def test_lru_ties_are_broken_by_id_so_plans_are_deterministic() -> None:
    s = state(4, obj("b", 2, last_access=1), obj("a", 2, last_access=1))
    assert plan_admission(s, 2, spilling_enabled=True) == MakeRoom(evict=(), spill=("a",))


def test_negative_size_is_a_bug() -> None:
    with pytest.raises(ValueError):
        plan_admission(state(4), -1, spilling_enabled=True)


def test_usage_by_call_site_groups_resident_objects_largest_first() -> None:
    s = state(100 * MiB,
              obj("a", 10 * MiB, last_access=0, call_site="train.py:12 in main"),
              obj("b", 10 * MiB, last_access=0, call_site="train.py:12 in main"),
              obj("c", 30 * MiB, last_access=0, call_site="load.py:3 in load"),
              obj("d", 99 * MiB, last_access=0, call_site="spilled.py:1", spilled=True),
              obj("e", 1 * MiB, last_access=0, call_site=""))
    usages = usage_by_call_site(s)
    assert [(u.call_site, u.bytes, u.count) for u in usages] == [
        ("load.py:3 in load", 30 * MiB, 1),
        ("train.py:12 in main", 20 * MiB, 2),
        ("(unknown call site)", 1 * MiB, 1),
    ]


def test_describe_full_says_what_was_asked_what_holds_memory_and_what_to_do() -> None:
    s = state(100 * MiB,
              obj("a", 40 * MiB, last_access=0, call_site="train.py:12 in main"),
              obj("b", 40 * MiB, last_access=0, call_site="train.py:12 in main", pinned=True),
              obj("c", 15 * MiB, last_access=0, call_site="load.py:3 in load"))
    message = describe_full(s, 20 * MiB)
    assert "cannot store an object of 20.0 MiB" in message
    assert "95.0 MiB of 100.0 MiB used (3 objects, 1 pinned" in message
    assert "5.0 MiB free" in message
    assert "80.0 MiB in 2 objects created at train.py:12 in main" in message
    assert "15.0 MiB in 1 object created at load.py:3 in load" in message
    assert message.index("train.py") < message.index("load.py")
    assert "object_spilling=False" in message
    assert "object_store_memory" in message
    assert "Run `tracedray memory` to see every object and who holds it." in message


def test_describe_full_adapts_its_advice() -> None:
    s = state(10 * MiB, obj("a", 9 * MiB, last_access=0, pinned=True))
    assert "pinned by running tasks" in describe_full(s, 5 * MiB, spilling_enabled=True)
    assert "larger than the whole store" in describe_full(s, 11 * MiB, spilling_enabled=True)
    many = state(100, *(obj(str(i), 1, last_access=0, call_site=f"f.py:{i}") for i in range(8)))
    assert "and 3 more call sites" in describe_full(many, 200, top=5)
