"""Which objects a raylet frees when their owner is gone (owner_death.py: pure)."""

from __future__ import annotations

from tracedray.core.address import Address
from tracedray.core.raylet import lease_reclaim as lr
from tracedray.core.raylet import owner_death as od

LOCAL = Address("node-a", "10.0.0.1", 4001, "w-local", 101)
DRIVER = Address("node-a", "10.0.0.1", 4002, "w-driver", 102)
REMOTE = Address("node-b", "10.0.0.2", 5001, "w-remote", 201)
UNKNOWN_HERE = Address("node-a", "10.0.0.1", 4003, "w-unknown", 103)


def test_known_deaths_free_now_known_alive_keep_the_rest_is_probed() -> None:
    dead = {"w-local": od.died(LOCAL, "its worker process exited: killed")}
    check = od.check_owners(
        {"w-local": LOCAL, "w-driver": DRIVER, "w-remote": REMOTE, "w-unknown": UNKNOWN_HERE},
        dead, local_alive={"w-driver"})
    assert check.gone == dead
    # Owners elsewhere, and those here the raylet knows nothing of, are probed.
    assert check.probe == [REMOTE, UNKNOWN_HERE]


def test_an_owner_without_an_address_is_never_probed() -> None:
    check = od.check_owners({"w-old": None}, {}, local_alive=())
    assert check == od.OwnerCheck({}, [])
    # ... but a death the raylet knows of still frees its objects.
    gone = od.exited(Address("n", "ip", 1, "w-old", 7), "it shut down")
    assert od.check_owners({"w-old": None}, {"w-old": gone}, local_alive=()).gone == {
        "w-old": gone}


def test_only_a_sure_death_frees() -> None:
    verdicts = {REMOTE: lr.Verdict(lr.DEAD, "10.0.0.2:5001 refuses connections"),
                UNKNOWN_HERE: lr.Verdict(lr.UNKNOWN, "did not answer"),
                DRIVER: lr.Verdict(lr.ALIVE, "process 102 runs")}
    assert od.deaths(verdicts) == {
        "w-remote": od.OwnerGone("w-remote", od.OWNER_DIED, "10.0.0.2:5001 refuses connections",
                                 201, "node-b")}


def test_objects_to_free_are_those_of_owners_gone() -> None:
    gone = {"w-remote": od.died(REMOTE, "its node node-b is DEAD"),
            "w-empty": od.died(DRIVER, "process 102 is gone")}
    owned = {"w-remote": {"0b", "0a"}, "w-driver": {"0c"}, "w-empty": set()}
    assert od.objects_to_free(owned, gone) == [(gone["w-remote"], ["0a", "0b"])]


def test_a_clean_worker_exit_is_the_owner_exiting_any_other_end_its_death() -> None:
    clean = od.after_worker_exit(LOCAL, 0, "exited normally")
    assert (clean.reason, clean.why) == (od.OWNER_EXITED,
                                         "its worker process exited: exited normally")
    assert (clean.worker_id, clean.pid, clean.node_id) == ("w-local", 101, "node-a")
    killed = od.after_worker_exit(LOCAL, 137, "killed by the OS")
    assert killed.reason == od.OWNER_DIED and "killed by the OS" in killed.why


def test_dead_owners_keep_the_first_account_and_forget_the_oldest() -> None:
    owners = od.DeadOwners(capacity=2)
    first = od.exited(DRIVER, "it shut down")
    assert owners.add(first) is first
    # The driver watch sees the process gone afterwards: it exited, it did not die.
    assert owners.add(od.died(DRIVER, "process 102 is gone")) is first
    owners.add(od.died(LOCAL, "x"))
    owners.add(od.died(REMOTE, "y"))
    assert len(owners) == 2 and "w-driver" not in owners
    assert owners.among(["w-local", "w-driver"]) == {"w-local": od.died(LOCAL, "x")}
