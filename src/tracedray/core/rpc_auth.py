"""The token on gRPC: a server interceptor that refuses callers without it, and a
client interceptor that adds it to every call (all four call shapes).

A refused call gets UNAUTHENTICATED before any handler runs: no data, no side
effect. The refusal is counted and logged as ``auth.refused`` with the peer's
address, never what it sent. Decisions live in ``auth``; this is the grpc edge.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

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


class _CallDetails(NamedTuple):
    method: str
    timeout: float | None
    metadata: Any
    credentials: Any
    wait_for_ready: Any
    compression: Any


class AuthClientInterceptor(grpc.UnaryUnaryClientInterceptor,
                            grpc.UnaryStreamClientInterceptor,
                            grpc.StreamUnaryClientInterceptor,
                            grpc.StreamStreamClientInterceptor):
    """Adds ``authorization: Bearer <token>`` for ``address``; the token is looked up
    per call (a dict read), so a driver's next ``init()`` with another token needs no
    new channel."""

    def __init__(self, address: str) -> None:
        self._address = address

    def _details(self, details: Any) -> Any:
        token = auth.client_token(self._address).token
        if token is None:
            return details
        metadata = list(details.metadata or ())
        metadata.append((auth.METADATA_KEY, auth.bearer(token)))
        return _CallDetails(details.method, details.timeout, metadata, details.credentials,
                            getattr(details, "wait_for_ready", None),
                            getattr(details, "compression", None))

    def intercept_unary_unary(self, continuation: Any, details: Any, request: Any) -> Any:
        return continuation(self._details(details), request)

    def intercept_unary_stream(self, continuation: Any, details: Any, request: Any) -> Any:
        return continuation(self._details(details), request)

    def intercept_stream_unary(self, continuation: Any, details: Any, requests: Any) -> Any:
        return continuation(self._details(details), requests)

    def intercept_stream_stream(self, continuation: Any, details: Any, requests: Any) -> Any:
        return continuation(self._details(details), requests)
