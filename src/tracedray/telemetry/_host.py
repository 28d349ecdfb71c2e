"""Facts about this host shared by span resources and log lines (computed once per process)."""

from __future__ import annotations

import functools
import socket


@functools.lru_cache(maxsize=1)
def host_name() -> str:
    return socket.gethostname()


# Bind-all addresses say nothing about where a node is reached.
_UNSPECIFIED = frozenset({"", "0.0.0.0", "::", "[::]"})
_advertised = ""


def advertise_ip(ip: str) -> None:
    """This process speaks for a node that the cluster reaches at ``ip`` (a raylet's
    ``--node-ip-address``, its workers'): its log lines and span resources say so, rather
    than the address of the default route, which may be another interface or none.
    Call before telemetry and logs are configured."""
    global _advertised
    _advertised = "" if ip in _UNSPECIFIED else ip


def host_ip() -> str:
    """The node's advertised address if this process has one (``advertise_ip``), else
    the address other nodes would most likely use to reach this host."""
    return _advertised or _route_ip()


@functools.lru_cache(maxsize=1)
def _route_ip() -> str:
    """The address other nodes would use to reach this host.

    Connecting a UDP socket sends no packet; it only asks the kernel which source
    address the default route would use, which is the address a multi-node cluster
    sees. Hosts without a route (sandboxes, laptops offline) fall back to the
    resolver, then loopback.
    """
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect(("10.255.255.255", 1))
            address: str = probe.getsockname()[0]
            return address
    except OSError:
        pass
    try:
        return socket.gethostbyname(host_name())
    except OSError:
        return "127.0.0.1"
