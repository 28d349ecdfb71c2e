"""Every ``TRACEDRAY_*`` environment variable, declared once.

Values are parsed strictly: a malformed value raises :class:`ConfigError` naming
the variable, instead of silently falling back to a default.  CLI options reuse
the same names (``--temp-dir`` ↔ ``TRACEDRAY_TEMP_DIR``).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

from tracedray.exceptions import ConfigError

T = TypeVar("T")


def _parse_bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"expected true/false, got {text!r}")


def _parse_positive_float(text: str) -> float:
    value = float(text)
    if not value > 0:  # NaN too
        raise ValueError(f"expected a positive number, got {text!r}")
    return value


def _parse_non_negative_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise ValueError(f"expected a non-negative integer, got {text!r}")
    return value


@dataclass(frozen=True)
class Variable(Generic[T]):
    name: str
    parse: Callable[[str], T]
    default: Callable[[], T]
    doc: str
    # A credential: never written to logs or printed (effective_configuration redacts it).
    secret: bool = False
    # Other names read when this one is unset (Ray's spelling of the same setting).
    fallbacks: tuple[str, ...] = ()

    def get(self, environ: Mapping[str, str] | None = None) -> T:
        env = os.environ if environ is None else environ
        name = self.name
        raw = env.get(name)
        for other in self.fallbacks:
            if raw is not None and raw != "":
                break
            name, raw = other, env.get(other)
        if raw is None or raw == "":
            return self.default()
        try:
            return self.parse(raw)
        except (ValueError, TypeError) as exc:
            raise ConfigError(
                f"environment variable {name}={raw!r} is invalid: {exc}. {self.doc}"
            ) from exc


TEMP_DIR: Variable[Path] = Variable(
    "TRACEDRAY_TEMP_DIR",
    Path,
    lambda: Path(tempfile.gettempdir()) / "tracedray",
    "Root folder for session directories (default: <system temp>/tracedray).",
)
ADDRESS: Variable[str] = Variable(
    "TRACEDRAY_ADDRESS",
    str,
    lambda: "",
    "GCS address (host:port) that init(address='auto') and the CLI connect to.",
)
LOG_TO_DRIVER: Variable[bool] = Variable(
    "TRACEDRAY_LOG_TO_DRIVER",
    _parse_bool,
    lambda: True,
    "Echo what tasks print to the driver's console, prefixed with task name and pid.",
)
INLINE_THRESHOLD: Variable[int] = Variable(
    "TRACEDRAY_INLINE_THRESHOLD_BYTES",
    _parse_non_negative_int,
    lambda: 100 * 1024,
    "Values smaller than this travel inside messages; larger ones go to the shared-memory store.",
)
LEASE_LINGER_S: Variable[float] = Variable(
    "TRACEDRAY_LEASE_LINGER_S",
    _parse_positive_float,
    lambda: 0.05,
    "How long an idle worker lease is kept for reuse before it is returned to the raylet.",
)
HEARTBEAT_INTERVAL_S: Variable[float] = Variable(
    "TRACEDRAY_HEARTBEAT_INTERVAL_S",
    _parse_positive_float,
    lambda: 1.0,
    "Seconds between a raylet's heartbeats to the GCS.",
)
IDLE_WORKER_TIMEOUT_S: Variable[float] = Variable(
    "TRACEDRAY_IDLE_WORKER_TIMEOUT_S",
    _parse_positive_float,
    lambda: 1.0,
    "A raylet stops a task worker idle this long while it has more task workers than its "
    "soft limit (TRACEDRAY_IDLE_WORKER_SOFT_LIMIT); extra workers are started while tasks "
    "block in get().",
)

OBJECT_POOL_IDLE_S: Variable[float] = Variable(
    "TRACEDRAY_OBJECT_POOL_IDLE_S",
    _parse_positive_float,
    lambda: 60.0,
    "Seconds a freed object file kept for reuse by later puts (object_store/pool.py) waits "
    "for one before the raylet deletes it, giving its shared memory back; 'inf' keeps "
    "them (within the store's free capacity) until the node stops.",
)

WORKER_REGISTER_TIMEOUT_S: Variable[float] = Variable(
    "TRACEDRAY_WORKER_REGISTER_TIMEOUT_S",
    _parse_positive_float,
    lambda: 60.0,
    "A worker process that has not registered with its raylet this long after it was "
    "started is killed (stuck at start: a hung import, a sitecustomize that blocks) and "
    "another is started for the work that waits; as Ray's worker_register_timeout_seconds.",
)


def _parse_positive_int(text: str) -> int | None:
    value = int(text)
    if value < 1:
        raise ValueError(f"expected a positive integer, got {text!r}")
    return value


IDLE_WORKER_SOFT_LIMIT: Variable[int | None] = Variable(
    "TRACEDRAY_IDLE_WORKER_SOFT_LIMIT",
    _parse_positive_int,
    lambda: None,
    "How many task workers a raylet keeps alive when they are idle (default: the node's "
    "CPU count, at least 1); idle ones beyond it are stopped after "
    "TRACEDRAY_IDLE_WORKER_TIMEOUT_S.",
)
NODE_DEATH_TIMEOUT_S: Variable[float] = Variable(
    "TRACEDRAY_NODE_DEATH_TIMEOUT_S",
    _parse_positive_float,
    lambda: 30.0,
    "A node whose heartbeats stop for this long is marked DEAD (late ones first make it "
    "SUSPECT in `tracedray status`; a refused raylet port is dead at once).",
)
JAEGER_URL: Variable[str] = Variable(
    "TRACEDRAY_JAEGER_URL",
    str,
    lambda: "",
    "Jaeger query base URL (e.g. http://localhost:16686) for the CLI's trace reads and links.",
)
TRACE_FILES: Variable[bool] = Variable(
    "TRACEDRAY_TRACE_FILES",
    _parse_bool,
    lambda: True,
    "Write spans as OTLP JSON lines to the session's traces/ folder.",
)

def _parse_non_negative_float(text: str) -> float:
    value = float(text)
    if value < 0:
        raise ValueError(f"expected a non-negative number, got {text!r}")
    return value


GCS_STORAGE: Variable[str] = Variable(
    "TRACEDRAY_GCS_STORAGE",
    str,
    lambda: "memory",
    "Where the GCS keeps its tables: 'memory' (in memory, finished entries flushed to "
    "<session>/gcs.sqlite3) or 'redis://host:port/db' (also rediss://, unix://).",
)
GCS_FLUSH_ENABLED: Variable[bool] = Variable(
    "TRACEDRAY_GCS_FLUSH_ENABLED",
    _parse_bool,
    lambda: True,
    "Periodically move finished GCS entries out of memory into the storage.",
)
GCS_FLUSH_INTERVAL_S: Variable[float] = Variable(
    "TRACEDRAY_GCS_FLUSH_INTERVAL_S",
    _parse_positive_float,
    lambda: 1.0,
    "Seconds between two GCS flushes.",
)
GCS_FLUSH_MAX_HOT_ENTRIES: Variable[int] = Variable(
    "TRACEDRAY_GCS_FLUSH_MAX_HOT_ENTRIES",
    _parse_non_negative_int,
    lambda: 10_000,
    "Per table, finished entries beyond this many are flushed even if they are young.",
)
GCS_FLUSH_MAX_LIVE_ENTRIES: Variable[int] = Variable(
    "TRACEDRAY_GCS_FLUSH_MAX_LIVE_ENTRIES",
    _parse_non_negative_int,
    lambda: 5_000,
    "Per table, unfinished entries (tasks still pending or running) beyond this many, the "
    "oldest first, are moved to the storage too, so that a burst of submissions cannot "
    "grow the GCS's memory; 0 keeps every unfinished entry in memory.",
)
GCS_FLUSH_MIN_AGE_S: Variable[float] = Variable(
    "TRACEDRAY_GCS_FLUSH_MIN_AGE_S",
    _parse_non_negative_float,
    lambda: 2.0,
    "A finished GCS entry stays in memory at least this long (recent lookups stay cheap).",
)
GCS_RECONNECT_TIMEOUT_S: Variable[float] = Variable(
    "TRACEDRAY_GCS_RECONNECT_TIMEOUT_S",
    _parse_positive_float,
    lambda: 30.0,
    "How long drivers, workers and raylets keep retrying an unreachable GCS (counted from "
    "the first failed call; a restarting GCS is back within seconds) before a call raises "
    "GcsUnavailableError.",
)
GCS_REDIS_RETRY_TIMEOUT_S: Variable[float] = Variable(
    "TRACEDRAY_GCS_REDIS_RETRY_TIMEOUT_S",
    _parse_positive_float,
    lambda: 60.0,
    "How long a GCS storage operation keeps retrying (exponential backoff) while Redis is "
    "unreachable before it fails.",
)
GCS_REDIS_BACKOFF_MAX_S: Variable[float] = Variable(
    "TRACEDRAY_GCS_REDIS_BACKOFF_MAX_S",
    _parse_positive_float,
    lambda: 2.0,
    "Longest pause between two attempts to reach Redis.",
)


_LOG_LEVELS = ("debug", "info", "warning", "error", "critical")


def _parse_log_level(text: str) -> str:
    lowered = text.strip().lower()
    if lowered not in _LOG_LEVELS:
        raise ValueError(f"expected one of {', '.join(_LOG_LEVELS)}, got {text!r}")
    return lowered


LOG_LEVEL: Variable[str] = Variable(
    "TRACEDRAY_LOG_LEVEL",
    _parse_log_level,
    lambda: "info",
    "Lowest level written to the JSON log files (debug, info, warning, error, critical).",
)



def _parse_package_versions(text: str) -> dict[str, str]:
    pairs = {}
    for item in text.split(","):
        name, sep, version = item.strip().partition("=")
        if not sep or not name.strip() or not version.strip():
            raise ValueError(f"expected name=version[,name=version...], got {text!r}")
        pairs[name.strip()] = version.strip()
    return pairs


LOCALITY_AWARE: Variable[bool] = Variable(
    "TRACEDRAY_LOCALITY_AWARE",
    _parse_bool,
    lambda: True,
    "Send a task's lease request to the node holding most of its input bytes (Figure 8a of "
    "the Ray paper); off: always ask the local raylet.",
)
FAKE_PACKAGE_VERSIONS: Variable[dict[str, str]] = Variable(
    "TRACEDRAY_FAKE_PACKAGE_VERSIONS",
    _parse_package_versions,
    dict,
    "Test hook: package versions a node reports instead of the installed ones "
    "(e.g. 'numpy=1.0.0'), to exercise the version-drift warning without a second venv.",
)

TELEMETRY_MAPPED_FILES: Variable[bool] = Variable(
    "TRACEDRAY_TELEMETRY_MAPPED_FILES",
    _parse_bool,
    lambda: True,
    "Append spans and log lines to each process's private spools through a shared file "
    "mapping (no system call per line); the public logs/*.jsonl get whole lines copied from "
    "them. false: one write() per log line straight to logs/*.jsonl, and pwrite() per span "
    "record.",
)
TELEMETRY_AGENT_INTERVAL_S: Variable[float] = Variable(
    "TRACEDRAY_TELEMETRY_AGENT_INTERVAL_S",
    _parse_positive_float,
    lambda: 0.5,
    "How often each node's telemetry agent turns the span spools into the OTLP JSON lines "
    "of traces/*.jsonl (readers convert what it has not done yet themselves).",
)

TELEMETRY_AGENT_MAX_DEFER_S: Variable[float] = Variable(
    "TRACEDRAY_TELEMETRY_AGENT_MAX_DEFER_S",
    _parse_non_negative_float,
    lambda: 10.0,
    "How long a node's telemetry agent may put off converting span spools while other "
    "processes keep a quarter or more of the machine's CPU busy (0: never put it off). "
    "Readers of the session (CLI, pytest plugin) convert what is left themselves.",
)

OTLP_EXPORT_LINGER_S: Variable[float] = Variable(
    "TRACEDRAY_OTLP_EXPORT_LINGER_S",
    _parse_non_negative_float,
    lambda: 30.0,
    "How long a node's telemetry agent keeps sending spans (and log records) to an OTLP "
    "endpoint that is down or slow after its node stopped; what it could not send stays in "
    "the session files (and in its export cursors, for the next agent of the session).",
)
METRICS_ENABLED: Variable[bool] = Variable(
    "TRACEDRAY_METRICS",
    _parse_bool,
    lambda: True,
    "Whether raylets and the GCS serve Prometheus metrics on /metrics (true/false).",
)
METRICS_EXPORT_PORT: Variable[int] = Variable(
    "TRACEDRAY_METRICS_EXPORT_PORT",
    _parse_non_negative_int,
    lambda: 0,
    "Port of a raylet's /metrics when --metrics-export-port is not given (0: a free port).",
)

_AUTH_MODES = ("token", "disabled")


def _parse_auth_mode(text: str) -> str:
    lowered = text.strip().lower()
    if lowered not in _AUTH_MODES:
        raise ValueError(f"expected one of {', '.join(_AUTH_MODES)}, got {text!r}")
    return lowered


def _parse_existing_file(text: str) -> Path:
    path = Path(text).expanduser()
    if not path.is_file():
        raise ValueError(f"no such file {str(path)!r}")
    return path


AUTH_MODE: Variable[str] = Variable(
    "TRACEDRAY_AUTH_MODE",
    _parse_auth_mode,
    lambda: "token",
    "'token' (default): every connection to a cluster process must present the cluster's "
    "token; 'disabled': anyone who reaches a port may use the cluster.",
)
AUTH_TOKEN: Variable[str] = Variable(
    "TRACEDRAY_AUTH_TOKEN",
    str,
    lambda: "",
    "The cluster's token (`tracedray get-auth-token` on the head prints it). Unset: a head "
    "makes one; drivers and nodes read the session's token file.",
    secret=True,
)
TLS_CERT: Variable[Path | None] = Variable(
    "TRACEDRAY_TLS_CERT",
    _parse_existing_file,
    lambda: None,
    "PEM certificate of this node (with TRACEDRAY_TLS_KEY): every server and client of the "
    "cluster then speaks TLS.",
)
TLS_KEY: Variable[Path | None] = Variable(
    "TRACEDRAY_TLS_KEY",
    _parse_existing_file,
    lambda: None,
    "PEM private key of TRACEDRAY_TLS_CERT.",
)
TLS_CA: Variable[Path | None] = Variable(
    "TRACEDRAY_TLS_CA",
    _parse_existing_file,
    lambda: None,
    "PEM CA certificate(s) that peers' certificates must be signed by; with it, TLS is mutual.",
)


def _parse_byte_count(text: str) -> int:
    return _parse_positive_int(text) or 1  # never None: it raises below 1


LOG_ROTATION_BYTES: Variable[int] = Variable(
    "TRACEDRAY_LOG_ROTATION_BYTES",
    _parse_byte_count,
    lambda: 2 << 20,
    "A session's log or trace file (logs/*.jsonl, traces/*.jsonl) that reaches this many "
    "bytes is rotated into a numbered part, compressed later (docs/trace-store.md); "
    "default 2 MiB. Ray's RAY_ROTATION_MAX_BYTES is read when this is unset.",
    fallbacks=("RAY_ROTATION_MAX_BYTES",),
)
LOG_ROTATION_BACKUP_COUNT: Variable[int] = Variable(
    "TRACEDRAY_LOG_ROTATION_BACKUP_COUNT",
    _parse_non_negative_int,
    lambda: 1000,
    "How many rotated parts of one file are kept; older ones are dropped (0: none kept). "
    "Ray's RAY_ROTATION_BACKUP_COUNT is read when this is unset.",
    fallbacks=("RAY_ROTATION_BACKUP_COUNT",),
)
LOG_ROTATION_COMPRESS_DELAY_S: Variable[float] = Variable(
    "TRACEDRAY_LOG_ROTATION_COMPRESS_DELAY_S",
    _parse_non_negative_float,
    lambda: 30.0,
    "A rotated part stays plain this long before it is compressed (zstd), so tools "
    "tailing the file (otelcol's filelog receiver, tail -F) finish reading it first.",
)
SESSION_MAX_BYTES: Variable[int] = Variable(
    "TRACEDRAY_SESSION_MAX_BYTES",
    _parse_byte_count,
    lambda: 8 << 30,
    "The most bytes a session's logs/ and traces/ folders keep on one machine; beyond it "
    "the oldest rotated parts are dropped (and logged). Default 8 GiB.",
)

CLI_PROGRESS_AFTER_S: Variable[float] = Variable(
    "TRACEDRAY_CLI_PROGRESS_AFTER_S",
    _parse_non_negative_float,
    lambda: 1.0,
    "A CLI command still working after this many seconds shows a spinner on stderr (only "
    "when stderr is a terminal, never with --format json); 0 shows it at once.",
)

ALL_VARIABLES: tuple[Variable[Any], ...] = (
    TEMP_DIR,
    ADDRESS,
    LOG_TO_DRIVER,
    INLINE_THRESHOLD,
    LEASE_LINGER_S,
    HEARTBEAT_INTERVAL_S,
    IDLE_WORKER_TIMEOUT_S,
    WORKER_REGISTER_TIMEOUT_S,
    IDLE_WORKER_SOFT_LIMIT,
    NODE_DEATH_TIMEOUT_S,
    JAEGER_URL,
    TRACE_FILES,
    GCS_STORAGE,
    GCS_FLUSH_ENABLED,
    GCS_FLUSH_INTERVAL_S,
    GCS_FLUSH_MAX_HOT_ENTRIES,
    GCS_FLUSH_MAX_LIVE_ENTRIES,
    GCS_FLUSH_MIN_AGE_S,
    GCS_RECONNECT_TIMEOUT_S,
    GCS_REDIS_RETRY_TIMEOUT_S,
    GCS_REDIS_BACKOFF_MAX_S,
    LOG_LEVEL,
    LOCALITY_AWARE,
    FAKE_PACKAGE_VERSIONS,
    TELEMETRY_MAPPED_FILES,
    TELEMETRY_AGENT_INTERVAL_S,
    TELEMETRY_AGENT_MAX_DEFER_S,
    OTLP_EXPORT_LINGER_S,
    LOG_ROTATION_BYTES,
    LOG_ROTATION_BACKUP_COUNT,
    LOG_ROTATION_COMPRESS_DELAY_S,
    SESSION_MAX_BYTES,
    CLI_PROGRESS_AFTER_S,
    METRICS_ENABLED,
    METRICS_EXPORT_PORT,
    AUTH_MODE,
    AUTH_TOKEN,
    TLS_CERT,
    TLS_KEY,
    TLS_CA,
)
