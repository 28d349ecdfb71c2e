"""Sending one OTLP export request over gRPC or HTTP, and what its answer means.

Only the telemetry agent imports this (grpc, urllib and the OTLP protobuf classes
stay out of every other process). A send never raises: it returns whether the
request was taken (``OK``), should be sent again later (``RETRY``: the endpoint is
down, busy or timed out, as the OTLP spec lists the retryable answers) or was
refused for good (``REJECTED``: retrying the same bytes cannot help).
"""

from __future__ import annotations

import contextlib
import enum
import gzip
import ssl
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any

from tracedray.telemetry import otlp_requests
from tracedray.telemetry.export_config import GRPC, HTTP_JSON, LOGS, OtlpTarget

RETRYABLE_HTTP = frozenset({408, 429, 502, 503, 504})


class Outcome(enum.Enum):
    OK = "ok"
    RETRY = "retry"
    REJECTED = "rejected"


@dataclass(frozen=True)
class SendResult:
    outcome: Outcome
    error: str = ""
    rejected: int = 0  # items the endpoint refused in a partly successful answer


class Transport:
    """One signal's connection to its endpoint (a gRPC channel is kept between sends)."""

    def __init__(self, target: OtlpTarget) -> None:
        self.target = target
        self._channel: Any = None
        self._stub: Any = None

    def send(self, batch: otlp_requests.Batch, timeout_s: float) -> SendResult:
        try:
            if self.target.protocol == GRPC:
                return self._send_grpc(batch, timeout_s)
            return self._send_http(batch, timeout_s)
        except Exception as exc:  # a bug or an odd environment: never into the agent's loop
            return SendResult(Outcome.RETRY, f"{type(exc).__name__}: {exc}")

    def close(self) -> None:
        channel, self._channel, self._stub = self._channel, None, None
        if channel is not None:
            with contextlib.suppress(Exception):
                channel.close()

    # --- gRPC
    def _message(self) -> Any:
        if self.target.signal == LOGS:
            from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
                ExportLogsServiceRequest,
            )

            return ExportLogsServiceRequest()
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
            ExportTraceServiceRequest,
        )

        return ExportTraceServiceRequest()

    def _grpc_stub(self) -> Any:
        if self._stub is not None:
            return self._stub
        import grpc

        target = self.target
        compression = grpc.Compression.Gzip if target.gzip else None
        if target.insecure:
            self._channel = grpc.insecure_channel(target.endpoint, compression=compression)
        else:
            credentials = grpc.ssl_channel_credentials(
                root_certificates=_read(target.certificate),
                private_key=_read(target.client_key),
                certificate_chain=_read(target.client_certificate))
            self._channel = grpc.secure_channel(target.endpoint, credentials,
                                                compression=compression)
        if target.signal == LOGS:
            from opentelemetry.proto.collector.logs.v1.logs_service_pb2_grpc import (
                LogsServiceStub,
            )

            self._stub = LogsServiceStub(self._channel)
        else:
            from opentelemetry.proto.collector.trace.v1.trace_service_pb2_grpc import (
                TraceServiceStub,
            )

            self._stub = TraceServiceStub(self._channel)
        return self._stub

    def _send_grpc(self, batch: otlp_requests.Batch, timeout_s: float) -> SendResult:
        import grpc

        request = otlp_requests.proto_request(batch, self._message())
        stub = self._grpc_stub()
        try:
            response = stub.Export(request, timeout=timeout_s,
                                   metadata=self.target.headers or None)
        except grpc.RpcError as exc:
            code = exc.code() if hasattr(exc, "code") else None
            details = exc.details() if hasattr(exc, "details") else str(exc)
            error = f"{getattr(code, 'name', code)}: {details}"
            if code in _retryable_grpc_codes():
                # A channel that failed to connect backs off on its own for up to two
                # minutes; a fresh one tries again at once when we next ask.
                self.close()
                return SendResult(Outcome.RETRY, error)
            return SendResult(Outcome.REJECTED, error)
        return _partial(response, self.target.signal)

    # --- HTTP
    def _send_http(self, batch: otlp_requests.Batch, timeout_s: float) -> SendResult:
        target = self.target
        if target.protocol == HTTP_JSON:
            body, content_type = otlp_requests.json_bytes(batch), "application/json"
        else:
            body = otlp_requests.proto_request(batch, self._message()).SerializeToString()
            content_type = "application/x-protobuf"
        headers = {"Content-Type": content_type, **dict(target.headers)}
        if target.gzip:
            body = gzip.compress(body)
            headers["Content-Encoding"] = "gzip"
        request = urllib.request.Request(target.endpoint, data=body, headers=headers,
                                         method="POST")
        context = None
        if target.endpoint.startswith("https:"):
            context = ssl.create_default_context(cafile=target.certificate or None)
            if target.client_certificate:
                context.load_cert_chain(target.client_certificate,
                                        target.client_key or None)
        try:
            with urllib.request.urlopen(request, timeout=timeout_s, context=context) as answer:
                payload = answer.read()
                answer_type = answer.headers.get("Content-Type", "")
        except urllib.error.HTTPError as exc:
            error = f"HTTP {exc.code}: {exc.reason}"
            outcome = Outcome.RETRY if exc.code in RETRYABLE_HTTP else Outcome.REJECTED
            return SendResult(outcome, error)
        except (urllib.error.URLError, OSError) as exc:  # refused, unreachable, timed out
            return SendResult(Outcome.RETRY, f"{type(exc).__name__}: {exc}")
        return _http_partial(payload, answer_type, target.signal)


def _retryable_grpc_codes() -> frozenset[Any]:
    import grpc

    code = grpc.StatusCode
    # The OTLP spec's retryable gRPC codes.
    return frozenset({code.CANCELLED, code.DEADLINE_EXCEEDED, code.ABORTED, code.OUT_OF_RANGE,
                      code.UNAVAILABLE, code.DATA_LOSS, code.RESOURCE_EXHAUSTED})


def _read(path: str) -> bytes | None:
    if not path:
        return None
    with open(path, "rb") as handle:
        return handle.read()


def _partial(response: Any, signal: str) -> SendResult:
    partial = getattr(response, "partial_success", None)
    rejected = 0
    if partial is not None:
        rejected = int(getattr(partial, "rejected_log_records" if signal == LOGS
                               else "rejected_spans", 0) or 0)
        if rejected:
            return SendResult(Outcome.OK, partial.error_message or "partly rejected", rejected)
    return SendResult(Outcome.OK)


def _http_partial(payload: bytes, content_type: str, signal: str) -> SendResult:
    if not payload:
        return SendResult(Outcome.OK)
    key = "rejectedLogRecords" if signal == LOGS else "rejectedSpans"
    try:
        if "json" in content_type:
            import json

            partial = json.loads(payload).get("partialSuccess") or {}
            rejected = int(partial.get(key, 0) or 0)
            if rejected:
                return SendResult(Outcome.OK, str(partial.get("errorMessage", "")), rejected)
            return SendResult(Outcome.OK)
        if signal == LOGS:
            from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
                ExportLogsServiceResponse as Response,
            )
        else:
            from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
                ExportTraceServiceResponse as Response,
            )
        response = Response()
        response.ParseFromString(payload)
        return _partial(response, signal)
    except Exception:  # an answer we cannot read still said 2xx
        return SendResult(Outcome.OK)
