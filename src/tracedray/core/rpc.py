"""gRPC at the edge: channel and server construction, and error translation.

Everything that crosses a process boundary goes through here, so that grpc's
exceptions become tracedray's (``RaySystemError`` / ``ClusterConnectionError``)
with a message naming the component and the address.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from concurrent import futures
from contextlib import contextmanager
from typing import TypeVar

import grpc

from tracedray.exceptions import ClusterConnectionError, RaySystemError

T = TypeVar("T")

# Large objects travel in 4 MiB chunks; inline values are far below this.
MAX_MESSAGE_BYTES = 512 * 1024 * 1024
_CHANNEL_OPTIONS = [
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    # Loopback and LAN: fail fast on a dead peer instead of backing off for minutes.
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1000),
    ("grpc.enable_http_proxy", 0),
]

_channels: dict[str, grpc.Channel] = {}
_channels_lock = threading.Lock()


def channel(address: str) -> grpc.Channel:
    """A shared insecure channel to ``host:port`` (one per address per process)."""
    with _channels_lock:
        ch = _channels.get(address)
        if ch is None:
            ch = grpc.insecure_channel(address, options=_CHANNEL_OPTIONS)
            _channels[address] = ch
        return ch


def drop_channel(address: str) -> None:
    with _channels_lock:
        ch = _channels.pop(address, None)
    if ch is not None:
        ch.close()


def close_all_channels() -> None:
    with _channels_lock:
        chans = list(_channels.values())
        _channels.clear()
    for ch in chans:
        ch.close()


def wait_ready(address: str, timeout_s: float, what: str) -> None:
    """Block until a server answers at ``address`` or raise ClusterConnectionError."""
    try:
        grpc.channel_ready_future(channel(address)).result(timeout=timeout_s)
    except grpc.FutureTimeoutError as exc:
        raise ClusterConnectionError(
            f"could not reach the {what} at {address} within {timeout_s:.0f}s: "
            "is the cluster running there? (`tracedray status`, or `tracedray start --head`)"
        ) from exc


def make_server(max_workers: int = 64) -> grpc.Server:
    return grpc.server(
        futures.ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="tracedray-rpc"),
        options=_CHANNEL_OPTIONS,
    )


def bind(server: grpc.Server, host: str = "127.0.0.1", port: int = 0) -> int:
    bound = server.add_insecure_port(f"{host}:{port}")
    if bound == 0:
        raise RaySystemError(f"could not listen on {host}:{port} (port in use?)")
    return bound


def is_unavailable(exc: BaseException) -> bool:
    return isinstance(exc, grpc.RpcError) and exc.code() in (  # type: ignore[attr-defined]
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.CANCELLED,
    )


@contextmanager
def translate(what: str, address: str) -> Iterator[None]:
    """Translate grpc errors raised inside the block into tracedray's tree."""
    try:
        yield
    except grpc.RpcError as exc:
        code = exc.code() if hasattr(exc, "code") else None
        details = exc.details() if hasattr(exc, "details") else str(exc)
        if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
            raise ClusterConnectionError(
                f"the {what} at {address} is unreachable ({code.name if code else '?'}: {details})"
            ) from exc
        raise RaySystemError(f"the {what} at {address} failed: {code}: {details}") from exc


def call(what: str, address: str, fn: Callable[..., T], *args: object, **kwargs: object) -> T:
    with translate(what, address):
        return fn(*args, **kwargs)
