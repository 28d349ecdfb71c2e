"""Where spans and log records are exported, from the standard ``OTEL_*`` variables.

Pure functions of the environment (unit-tested); nothing here opens a connection.

- ``OTEL_TRACES_EXPORTER``: a comma-separated list of ``otlp``, ``console``, ``none``.
  Unset, it is ``otlp`` when an OTLP endpoint variable is set and ``none`` otherwise
  (the session's trace files are always written; exporting to ``localhost:4317``
  because nothing said otherwise would only fill a log with refused connections).
- ``OTEL_LOGS_EXPORTER``: ``otlp`` or ``none`` (default ``none``: the JSON log files are
  the logs' home; ``otlp`` sends each line as an OTLP log record as well).
- ``OTEL_EXPORTER_OTLP_[TRACES_|LOGS_]{ENDPOINT,PROTOCOL,HEADERS,TIMEOUT,COMPRESSION,
  INSECURE,CERTIFICATE,CLIENT_KEY,CLIENT_CERTIFICATE}``: the signal-specific variable
  wins over the generic one. A generic endpoint gets ``/v1/traces`` or ``/v1/logs``
  appended for HTTP; a signal-specific one is used as it is (the OTLP exporter spec).

The protocol defaults to ``grpc`` (tracedray's default since its first version;
``http/protobuf`` and ``http/json`` are served too).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import unquote, urlparse

GRPC = "grpc"
HTTP_PROTOBUF = "http/protobuf"
HTTP_JSON = "http/json"
PROTOCOLS = (GRPC, HTTP_PROTOBUF, HTTP_JSON)
TRACES = "traces"
LOGS = "logs"
OTLP = "otlp"
CONSOLE = "console"
NONE = "none"
DEFAULT_TIMEOUT_S = 10.0
# The session's folder of export cursors (agent_export.py), one file per destination
# and exported file; rotation (rotation_io.py) moves a file's cursors with it.
EXPORT_DIR = "export"
_DEFAULT_ENDPOINTS = {GRPC: "http://localhost:4317", HTTP_PROTOBUF: "http://localhost:4318",
                      HTTP_JSON: "http://localhost:4318"}


@dataclass(frozen=True)
class OtlpTarget:
    """One signal's OTLP destination, as the exporter spec reads it from the environment."""

    signal: str  # TRACES or LOGS
    endpoint: str  # gRPC: host:port; HTTP: the full URL of the signal's path
    protocol: str  # GRPC, HTTP_PROTOBUF or HTTP_JSON
    headers: tuple[tuple[str, str], ...]
    timeout_s: float
    gzip: bool
    insecure: bool  # gRPC: plaintext channel
    certificate: str  # CA bundle file ("": the system's)
    client_key: str
    client_certificate: str

    @property
    def display(self) -> str:
        """The endpoint as the user wrote it, for messages."""
        return self.endpoint if self.protocol != GRPC else (
            f"{'http' if self.insecure else 'https'}://{self.endpoint}")

    @property
    def host_port(self) -> tuple[str, int]:
        """Where a TCP connection goes (for a reachability check)."""
        if self.protocol == GRPC:
            host, _, port = self.endpoint.rpartition(":")
            return host.strip("[]"), int(port) if port.isdigit() else 4317
        parsed = urlparse(self.endpoint)
        default = 443 if parsed.scheme == "https" else 80
        return parsed.hostname or "localhost", parsed.port or default


@dataclass(frozen=True)
class ExportConfig:
    traces_exporters: tuple[str, ...]  # of OTLP, CONSOLE
    logs_exporters: tuple[str, ...]  # of OTLP
    traces: OtlpTarget | None  # set when OTLP is among traces_exporters
    logs: OtlpTarget | None
    notes: tuple[str, ...]  # what was asked and could not be served, for a warning

    @property
    def otlp_targets(self) -> tuple[OtlpTarget, ...]:
        return tuple(t for t in (self.traces, self.logs) if t is not None)

    @property
    def exports_otlp(self) -> bool:
        return bool(self.otlp_targets)


def export_config(environ: Mapping[str, str]) -> ExportConfig:
    """What to export and where, from ``environ``; see the module docstring."""
    notes: list[str] = []
    has_endpoint = bool(_get(environ, TRACES, "ENDPOINT"))
    traces = _exporters(environ, "OTEL_TRACES_EXPORTER", OTLP if has_endpoint else NONE,
                        (OTLP, CONSOLE), notes)
    logs = _exporters(environ, "OTEL_LOGS_EXPORTER", NONE, (OTLP,), notes)
    return ExportConfig(traces, logs,
                        otlp_target(environ, TRACES, notes) if OTLP in traces else None,
                        otlp_target(environ, LOGS, notes) if OTLP in logs else None,
                        tuple(notes))


def _exporters(environ: Mapping[str, str], name: str, default: str,
               supported: tuple[str, ...], notes: list[str]) -> tuple[str, ...]:
    items = [part.strip() for part in (environ.get(name, "").strip().lower()
                                       or default).split(",")]
    if NONE in items:
        return ()  # the spec: "none" means no exporter at all
    chosen: list[str] = []
    for item in items:
        if item and item not in supported:
            notes.append(f"{name}={item!r} is not supported here (supported: "
                         f"{', '.join((*supported, NONE))}); ignored")
        elif item and item not in chosen:
            chosen.append(item)
    return tuple(chosen)


def _get(environ: Mapping[str, str], signal: str, key: str) -> str:
    return (environ.get(f"OTEL_EXPORTER_OTLP_{signal.upper()}_{key}", "").strip()
            or environ.get(f"OTEL_EXPORTER_OTLP_{key}", "").strip())


def otlp_target(environ: Mapping[str, str], signal: str, notes: list[str]) -> OtlpTarget:
    asked = _get(environ, signal, "PROTOCOL").lower() or GRPC
    protocol = asked
    if asked not in PROTOCOLS:
        notes.append(f"unknown OTLP protocol {asked!r} for {signal}; using grpc")
        protocol = GRPC
    specific = environ.get(f"OTEL_EXPORTER_OTLP_{signal.upper()}_ENDPOINT", "").strip()
    generic = environ.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip()
    raw = specific or generic or _DEFAULT_ENDPOINTS[protocol]
    parsed = urlparse(raw if "://" in raw else f"//{raw}")
    if protocol == GRPC:
        insecure_text = _get(environ, signal, "INSECURE").lower()
        if parsed.scheme == "https":
            insecure = False
        elif insecure_text:
            insecure = insecure_text == "true"
        else:
            insecure = parsed.scheme == "http"
        endpoint = parsed.netloc or raw
    else:
        insecure = parsed.scheme != "https"
        endpoint = specific or raw.rstrip("/") + f"/v1/{signal}"
    return OtlpTarget(
        signal=signal, endpoint=endpoint, protocol=protocol,
        headers=parse_headers(_get(environ, signal, "HEADERS")),
        timeout_s=_timeout(_get(environ, signal, "TIMEOUT"), signal, notes),
        gzip=_get(environ, signal, "COMPRESSION").lower() == "gzip",
        insecure=insecure, certificate=_get(environ, signal, "CERTIFICATE"),
        client_key=_get(environ, signal, "CLIENT_KEY"),
        client_certificate=_get(environ, signal, "CLIENT_CERTIFICATE"))


def parse_headers(text: str) -> tuple[tuple[str, str], ...]:
    """``k1=v1,k2=v2`` with percent-encoded values (W3C baggage form); keys lowercased
    (gRPC metadata keys must be). Items without ``=`` are skipped."""
    headers = []
    for item in text.split(","):
        key, sep, value = item.partition("=")
        if sep and key.strip():
            headers.append((unquote(key.strip()).lower(), unquote(value.strip())))
    return tuple(headers)


def _timeout(text: str, signal: str, notes: list[str]) -> float:
    """The spec gives OTEL_EXPORTER_OTLP_TIMEOUT in milliseconds."""
    if not text:
        return DEFAULT_TIMEOUT_S
    try:
        value = float(text) / 1000.0
    except ValueError:
        value = 0.0
    if value <= 0:
        notes.append(f"OTLP timeout {text!r} for {signal} is not a positive number of "
                     f"milliseconds; using {DEFAULT_TIMEOUT_S:g} s")
        return DEFAULT_TIMEOUT_S
    return value
