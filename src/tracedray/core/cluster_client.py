"""The one way into a live cluster from outside it (the CLI, the state API): find its
GCS, then ask every alive raylet.

``connect_cluster(address)`` resolves the address (``--address``, then
``TRACEDRAY_ADDRESS``, then the newest session's ``address`` file) and fails fast
with a ClusterConnectionError that says where it looked. ``node_views()`` asks
every alive raylet for its stats in parallel; a raylet that does not answer is
reported on its row, never dropped.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tracedray import config
from tracedray.core.session import SessionPaths, latest_session, session_for_address
from tracedray.exceptions import ClusterConnectionError, ConfigError, RayError

if TYPE_CHECKING:
    from tracedray._proto.v1 import gcs_pb2, raylet_pb2
    from tracedray.core.gcs.client import GcsClient

CONNECT_TIMEOUT_S = 3.0
# How long a raylet may take to give its stats (with every object and reference: longer).
STATS_TIMEOUT_S = 5.0
LISTING_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class ResolvedAddress:
    gcs_address: str
    session: SessionPaths | None  # the local session folder, when there is one
    source: str  # where the address came from, for error messages


@dataclass(frozen=True)
class NodeView:
    """One node as the GCS knows it, plus its raylet's own stats when it answered."""

    node: gcs_pb2.NodeWithLoad
    stats: raylet_pb2.NodeStats | None
    error: str = ""  # why ``stats`` is missing (dead node, raylet unreachable)

    @property
    def node_id(self) -> str:
        return self.node.info.node_id

    @property
    def alive(self) -> bool:
        return self.node.info.state == "ALIVE"


@dataclass(frozen=True)
class ClusterClientStatistics:
    gcs_address: str
    raylet_calls: int
    raylet_failures: int


def normalize_address(address: str) -> str:
    from tracedray.core.address import parse_host_port

    text = address.strip().removeprefix("tracedray://").removeprefix("ray://")
    try:
        host, port = parse_host_port(text)
    except ValueError as exc:
        raise ConfigError(f"--address {address!r}: {exc}") from exc
    return f"{host}:{port}"


def resolve_address(address: str | None) -> ResolvedAddress:
    """Which GCS to talk to, without talking to it yet."""
    given = (address or "").strip()
    if given and given != "auto":
        gcs = normalize_address(given)
        return ResolvedAddress(gcs, session_for_address(gcs), f"--address {given}")
    from_env = config.ADDRESS.get().strip()
    if from_env and from_env != "auto":
        gcs = normalize_address(from_env)
        return ResolvedAddress(gcs, session_for_address(gcs), f"{config.ADDRESS.name}={from_env}")
    session = latest_session()
    return ResolvedAddress(session.read_address(), session, str(session.address_file))


class ClusterClient:
    """GCS tables and raylet stats of one running cluster."""

    def __init__(self, resolved: ResolvedAddress, gcs: GcsClient) -> None:
        self.resolved = resolved
        self.gcs = gcs
        self._raylet_calls = 0
        self._raylet_failures = 0

    @property
    def gcs_address(self) -> str:
        return self.resolved.gcs_address

    def nodes(self) -> list[gcs_pb2.NodeWithLoad]:
        return self.gcs.get_nodes()

    def node_views(self, *, include_objects: bool = False,
                   include_references: bool = False) -> list[NodeView]:
        """Every node the GCS knows, alive ones with their raylet's stats (asked in parallel)."""
        nodes = sorted(self.nodes(), key=lambda n: (not n.info.is_head, n.info.start_time))
        alive = [n for n in nodes if n.info.state == "ALIVE"]

        def ask(node: gcs_pb2.NodeWithLoad) -> NodeView:
            from tracedray.core import auth
            from tracedray.core.protocol.raylet_client import RayletClient

            target = f"{node.info.raylet.ip}:{node.info.raylet.port}"
            auth.remember(target, auth.client_token(self.gcs_address))
            # A stalled or cut-off node must not hold the command up: its row says so.
            timeout = LISTING_TIMEOUT_S if include_objects or include_references \
                else STATS_TIMEOUT_S
            try:
                stats = RayletClient(target).node_stats(include_objects=include_objects,
                                                        include_references=include_references,
                                                        timeout=timeout)
            except RayError as exc:
                return NodeView(node, None, f"raylet at {target} did not answer: {exc}")
            return NodeView(node, stats)

        answered: dict[str, NodeView] = {}
        if alive:
            with ThreadPoolExecutor(max_workers=min(16, len(alive))) as pool:
                for view in pool.map(ask, alive):
                    answered[view.node_id] = view
        self._raylet_calls += len(alive)
        self._raylet_failures += sum(1 for v in answered.values() if v.stats is None)
        return [answered.get(n.info.node_id)
                or NodeView(n, None, f"node is {n.info.state}: {n.info.death_reason or '?'}")
                for n in nodes]

    def statistics(self) -> ClusterClientStatistics:
        return ClusterClientStatistics(self.gcs_address, self._raylet_calls,
                                       self._raylet_failures)

    def __repr__(self) -> str:
        return f"<ClusterClient gcs={self.gcs_address} raylet_calls={self._raylet_calls}>"


def connect_cluster(address: str | None = None,
                    timeout_s: float = CONNECT_TIMEOUT_S) -> ClusterClient:
    """A client for a cluster that answers now; the error says where the address came from."""
    resolved = resolve_address(address)
    from tracedray.core import auth
    from tracedray.core.gcs.client import GcsClient, connect

    auth.adopt(resolved.gcs_address)

    try:
        connect(resolved.gcs_address, timeout_s=timeout_s)
    except ClusterConnectionError as exc:
        raise ClusterConnectionError(
            f"the cluster is not running: no GCS answers at {resolved.gcs_address} "
            f"(address from {resolved.source}); start one with `tracedray start --head`") from exc
    # Short reconnect window: a CLI should report a dying cluster, not wait 30s for it.
    return ClusterClient(resolved, GcsClient(resolved.gcs_address, reconnect_s=2.0))
