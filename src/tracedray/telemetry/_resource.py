"""The OTel Resource every span of this process carries.

Built as a pure function over explicit inputs (environment, host facts) so the
precedence rules are testable without touching the process environment.
"""

from __future__ import annotations

import os
import platform
import sys
import uuid
from collections.abc import Mapping
from urllib.parse import unquote

from opentelemetry.sdk.resources import Resource

from tracedray._version import __version__
from tracedray.telemetry import attributes as attrs
from tracedray.telemetry._host import host_ip, host_name

DEFAULT_SERVICE_NAME = "tracedray"

ResourceValue = str | int


def parse_resource_env(text: str) -> dict[str, str]:
    """Parse ``OTEL_RESOURCE_ATTRIBUTES`` (``k1=v1,k2=v2``, values percent-encoded).

    Malformed entries are ignored, as the OTel specification asks: a bad variable
    must not stop the process from starting.
    """
    result: dict[str, str] = {}
    for item in text.split(","):
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            continue
        result[key] = unquote(value.strip())
    return result


def _os_type() -> str:
    # semconv os.type values are lowercase kernel names: linux, darwin, windows, freebsd...
    return platform.system().lower() or sys.platform


def resource_attributes(
    component: str,
    *,
    node_id: str,
    session_id: str,
    extra: Mapping[str, ResourceValue] | None,
    environ: Mapping[str, str],
    pid: int,
    instance_id: str,
    hostname: str,
    ip: str,
) -> dict[str, ResourceValue]:
    """Resource attributes with their precedence made explicit.

    Lowest to highest: our defaults, ``OTEL_RESOURCE_ATTRIBUTES``, ``OTEL_SERVICE_NAME``
    (the spec gives it priority over ``service.name`` in the former), then the
    ``tracedray.*`` identity keys and ``extra``, which a user variable must never
    overwrite because the CLI and the pytest plugin join spans on them.
    """
    result: dict[str, ResourceValue] = {
        "service.name": DEFAULT_SERVICE_NAME,
        "service.version": __version__,
        "service.instance.id": instance_id,
        "host.name": hostname,
        "host.ip": ip,
        "process.pid": pid,
        "process.runtime.name": sys.implementation.name,
        "process.runtime.version": platform.python_version(),
        "process.executable.path": sys.executable,
        "os.type": _os_type(),
        "telemetry.sdk.language": "python",
        "telemetry.sdk.name": "opentelemetry",
    }
    result.update(parse_resource_env(environ.get("OTEL_RESOURCE_ATTRIBUTES", "")))
    service_name = environ.get("OTEL_SERVICE_NAME", "").strip()
    if service_name:
        result["service.name"] = service_name
    result[attrs.RESOURCE_NODE_ID] = node_id
    result[attrs.RESOURCE_SESSION_ID] = session_id
    result[attrs.RESOURCE_COMPONENT] = component
    if extra:
        result.update(extra)
    return result


def service_name(environ: Mapping[str, str]) -> str:
    """The ``service.name`` a process's spans carry (same precedence as
    :func:`resource_attributes`): log lines carry it too, so a log pipeline files them
    under the same service as the spans."""
    name = environ.get("OTEL_SERVICE_NAME", "").strip()
    if name:
        return name
    return parse_resource_env(environ.get("OTEL_RESOURCE_ATTRIBUTES", "")).get(
        "service.name") or DEFAULT_SERVICE_NAME


def build_resource(
    component: str,
    *,
    node_id: str,
    session_id: str,
    extra: Mapping[str, ResourceValue] | None = None,
    environ: Mapping[str, str] | None = None,
) -> Resource:
    values = resource_attributes(
        component,
        node_id=node_id,
        session_id=session_id,
        extra=extra,
        environ=os.environ if environ is None else environ,
        pid=os.getpid(),
        instance_id=uuid.uuid4().hex,
        hostname=host_name(),
        ip=host_ip(),
    )
    return Resource(values)
