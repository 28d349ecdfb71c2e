"""Latency of the gRPC methods a server answers, per method, as a histogram.

A server interceptor times each unary call (two clock reads and a bucket increment under
a lock: a few microseconds against the call's own hundreds); streaming calls are counted
from their start until the handler returns its iterator, which says little, so they are
left out. Installed with :func:`install` before the component builds its server
(``rpc.make_server`` picks the interceptors up).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import grpc

from tracedray.metrics.snapshot import HISTOGRAM, Family, Series, bucket_index

BOUNDARIES = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
              10.0)
FAMILY = "tracedray_rpc_server_latency_seconds"


class RpcLatency(grpc.ServerInterceptor):
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._series: dict[str, Series] = {}

    def observe(self, method: str, seconds: float) -> None:
        with self._lock:
            series = self._series.get(method)
            if series is None:
                series = self._series[method] = Series(buckets=[0.0] * (len(BOUNDARIES) + 1))
            series.buckets[bucket_index(BOUNDARIES, seconds)] += 1
            series.sum += seconds
            series.count += 1

    def family(self) -> Family:
        family = Family(FAMILY, HISTOGRAM, "Time a gRPC server took to answer a unary call",
                        ("method",), BOUNDARIES)
        with self._lock:
            for method, series in self._series.items():
                family.series[(method,)] = Series(buckets=list(series.buckets),
                                                  sum=series.sum, count=series.count)
        return family

    def intercept_service(self, continuation: Callable[[Any], Any],
                          handler_call_details: Any) -> Any:
        handler = continuation(handler_call_details)
        if handler is None or handler.unary_unary is None:
            return handler
        method = handler_call_details.method.rsplit("/", 1)[-1]
        inner = handler.unary_unary
        observe = self.observe

        def timed(request: Any, context: Any) -> Any:
            started = time.perf_counter()
            try:
                return inner(request, context)
            finally:
                observe(method, time.perf_counter() - started)

        return grpc.unary_unary_rpc_method_handler(
            timed, request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer)


_installed: RpcLatency | None = None


def install(add_server_interceptor: Callable[[Any], None]) -> RpcLatency:
    """Time the calls of every server this process makes from now on
    (``add_server_interceptor``: the core's ``rpc.add_server_interceptor``)."""
    global _installed
    if _installed is None:
        _installed = RpcLatency()
        add_server_interceptor(_installed)
    return _installed


def installed() -> RpcLatency | None:
    """The latencies :func:`install` times, if it was called."""
    return _installed
