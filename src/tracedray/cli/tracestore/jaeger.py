"""A minimal client for Jaeger v2's ``/api/v3`` HTTP JSON query API (urllib only).

Facts it relies on (shared/research/ecosystem.md §1.2): responses are OTLP JSON
wrapped as ``{"result": {...}}``; an empty search or an unknown trace id is HTTP
404; search parameters were renamed from snake_case to camelCase in v2.19, so
both spellings are sent and every 2.x server understands the request.
"""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from tracedray.exceptions import RaySystemError

DEFAULT_TIMEOUT_S = 5.0
DEFAULT_SEARCH_DEPTH = 100


@dataclass(frozen=True)
class JaegerClientStatistics:
    requests: int
    not_found: int
    failures: int
    bytes_received: int


def rfc3339(time_ns: int) -> str:
    moment = datetime.fromtimestamp(time_ns / 1e9, tz=timezone.utc)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def search_params(*, service: str, start_min_ns: int, start_max_ns: int,
                  search_depth: int = DEFAULT_SEARCH_DEPTH,
                  attributes: Mapping[str, str] | None = None) -> list[tuple[str, str]]:
    """FindTraces query parameters, each in its ≤2.18 and its 2.19+ spelling."""
    start_min, start_max = rfc3339(start_min_ns), rfc3339(start_max_ns)
    params = [
        ("query.service_name", service), ("query.serviceName", service),
        ("query.start_time_min", start_min), ("query.startTimeMin", start_min),
        ("query.start_time_max", start_max), ("query.startTimeMax", start_max),
        # Without a depth the ≤2.18 memory store rejects the query; num_traces is
        # the one name every 2.x accepts.
        ("query.num_traces", str(search_depth)),
        ("query.search_depth", str(search_depth)), ("query.searchDepth", str(search_depth)),
    ]
    if attributes:
        # Honoured from v2.19 on, ignored before: callers filter the result again.
        params.append(("query.attributes", json.dumps(dict(attributes), sort_keys=True)))
    return params


def resource_spans_of(payload: Any) -> list[dict[str, Any]]:
    """The ``resourceSpans`` of an api_v3 trace response (``{"result": TracesData}``)."""
    if not isinstance(payload, dict):
        raise ValueError("response is not a JSON object")
    result = payload.get("result", payload)
    if not isinstance(result, dict):
        raise ValueError("'result' is not a JSON object")
    spans = result.get("resourceSpans", [])
    if not isinstance(spans, list):
        raise ValueError("'resourceSpans' is not a list")
    return spans


class JaegerClient:
    def __init__(self, base_url: str, *, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s
        self._lock = threading.Lock()
        self._requests = 0
        self._not_found = 0
        self._failures = 0
        self._bytes = 0

    def __repr__(self) -> str:
        return f"<JaegerClient {self.base_url} requests={self._requests}>"

    def statistics(self) -> JaegerClientStatistics:
        with self._lock:
            return JaegerClientStatistics(self._requests, self._not_found, self._failures,
                                          self._bytes)

    def get_trace(self, trace_id: str) -> list[dict[str, Any]]:
        payload = self._get(f"/api/v3/traces/{urllib.parse.quote(trace_id)}", [])
        return [] if payload is None else self._spans(payload)

    def find_traces(self, params: Sequence[tuple[str, str]]) -> list[dict[str, Any]]:
        payload = self._get("/api/v3/traces", params)
        return [] if payload is None else self._spans(payload)

    def services(self) -> list[str]:
        payload = self._get("/api/v3/services", [])
        if payload is None:
            return []
        services = payload.get("services", []) if isinstance(payload, dict) else []
        return [str(name) for name in services or []]

    def _spans(self, payload: Any) -> list[dict[str, Any]]:
        try:
            return resource_spans_of(payload)
        except ValueError as exc:
            raise RaySystemError(f"Jaeger at {self.base_url} sent an unexpected reply: {exc}") \
                from exc

    def _get(self, path: str, params: Sequence[tuple[str, str]]) -> Any:
        """Decoded JSON body, or None for 404 (Jaeger's "no traces found")."""
        url = self.base_url + path
        if params:
            url += "?" + urllib.parse.urlencode(list(params))
        request = urllib.request.Request(url, headers={"Accept": "application/json"})
        with self._lock:
            self._requests += 1
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                body = response.read()
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                with self._lock:
                    self._not_found += 1
                return None
            self._count_failure()
            raise RaySystemError(
                f"Jaeger at {self.base_url} answered {exc.code} for {path}: {_error_text(exc)}"
            ) from exc
        except (urllib.error.URLError, TimeoutError, OSError) as exc:
            self._count_failure()
            reason = getattr(exc, "reason", exc)
            raise RaySystemError(f"Jaeger at {self.base_url} did not answer: {reason}") from exc
        with self._lock:
            self._bytes += len(body)
        try:
            return json.loads(body)
        except ValueError as exc:
            self._count_failure()
            raise RaySystemError(f"Jaeger at {self.base_url} sent invalid JSON for {path}") \
                from exc

    def _count_failure(self) -> None:
        with self._lock:
            self._failures += 1


def _error_text(exc: urllib.error.HTTPError) -> str:
    try:
        payload = json.loads(exc.read())
        return str(payload["error"]["message"])
    except (ValueError, KeyError, TypeError, OSError):
        return str(exc.reason)
