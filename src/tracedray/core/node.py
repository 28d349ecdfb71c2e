"""Starting and stopping a node's processes (GCS on the head, a raylet on every node)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from tracedray import config, logs
from tracedray.core import auth, ids
from tracedray.core.gcs.launch import GcsLaunchSpec
from tracedray.core.gcs.storage.policy import FlushPolicy
from tracedray.core.gcs.storage.url import parse_storage_url
from tracedray.core.process import terminate
from tracedray.core.session import SessionPaths, write_private
from tracedray.exceptions import (
    AuthenticationError,
    ClusterConnectionError,
    ConfigError,
    RayError,
    RaySystemError,
)
from tracedray.telemetry import trace_index

log = logs.get_logger(__name__)
STARTUP_TIMEOUT_S = 60.0


def default_object_store_memory() -> int:
    """30% of RAM, capped by what /dev/shm can hold (as Ray does)."""
    memory = int(psutil.virtual_memory().total * 0.3)
    try:
        shm = os.statvfs("/dev/shm")
        memory = min(memory, int(shm.f_bavail * shm.f_frsize * 0.95))
    except OSError:
        pass
    return max(memory, 64 << 20)


@dataclass
class NodeProcesses:
    session: SessionPaths
    gcs_address: str
    raylet_address: str
    node_id: str
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)
    owns_gcs: bool = False  # the GCS is among ``processes`` (a head this process started)

    def stop(self, timeout_s: float = 5.0, shm_dir: Path = Path("/dev/shm")) -> None:
        """Raylet first (it stops its workers and cleans its store), then the GCS.

        A raylet killed at the end of its grace (a loaded machine, workers slow to go)
        could not remove its store's files: they are swept here, by its naming rule."""
        from tracedray.core.object_store.files import remove_orphans, store_name_prefix

        killed = [process.pid for process in reversed(self.processes)
                  if terminate(process, timeout_s)]
        swept = remove_orphans(shm_dir, store_name_prefix(self.session.root, self.node_id))
        # Their tokens went with them: a later cluster on a reused port has its own.
        auth.forget(self.raylet_address)
        if self.owns_gcs:
            auth.forget(self.gcs_address)
        if killed or swept:
            log.warning("node.stop_forced", node_id=self.node_id, killed_pids=killed,
                        shm_files_removed=swept,
                        meaning="a process did not stop within its grace and was killed; "
                                "its node's shared-memory files were removed for it")


# The GCS's allocator: glibc gives each thread that allocates under contention an arena of
# its own (up to 8 per core), and memory freed in one is rarely returned; the GCS's
# 128 RPC threads would each keep a burst's worth. Two arenas keep its RSS near what it
# holds (benchmarks/gcs_flush.py --burst); a value the user set is left alone.
GCS_ALLOCATOR_ENV = {"MALLOC_ARENA_MAX": "2"}


def _spawn(module: str, args: list[str], log_name: str, session: SessionPaths,
           detach: bool, settings: auth.AuthSettings | None = None,
           defaults: Mapping[str, str] | None = None) -> subprocess.Popen[bytes]:
    stderr_path = session.logs_dir / f"{log_name}.stderr"
    fd = os.open(stderr_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    env = auth_environment(os.environ, settings or auth.current())
    for name, value in (defaults or {}).items():
        env.setdefault(name, value)
    with os.fdopen(fd, "ab") as stderr:
        return subprocess.Popen([sys.executable, "-m", module, *args], stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=stderr, close_fds=True,
                                start_new_session=detach, env=env)


def auth_environment(environ: Mapping[str, str],
                     settings: auth.AuthSettings) -> dict[str, str]:
    """``environ`` with ``settings``, for the processes a node starts (they take the
    token from there: ``process.setup_process``)."""
    env = dict(environ)
    if not settings.enabled:
        env[config.AUTH_MODE.name] = "disabled"
        env.pop(config.AUTH_TOKEN.name, None)
    elif settings.token is not None:
        env[config.AUTH_TOKEN.name] = settings.token
    return env


def _wait_ready(path: Path, process: subprocess.Popen[bytes], what: str,
                session: SessionPaths) -> dict[str, object]:
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while time.monotonic() < deadline:
        if path.exists():
            data: dict[str, object] = json.loads(path.read_text())
            if "error" in data:
                raise _start_error(what, data)
            return data
        if process.poll() is not None:
            stderr = (session.logs_dir / f"{what}.stderr")
            tail = stderr.read_text()[-2000:] if stderr.exists() else ""
            raise RaySystemError(f"the {what} exited during start-up (code {process.returncode})"
                                 f"\n{tail}")
        time.sleep(0.02)
    raise RaySystemError(f"the {what} did not become ready in {STARTUP_TIMEOUT_S:.0f}s")


def _start_error(what: str, data: dict[str, object]) -> RayError:
    """The error a process reported in its ready file, as the tracedray type it raised.

    Only configuration and connection errors keep their type (a bad or unreachable
    ``--gcs-storage`` URL must reach ``init()``/``tracedray start`` as such); anything
    else is a system error of the component.
    """
    message = str(data["error"])
    kind = data.get("error_type")
    if kind == ConfigError.__name__:
        return ConfigError(message)
    if kind == ClusterConnectionError.__name__:
        return ClusterConnectionError(message)
    if kind == AuthenticationError.__name__:
        return AuthenticationError(message)
    return RaySystemError(f"the {what} failed to start: {message}")


def launch_gcs(spec: GcsLaunchSpec, *, parent_pid: int, detach: bool,
               settings: auth.AuthSettings | None = None,
               ) -> tuple[subprocess.Popen[bytes], int]:
    """Start a GCS process and wait until it answers; returns it and its bound port.

    Used for the first start and by the supervisor for restarts (same spec, same port).
    """
    session = SessionPaths(spec.session_dir)
    spec.ready_file.unlink(missing_ok=True)
    process = _spawn("tracedray.core.gcs.main", spec.argv(parent_pid=parent_pid), "gcs", session,
                     detach, settings, defaults=GCS_ALLOCATOR_ENV)
    try:
        data = _wait_ready(spec.ready_file, process, "gcs", session)
    except BaseException:
        if process.poll() is None:
            process.kill()
        process.wait()
        raise
    return process, int(str(data["port"]))


def start_gcs(session: SessionPaths, *, port: int, host: str, storage: str, parent_pid: int,
              detach: bool, flushing: bool = True,
              flush_policy: FlushPolicy | None = None,
              settings: auth.AuthSettings | None = None) -> tuple[subprocess.Popen[bytes], str]:
    # Fail on a malformed storage URL here, before any process starts.
    parse_storage_url(storage)
    spec = GcsLaunchSpec(session.root, host, port, storage, flushing,
                         flush_policy or FlushPolicy.from_config())
    process, bound = launch_gcs(spec, parent_pid=parent_pid, detach=detach, settings=settings)
    return process, f"{host}:{bound}"


def start_raylet(session: SessionPaths, *, gcs_address: str, ip: str, resources: dict[str, float],
                 object_store_memory: int, spilling: bool, head: bool, parent_pid: int,
                 detach: bool, prestart: int, port: int = 0, node_id: str | None = None,
                 supervise_gcs: tuple[GcsLaunchSpec, int] | None = None,
                 metrics_export_port: int | None = None,
                 settings: auth.AuthSettings | None = None,
                 ) -> tuple[subprocess.Popen[bytes], str, str]:
    """``supervise_gcs=(spec, gcs_pid)``: this raylet restarts that GCS when it dies.
    ``metrics_export_port``: of its /metrics (None: ``TRACEDRAY_METRICS_EXPORT_PORT``)."""
    node_id = node_id or ids.new_node_id()
    ready = session.root / f"raylet-{node_id}.ready"
    args = ["--session-dir", str(session.root), "--gcs", gcs_address, "--node-id", node_id,
            "--ip", ip, "--port", str(port), "--resources", json.dumps(resources),
            "--object-store-memory", str(object_store_memory), "--prestart", str(prestart),
            "--parent-pid", str(parent_pid), "--ready-file", str(ready)]
    if not spilling:
        args.append("--no-spilling")
    if metrics_export_port is not None:
        args += ["--metrics-export-port", str(metrics_export_port)]
    if head:
        args.append("--head")
    if supervise_gcs is not None:
        spec, gcs_pid = supervise_gcs
        args += ["--supervise-gcs", spec.to_json(), "--gcs-pid", str(gcs_pid)]
    # The session's (empty) trace index exists before the node's agent starts, so that
    # readers know the session is indexed; made here, the raylet never loads sqlite.
    warning = trace_index.create_index(session.root)
    if warning:
        log.warning("telemetry.index_unavailable", detail=warning)
    process = _spawn("tracedray.core.raylet.main", args, f"raylet-{node_id[:8]}", session, detach,
                     settings)
    data = _wait_ready(ready, process, f"raylet-{node_id[:8]}", session)
    return process, str(data["address"]), node_id


def head_auth() -> auth.AuthSettings:
    """The settings a new cluster's processes get: this process's if it set them (a
    driver's ``init()``, ``tracedray start``), else the environment's token or a new one."""
    settings = auth.current()
    if not settings.enabled or settings.token is not None:
        return settings
    choice = auth.choose_for_new_cluster(None)
    return auth.AuthSettings(True, choice.token, choice.source)


def join_auth(gcs_address: str) -> auth.AuthSettings:
    """The settings a joining node's processes get: the token this process presents to
    the cluster at ``gcs_address``."""
    if not auth.current().enabled:
        return auth.AuthSettings(False, None)
    choice = auth.client_token(gcs_address)
    return auth.AuthSettings(True, choice.token, choice.source)


def _remember(settings: auth.AuthSettings, *addresses: str) -> None:
    """This process may call what it started (a test, a script), even once it has no
    driver connected: it knows their token."""
    if settings.enabled:
        for address in addresses:
            auth.remember(address, auth.TokenChoice(settings.token, settings.source))


def resolve_resources(num_cpus: float | None,
                      resources: dict[str, float] | None) -> dict[str, float]:
    cpus = num_cpus if num_cpus is not None else os.cpu_count() or 1
    total: dict[str, float] = {"CPU": float(cpus)}
    for name, amount in (resources or {}).items():
        if name in ("CPU", "GPU") and name in total and num_cpus is not None:
            raise ConfigError(f"give CPU with num_cpus=, not in resources ({name})")
        if not isinstance(amount, int | float) or amount < 0:
            raise ConfigError(f"resource {name!r} must be a non-negative number, got {amount!r}")
        total[name] = float(amount)
    if total["CPU"] < 0:
        raise ConfigError(f"num_cpus must be >= 0, got {num_cpus}")
    total.setdefault("memory", float(psutil.virtual_memory().total))
    return total


def start_head(session: SessionPaths, *, port: int = 0, host: str = "127.0.0.1",
               num_cpus: float | None = None, resources: dict[str, float] | None = None,
               object_store_memory: int | None = None, spilling: bool = True,
               storage: str = "memory", parent_pid: int = 0, detach: bool = False,
               flushing: bool | None = None, flush_policy: FlushPolicy | None = None,
               supervise_gcs: bool = True,
               metrics_export_port: int | None = None,
               auth_settings: auth.AuthSettings | None = None) -> NodeProcesses:
    """Start the GCS, then the head raylet, which supervises the GCS (restarts it on the
    same port if it dies) unless ``supervise_gcs=False``.

    ``storage``: ``"memory"`` or a Redis URL; a malformed one raises ``ConfigError``,
    an unreachable Redis ``ClusterConnectionError``, both naming the URL.
    ``flushing``, ``flush_policy``: default to the ``TRACEDRAY_GCS_FLUSH_*`` variables.
    ``auth_settings``: what the cluster's processes expect (default: :func:`head_auth`).
    """
    if flushing is None:
        flushing = config.GCS_FLUSH_ENABLED.get()
    settings = auth_settings or head_auth()
    if settings.enabled and settings.token is not None:
        # Before any process starts: a CLI or driver of this user finds it here.
        auth.store_token(settings.token, session.root, user_file=False)
    total = resolve_resources(num_cpus, resources)
    store = object_store_memory or default_object_store_memory()
    policy = flush_policy or FlushPolicy.from_config()
    gcs_process, gcs_address = start_gcs(session, port=port, host=host, storage=storage,
                                         parent_pid=parent_pid, detach=detach, flushing=flushing,
                                         flush_policy=policy, settings=settings)
    auth.forget(gcs_address)  # a token this process kept for an earlier cluster there
    bound = int(gcs_address.rsplit(":", 1)[1])
    spec = GcsLaunchSpec(session.root, host, bound, storage, flushing, policy)
    try:
        raylet_process, raylet_address, node_id = start_raylet(
            session, gcs_address=gcs_address, ip=host, resources=total,
            object_store_memory=store, spilling=spilling, head=True, parent_pid=parent_pid,
            detach=detach, prestart=int(min(total["CPU"], 4)),
            supervise_gcs=(spec, gcs_process.pid) if supervise_gcs else None,
            metrics_export_port=metrics_export_port, settings=settings)
    except BaseException:
        gcs_process.kill()
        gcs_process.wait()
        raise
    write_private(session.address_file, gcs_address)
    _remember(settings, gcs_address, raylet_address)
    log.info("cluster.head_started", gcs=gcs_address, raylet=raylet_address, node_id=node_id)
    return NodeProcesses(session, gcs_address, raylet_address, node_id,
                         [gcs_process, raylet_process], owns_gcs=True)


def join_node(session: SessionPaths, gcs_address: str, *, host: str = "127.0.0.1",
              num_cpus: float | None = None, resources: dict[str, float] | None = None,
              object_store_memory: int | None = None, spilling: bool = True,
              parent_pid: int = 0, detach: bool = True,
              metrics_export_port: int | None = None,
              auth_settings: auth.AuthSettings | None = None) -> NodeProcesses:
    """``auth_settings``: the token to present (default: :func:`join_auth`)."""
    from tracedray.core.gcs.client import connect

    settings = auth_settings or join_auth(gcs_address)
    if settings.enabled:
        auth.remember(gcs_address, auth.TokenChoice(settings.token, settings.source))

    # Fail fast, naming the address, if no GCS answers there or it refuses our token
    # (AuthenticationError), before any process starts.
    connect(gcs_address).get_nodes()
    total = resolve_resources(num_cpus, resources)
    raylet_process, raylet_address, node_id = start_raylet(
        session, gcs_address=gcs_address, ip=host, resources=total,
        object_store_memory=object_store_memory or default_object_store_memory(),
        spilling=spilling, head=False, parent_pid=parent_pid, detach=detach,
        prestart=int(min(total["CPU"], 4)), metrics_export_port=metrics_export_port,
        settings=settings)
    _remember(settings, raylet_address)
    return NodeProcesses(session, gcs_address, raylet_address, node_id, [raylet_process])


def find_local_raylet(gcs_address: str, host_ip: str | None = None) -> tuple[str, str]:
    """(raylet address, node id) of an alive node on this machine, preferring the head."""
    from tracedray.core.gcs.client import connect

    gcs = connect(gcs_address)
    nodes = [n.info for n in gcs.get_nodes() if n.info.state == "ALIVE"]
    if not nodes:
        raise ClusterConnectionError(f"the cluster at {gcs_address} has no alive node")
    hostname = os.uname().nodename
    local = [n for n in nodes if n.hostname == hostname] or nodes
    local.sort(key=lambda n: not n.is_head)
    chosen = local[0]
    return f"{chosen.raylet.ip}:{chosen.raylet.port}", chosen.node_id
