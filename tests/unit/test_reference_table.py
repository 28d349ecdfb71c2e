"""The reference table's decisions, without processes: counting, releasing, and a
release handled late after the same borrowed ref was made again."""

from __future__ import annotations

from tracedray.core.address import Address
from tracedray.core.worker.reference_table import ReferenceTable

OWNER = Address("node", "127.0.0.1", 5000, "owner-worker", 42)
OID = b"\x01" * 20


def test_a_borrowed_ref_is_released_when_its_last_local_ref_goes() -> None:
    table = ReferenceTable("me")
    table.add_local_ref(OID, OWNER, "site")
    table.add_local_ref(OID, OWNER, "site")
    assert table.take_borrow_events() == [(OID, OWNER, +1)]
    table.remove_local_ref(OID)
    assert table.drain() == [] and table.get(OID) is not None
    table.remove_local_ref(OID)
    [action] = table.drain()
    assert action.object_id == OID and not action.owned
    assert table.get(OID) is None
    assert table.take_borrow_events() == [(OID, OWNER, -1)]
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
    assert table.take_borrow_events() == [(OID, OWNER, +1), (OID, OWNER, -1),
                                          (OID, OWNER, +1)]
