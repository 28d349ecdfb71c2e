"""Placement decisions (``scheduler.decide``): grant here, spill back, queue, infeasible."""

from __future__ import annotations

from tracedray.core.raylet.scheduler import NodeView, Placement, decide


def node(node_id: str, cpus: float = 2.0, free: float | None = None, *, queue: int = 0,
         input_bytes: int = 0, alive: bool = True) -> NodeView:
    return NodeView(node_id, alive, {"CPU": cpus}, {"CPU": cpus if free is None else free},
                    queue, input_bytes)


CPU = {"CPU": 1.0}


def test_a_request_that_fits_here_is_granted_here() -> None:
    decision = decide(node("local"), [node("peer")], CPU, may_spill=True)
    assert (decision.action, decision.node_id) == (Placement.GRANT_HERE, "local")
    assert decision.candidates == ("local", "peer")


def test_a_busy_node_without_the_inputs_spills_to_a_free_peer() -> None:
    decision = decide(node("local", free=0.0), [node("busy", free=0.0), node("free")], CPU,
                      may_spill=True)
    assert (decision.action, decision.node_id) == (Placement.SPILLBACK, "free")


def test_the_peer_holding_most_input_bytes_wins_among_free_ones() -> None:
    decision = decide(node("local", free=0.0), [node("a"), node("b", input_bytes=10)], CPU,
                      may_spill=True)
    assert decision.node_id == "b"


def test_a_busy_node_holding_the_inputs_keeps_a_short_queue() -> None:
    local = node("local", free=0.0, input_bytes=1 << 20, queue=1)
    assert decide(local, [node("free")], CPU, may_spill=True).action is Placement.QUEUE_HERE
    long_queue = node("local", free=0.0, input_bytes=1 << 20, queue=3)
    assert decide(long_queue, [node("free")], CPU, may_spill=True).action is Placement.SPILLBACK


def test_without_spilling_a_busy_node_queues() -> None:
    decision = decide(node("local", free=0.0), [node("free")], CPU, may_spill=False)
    assert decision.action is Placement.QUEUE_HERE


def test_a_node_that_can_never_fit_it_sends_it_to_the_least_queued_that_can() -> None:
    decision = decide(node("local", cpus=1.0), [node("a", 8.0, 0.0, queue=3),
                                                node("b", 8.0, 0.0, queue=1)],
                      {"CPU": 4.0}, may_spill=False)
    assert (decision.action, decision.node_id) == (Placement.SPILLBACK, "b")


def test_nothing_fits_anywhere_dead_nodes_included() -> None:
    decision = decide(node("local"), [node("dead", 64.0, alive=False)], {"CPU": 8.0},
                      may_spill=True)
    assert (decision.action, decision.node_id) == (Placement.INFEASIBLE, "")
    assert "no node has" in decision.reason and decision.candidates == ()
