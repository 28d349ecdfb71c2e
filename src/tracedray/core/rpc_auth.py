"""The token on gRPC: a server interceptor that refuses callers without it, and a
channel that adds it to every call (all four call shapes).

A refused call gets UNAUTHENTICATED before any handler runs: no data, no side
effect. The refusal is counted and logged as ``auth.refused`` with the peer's
address, never what it sent. Decisions live in ``auth``; this is the grpc edge.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import grpc

from tracedray import logs
from tracedray.core import auth

log = logs.get_logger(__name__)
_REFUSAL_DETAILS = "tracedray: missing or wrong auth token"


class AuthServerInterceptor(grpc.ServerInterceptor):
    def intercept_service(self, continuation: Callable[[Any], Any],
                          handler_call_details: Any) -> Any:
        settings = auth.current()
        if not settings.enabled:
            return continuation(handler_call_details)
        given = auth.token_from_metadata(handler_call_details.invocation_metadata)
        if settings.accepts(given):
            return continuation(handler_call_details)
        # Looking the handler up runs nothing; it tells the call's shape, which the
        # refusal must have for grpc to answer it.
        handler = continuation(handler_call_details)
        return _refusal_handler(handler, handler_call_details.method)


def _refusal_handler(handler: Any, method: str) -> grpc.RpcMethodHandler:
    def refuse(_request: Any, context: grpc.ServicerContext) -> Any:
        total = auth.count_refusal("rpc")
        if auth.should_log_refusal(total):
            log.warning("auth.refused", peer=context.peer(), method=method,
                        refused_total=total)
        context.abort(grpc.StatusCode.UNAUTHENTICATED, _REFUSAL_DETAILS)

    request_streaming = bool(handler and handler.request_streaming)
    response_streaming = bool(handler and handler.response_streaming)
    # No deserializer: a refused request is never parsed.
    if request_streaming and response_streaming:
        return grpc.stream_stream_rpc_method_handler(refuse)
    if request_streaming:
        return grpc.stream_unary_rpc_method_handler(refuse)
    if response_streaming:
        return grpc.unary_stream_rpc_method_handler(refuse)
    return grpc.unary_unary_rpc_method_handler(refuse)


class AuthChannel(grpc.Channel):
    """A channel that adds ``authorization: Bearer <token>`` for ``address`` to every
    call, all four call shapes. Not ``grpc.intercept_channel``: its Python interceptor
    machinery cost about 60 us per call; this is one function call and a tuple. The
    token is looked up per call (a dict read), so a driver's next ``init()`` with
    another token needs no new channel."""

    def __init__(self, channel: grpc.Channel, address: str) -> None:
        self._channel = channel
        self._address = address

    def metadata(self, given: Any) -> Any:
        token = auth.client_token(self._address).token
        if token is None:
            return given
        own = ((auth.METADATA_KEY, auth.BEARER_PREFIX + token),)
        return own if not given else own + tuple(given)

    def unary_unary(self, method: str, *args: Any, **kwargs: Any) -> Any:
        return _Unary(self._channel.unary_unary(method, *args, **kwargs), self)

    def unary_stream(self, method: str, *args: Any, **kwargs: Any) -> Any:
        return _Streaming(self._channel.unary_stream(method, *args, **kwargs), self)

    def stream_unary(self, method: str, *args: Any, **kwargs: Any) -> Any:
        return _Unary(self._channel.stream_unary(method, *args, **kwargs), self)

    def stream_stream(self, method: str, *args: Any, **kwargs: Any) -> Any:
        return _Streaming(self._channel.stream_stream(method, *args, **kwargs), self)

    def subscribe(self, callback: Any, try_to_connect: bool = False) -> None:
        self._channel.subscribe(callback, try_to_connect)

    def unsubscribe(self, callback: Any) -> None:
        self._channel.unsubscribe(callback)

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> AuthChannel:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Unary:
    """A unary-reply multicallable with the token added."""

    def __init__(self, inner: Any, channel: AuthChannel) -> None:
        self._inner = inner
        self._channel = channel

    def __call__(self, request: Any, timeout: float | None = None, metadata: Any = None,
                 **kwargs: Any) -> Any:
        return self._inner(request, timeout, self._channel.metadata(metadata), **kwargs)

    def with_call(self, request: Any, timeout: float | None = None, metadata: Any = None,
                  **kwargs: Any) -> Any:
        return self._inner.with_call(request, timeout, self._channel.metadata(metadata),
                                     **kwargs)

    def future(self, request: Any, timeout: float | None = None, metadata: Any = None,
               **kwargs: Any) -> Any:
        return self._inner.future(request, timeout, self._channel.metadata(metadata), **kwargs)


class _Streaming:
    """A streaming-reply multicallable with the token added."""

    def __init__(self, inner: Any, channel: AuthChannel) -> None:
        self._inner = inner
        self._channel = channel

    def __call__(self, request: Any, timeout: float | None = None, metadata: Any = None,
                 **kwargs: Any) -> Any:
        return self._inner(request, timeout, self._channel.metadata(metadata), **kwargs)
