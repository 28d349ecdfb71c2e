"""The reference table's decisions, without processes: counting, releasing, and a
release handled late after the same borrowed ref was made again."""

from __future__ import annotations

from tracedray.core.address import Address
from tracedray.core.worker.reference_table import (
    ReferenceTable,
    ReferenceUpdate,
    captured_in,
    runs_by_owner,
)

OWNER = Address("node", "127.0.0.1", 5000, "owner-worker", 42)
OTHER = Address("node", "127.0.0.1", 5001, "other-worker", 43)
OID = b"\x01" * 20
OUTER = b"\x02" * 20


def test_a_borrowed_ref_is_released_when_its_last_local_ref_goes() -> None:
    table = ReferenceTable("me")
    table.add_local_ref(OID, OWNER, "site")
    table.add_local_ref(OID, OWNER, "site")
    assert table.take_updates() == [(OID, OWNER, "me", +1)]
    table.remove_local_ref(OID)
    assert table.drain() == [] and table.get(OID) is not None
    table.remove_local_ref(OID)
    [action] = table.drain()
    assert action.object_id == OID and not action.owned
    assert table.get(OID) is None
    assert table.take_updates() == [(OID, OWNER, "me", -1)]
    forgotten: list[bytes] = []
    assert table.forget_unreferenced([OID], forgotten.extend) == [OID] == forgotten


def test_a_late_release_keeps_the_value_of_a_ref_made_again() -> None:
    # One task's refs die (their release is queued); the next task on the same worker
    # deserializes the same ref before the flusher acts: the new entry's fetched value
    # must survive the old entry's release.
    table = ReferenceTable("me")
    table.add_local_ref(OID, OWNER, "site")
    table.remove_local_ref(OID)
    table.add_local_ref(OID, OWNER, "site")  # drains the old release, makes a new entry
    [action] = table.take_deferred_actions()
    assert action.object_id == OID
    assert table.get(OID) is not None and table.get(OID).local == 1  # type: ignore[union-attr]
    forgotten: list[bytes] = []
    assert table.forget_unreferenced([action.object_id], forgotten.extend) == []
    assert forgotten == []
    # The owner hears the old borrow end before the new one begins: net one borrow.
    assert table.take_updates() == [(OID, OWNER, "me", +1), (OID, OWNER, "me", -1),
                                    (OID, OWNER, "me", +1)]


def test_a_ref_found_inside_an_owned_object_is_borrowed_before_the_object_lets_it_go() -> None:
    # Issue 2: the driver owns OUTER (a task's result holding OID, owned by the worker);
    # get() deserializes OID (+1 from the driver), then OUTER is dropped (-1 for the
    # capture). The owner must hear them in that order, as one queue.
    table = ReferenceTable("me")
    table.add_local_ref(OUTER, None, "site", owned=True)
    table.set_object_info(OUTER, size=10, store_node_id="", store_raylet=None,
                          task_status="FINISHED", contained=[(OID, OWNER)])
    table.add_local_ref(OID, OWNER, "site")
    table.remove_local_ref(OUTER)
    [action] = table.drain()
    assert action.object_id == OUTER and action.owned
    assert action.contained == () and action.released_remote_captured
    assert table.take_updates() == [(OID, OWNER, "me", +1),
                                    (OID, OWNER, captured_in(OUTER), -1)]


def test_captured_refs_owned_here_are_released_by_the_caller_not_queued() -> None:
    table = ReferenceTable("me")
    table.add_local_ref(OID, None, "site", owned=True)
    table.add_local_ref(OUTER, None, "site", owned=True)
    table.add_captured(OID, None, OUTER)
    table.set_object_info(OUTER, size=10, store_node_id="", store_raylet=None,
                          task_status="FINISHED", contained=[(OID, None)])
    table.remove_local_ref(OID)
    assert table.drain() == []  # captured in OUTER
    table.remove_local_ref(OUTER)
    [action] = table.drain()
    assert action.contained == ((OID, None),) and not action.released_remote_captured
    assert table.take_updates() == []
    [inner] = table.update_borrower(OID, captured_in(OUTER), -1)
    assert inner.object_id == OID and table.get(OID) is None


def test_a_capture_of_a_ref_owned_elsewhere_is_queued_before_the_borrow_ends() -> None:
    table = ReferenceTable("me")
    table.add_local_ref(OID, OWNER, "site")
    table.add_captured(OID, OWNER, OUTER)
    table.remove_local_ref(OID)
    assert table.take_updates() == [(OID, OWNER, "me", +1), (OID, OWNER, captured_in(OUTER), +1),
                                    (OID, OWNER, "me", -1)]


def test_updates_are_batched_per_owner_only_while_consecutive() -> None:
    updates = [ReferenceUpdate(OID, OWNER, "me", +1), ReferenceUpdate(OUTER, OWNER, "me", +1),
               ReferenceUpdate(OUTER, OTHER, "me", -1), ReferenceUpdate(OID, OWNER, "x", -1)]
    assert runs_by_owner(updates) == [(OWNER, updates[:2]), (OTHER, updates[2:3]),
                                       (OWNER, updates[3:])]
    assert runs_by_owner([]) == []


def test_a_value_arriving_after_its_refs_are_gone_is_released_with_what_it_captured() -> None:
    # A task's result dropped before the task finished: the entry's own release knew
    # neither the stored copy nor the refs inside, so the value's arrival releases them.
    table = ReferenceTable("me")
    table.add_local_ref(OUTER, None, "site", owned=True)
    table.remove_local_ref(OUTER)
    [early] = table.drain()
    assert early.store_node_id == "" and early.contained == ()
    [late] = table.set_object_info(OUTER, size=10, store_node_id="n1", store_raylet=OTHER,
                                   task_status="FINISHED",
                                   contained=[(OID, OWNER), (b"\x03" * 20, None)])
    assert late.owned and late.store_node_id == "n1" and late.store_raylet == OTHER
    assert late.contained == ((b"\x03" * 20, None),) and late.released_remote_captured
    assert table.take_updates() == [(OID, OWNER, captured_in(OUTER), -1)]
    assert table.get(OUTER) is None


def test_borrowers_are_each_entry_s_own() -> None:
    # Entries share one empty borrower set until their first borrower: a borrower of
    # one object must never show on another, and the last one leaving releases it.
    table = ReferenceTable("me")
    mine = Address("node", "127.0.0.1", 5002, "me", 44)
    other_oid = b"\x03" * 20
    table.add_local_ref(OID, mine, "site", owned=True)
    table.add_local_ref(other_oid, mine, "site", owned=True)
    table.update_borrower(OID, "w1", +1)
    table.update_borrower(OID, "w2", +1)
    table.add_captured(OID, None, OUTER)
    first, second = table.get(OID), table.get(other_oid)
    assert first is not None and second is not None
    assert set(first.borrowers) == {"w1", "w2", captured_in(OUTER)}
    assert not second.borrowers
    assert table.update_borrower(other_oid, "w1", -1) == []  # none to lose: still held
    table.remove_local_ref(OID)
    for borrower in ("w1", "w2"):
        assert table.update_borrower(OID, borrower, -1) == []
    table.remove_local_ref(other_oid)
    assert [a.object_id for a in table.drain()] == [other_oid]
    [action] = table.update_borrower(OID, captured_in(OUTER), -1)
    assert action.object_id == OID and action.owned
