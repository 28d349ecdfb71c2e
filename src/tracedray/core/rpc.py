"""gRPC at the edge: channel and server construction, and error translation.

Everything that crosses a process boundary goes through here, so that grpc's
exceptions become tracedray's (``RaySystemError`` / ``ClusterConnectionError`` /
``AuthenticationError``) with a message naming the component and the address.
Every server checks the cluster's token and every channel presents it
(``rpc_auth``); both speak TLS when ``TRACEDRAY_TLS_*`` configure it (``tls``).
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from concurrent import futures
from contextlib import contextmanager

import grpc

from tracedray import config, logs
from tracedray.core import auth, rpc_auth, tls
from tracedray.exceptions import (
    AuthenticationError,
    ClusterConnectionError,
    ConfigError,
    RaySystemError,
)

# Large objects travel in 4 MiB chunks; inline values are far below this.
MAX_MESSAGE_BYTES = 512 * 1024 * 1024
RECONNECT_BACKOFF_MAX_MS = 250
_CHANNEL_OPTIONS = [
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    # A peer that went away (a GCS being restarted) is tried again every 0.1-0.25 s, not
    # with grpc's default backoff up to 120 s: a call resumes within a quarter second of the
    # peer coming back. The connect timeout (grpc.min_reconnect_backoff_ms, 20 s) stays:
    # lowering it would fail every connection whose handshake (TLS, a far network) is slower.
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", RECONNECT_BACKOFF_MAX_MS),
    ("grpc.enable_http_proxy", 0),
]

# How long a refused connection is retried before wait_ready gives up.
REFUSED_GRACE_S = 1.0

_channels: dict[str, grpc.Channel] = {}
_channels_lock = threading.Lock()


def channel(address: str) -> grpc.Channel:
    """A shared channel to ``host:port`` (one per address per process) that presents
    the cluster's token on every call, over TLS when configured."""
    with _channels_lock:
        ch = _channels.get(address)
        if ch is None:
            files = tls.from_config()
            raw = grpc.insecure_channel(address, options=_CHANNEL_OPTIONS) if files is None \
                else grpc.secure_channel(address, tls.channel_credentials(files),
                                         options=_CHANNEL_OPTIONS)
            ch = rpc_auth.AuthChannel(raw, address)
            _channels[address] = ch
        return ch


def drop_channel(address: str) -> None:
    with _channels_lock:
        ch = _channels.pop(address, None)
    if ch is not None:
        ch.close()


def close_all_channels() -> None:
    auth.forget()
    with _channels_lock:
        chans = list(_channels.values())
        _channels.clear()
    for ch in chans:
        ch.close()


def wait_ready(address: str, timeout_s: float, what: str) -> None:
    """Block until a server accepts connections at ``address`` or raise ClusterConnectionError.

    A plain TCP probe rather than ``grpc.channel_ready_future``: that one leaves a
    connectivity-polling thread on the shared channel, which raises once the channel
    is closed at shutdown. A refused connection fails within ``REFUSED_GRACE_S`` (a
    server binds its port first thing, so nothing is coming): a wrong address fails fast.
    """
    from tracedray.core.address import parse_host_port

    try:
        host, port = parse_host_port(address)
    except ValueError as exc:
        raise ConfigError(f"bad {what} address: {exc}") from exc
    started = time.monotonic()
    while True:
        elapsed = time.monotonic() - started
        try:
            with socket.create_connection((host, port), timeout=max(0.1, min(1.0, timeout_s))):
                return
        except OSError as exc:
            refused = isinstance(exc, ConnectionRefusedError)
            if elapsed >= (min(REFUSED_GRACE_S, timeout_s) if refused else timeout_s):
                reason = "connection refused" if refused else str(exc) or type(exc).__name__
                raise ClusterConnectionError(
                    f"could not reach the {what} at {address} ({reason}): is the cluster "
                    "running there? (`tracedray status`, or `tracedray start --head`)") from exc
        time.sleep(0.05)


# Interceptors every server made from now on gets (metrics/rpc_latency.py).
_server_interceptors: list[grpc.ServerInterceptor] = []


def add_server_interceptor(interceptor: grpc.ServerInterceptor) -> None:
    _server_interceptors.append(interceptor)


def make_server(max_workers: int = 64) -> grpc.Server:
    """A server that refuses every call without this process's token (``auth``)."""
    return grpc.server(
        futures.ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="tracedray-rpc"),
        options=_CHANNEL_OPTIONS,
        interceptors=[rpc_auth.AuthServerInterceptor(), *_server_interceptors],
    )


def bind(server: grpc.Server, host: str = "127.0.0.1", port: int = 0) -> int:
    files = tls.from_config()
    bound = server.add_insecure_port(f"{host}:{port}") if files is None else \
        server.add_secure_port(f"{host}:{port}", tls.server_credentials(files))
    if bound == 0:
        raise RaySystemError(f"could not listen on {host}:{port} (port in use?)")
    if not auth.current().enabled and not is_loopback(host):
        logs.get_logger(__name__).warning(
            "auth.disabled_on_network", address=f"{host}:{bound}",
            hint=f"{config.AUTH_MODE.name}=disabled: anyone who reaches this port can run "
                 "code as this user; unset it to require the cluster's token")
    return bound


def is_loopback(host: str) -> bool:
    import ipaddress

    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


@contextmanager
def translate(what: str, address: str) -> Iterator[None]:
    """Translate grpc errors raised inside the block into tracedray's tree."""
    try:
        yield
    except grpc.RpcError as exc:
        code = exc.code() if hasattr(exc, "code") else None
        details = exc.details() if hasattr(exc, "details") else str(exc)
        if code == grpc.StatusCode.UNAUTHENTICATED:
            source = auth.client_token(address).source
            auth.forget(address)  # a token file may have changed since: read it again
            raise AuthenticationError(auth.refusal_message(address, source)) from exc
        if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
            raise ClusterConnectionError(
                f"the {what} at {address} is unreachable ({code.name if code else '?'}: {details})"
            ) from exc
        raise RaySystemError(f"the {what} at {address} failed: {code}: {details}") from exc

