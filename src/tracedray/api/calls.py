"""The Ray-compatible API: init, shutdown, get, put, wait, kill, get_actor, cancel, ...

``init`` picks the process's runtime (``runtime.py``); every other call checks the
user's arguments here and then makes one call on that runtime."""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tracedray import config, logs, telemetry
from tracedray._proto.v1 import gcs_pb2
from tracedray.api import exit_hook, runtime
from tracedray.api.actor import ActorHandle
from tracedray.api.runtime import Runtime, global_runtime
from tracedray.core import auth, ids, node, object_ref, session
from tracedray.core.address import parse_host_port
from tracedray.core.object_ref import ObjectRef
from tracedray.exceptions import (
    AuthenticationError,
    ClusterConnectionError,
    ConfigError,
    RaySystemError,
)
from tracedray.telemetry import endpoint_check
from tracedray.telemetry._host import advertise_ip

log = logs.get_logger("tracedray.core.api")  # the logger its lines name (the record)

# Ray keywords that have no meaning here: accepted and ignored with a debug log.
RAY_ONLY_KEYWORDS = frozenset({
    "include_dashboard", "dashboard_host", "dashboard_port", "_system_config", "runtime_env",
    "configure_logging", "logging_level", "logging_format", "log_to_driver", "_temp_dir",
    "num_gpus", "_node_ip_address", "storage", "_plasma_directory",
    "enable_object_reconstruction", "_redis_password", "job_config",
    "_enable_object_reconstruction",
})


@dataclass
class _Cluster:
    runtime: Runtime
    processes: node.NodeProcesses | None
    session: session.SessionPaths
    gcs_address: str
    namespace: str


_cluster: _Cluster | None = None
_init_lock = threading.RLock()


def is_initialized() -> bool:
    return _cluster is not None


def init(address: str | None = None, *, num_cpus: float | None = None,
         resources: dict[str, float] | None = None, object_store_memory: int | None = None,
         namespace: str | None = None, object_spilling: bool = True, local_mode: bool = False,
         ignore_reinit_error: bool = False, _metrics_export_port: int | None = None,
         _auth_token: str | None = None, **kwargs: Any) -> dict[str, Any]:
    """Start a local cluster, or connect to one (``"auto"``, ``"host:port"``).

    ``_auth_token``: the cluster's token. A new cluster makes one unless given (or
    ``TRACEDRAY_AUTH_TOKEN``); connecting, it defaults to that variable, then to the
    token file of the local session at that address (``core/auth.py``).
    """
    global _cluster
    unknown = set(kwargs) - RAY_ONLY_KEYWORDS
    if unknown:
        raise ConfigError(f"init() got unknown keyword(s) {sorted(unknown)}")
    if namespace is not None and not isinstance(namespace, str):
        raise TypeError(f"init(namespace=...) must be None or a string, got "
                        f"{type(namespace).__name__}")
    if namespace == "":
        raise ConfigError('"" is not a valid namespace. Pass None to not specify a namespace.')
    with _init_lock:
        if _cluster is not None:
            if ignore_reinit_error:
                return _context_info()
            raise RaySystemError("tracedray.init() was called twice; call shutdown() first "
                                 "or pass ignore_reinit_error=True")
        if local_mode:
            from tracedray.api.local_mode import LOCAL_ADDRESS, start_local_mode

            rt, paths, ns = start_local_mode(namespace or "")
            _cluster = _Cluster(rt, None, paths, LOCAL_ADDRESS, ns)
            return _context_info()
        if "log_to_driver" in kwargs:
            os.environ[config.LOG_TO_DRIVER.name] = "1" if kwargs["log_to_driver"] else "0"
        telemetry_ready = False
        if address is None:
            address = config.ADDRESS.get() or None
        processes = None
        created: session.SessionPaths | None = None  # a folder this call made, unpublished
        if address in (None, "local"):
            _configure_auth(auth.choose_for_new_cluster(_auth_token))
            paths = created = session.create_session(publish=False)
            _configure_driver_telemetry(paths)
            telemetry_ready = True
            try:
                processes = node.start_head(paths, num_cpus=num_cpus, resources=resources,
                                            object_store_memory=object_store_memory,
                                            spilling=object_spilling, parent_pid=os.getpid(),
                                            storage=config.GCS_STORAGE.get(),
                                            metrics_export_port=_metrics_export_port)
            except BaseException:
                _forget_session(created)
                auth.reset()
                raise
            gcs_address = processes.gcs_address
        else:
            found: session.SessionPaths | None
            if address == "auto":
                found = session.latest_session()
                gcs_address = found.read_address()
            else:
                gcs_address = _normalize_address(address)
                found = session.session_for_address(gcs_address)
            for given, name in ((num_cpus, "num_cpus"), (resources, "resources"),
                                (object_store_memory, "object_store_memory"),
                                (_metrics_export_port, "_metrics_export_port")):
                if given is not None:
                    raise ConfigError(f"{name} cannot be set when connecting to an existing "
                                      f"cluster at {gcs_address}; set it on `tracedray start`")
            _configure_auth(_token_to_connect(gcs_address, _auth_token))
            # A cluster no local folder names (another machine's) gets one of this driver's.
            paths = found or session.create_session(publish=False)
            created = None if found is not None else paths
        try:
            if not telemetry_ready:
                _configure_driver_telemetry(paths)
            _cluster = _connect_driver(gcs_address, paths, processes, namespace)
        except BaseException:
            if processes is not None:
                processes.stop()
            _forget_session(created)
            auth.reset()
            raise
        if created is not None:
            session.publish_latest(created)
    for key in sorted(set(kwargs) & RAY_ONLY_KEYWORDS):
        log.debug("init.ignored_keyword", keyword=key)
    return _context_info()


def _token_to_connect(gcs_address: str, explicit: str | None) -> auth.TokenChoice:
    """The token for the cluster at ``gcs_address``. None found and the cluster answers
    without one: it runs with TRACEDRAY_AUTH_MODE=disabled, so this driver too (else its
    own server would refuse the cluster's calls)."""
    choice = auth.find_token(gcs_address, explicit)
    if choice.token is not None or not auth.enabled_by_config():
        return choice
    from tracedray.core.gcs.client import connect

    try:
        connect(gcs_address).get_nodes()  # a missing cluster: its ClusterConnectionError
    except AuthenticationError:  # it wants a token: connecting says so, with its advice
        return choice
    log.warning("auth.cluster_open", gcs=gcs_address,
                hint="the cluster checks no token (TRACEDRAY_AUTH_MODE=disabled there)")
    return auth.TokenChoice(None, "disabled")


def _configure_auth(choice: auth.TokenChoice) -> None:
    if auth.enabled_by_config() and choice.source != "disabled":
        auth.configure(choice.token, enabled=True, source=choice.source)
    else:
        auth.configure(None, enabled=False)


def _forget_session(created: session.SessionPaths | None) -> None:
    """Leave no trace of a failed ``init()``: its folder goes, ``session_latest`` was
    never moved, and this process's telemetry no longer points into the folder."""
    if created is None:
        return
    telemetry.configure("driver", session_dir=None)
    logs.configure("driver", session_dir=None)
    session.discard(created)


def _normalize_address(address: str) -> str:
    text = address.removeprefix("tracedray://").removeprefix("ray://")
    try:
        host, port = parse_host_port(text)
    except ValueError as exc:
        raise ConfigError(f"init(address={address!r}): {exc}; use 'auto', 'local' or "
                          "'host:port' of a head started with `tracedray start --head`") from exc
    return f"{host}:{port}"


def _configure_driver_telemetry(paths: session.SessionPaths) -> None:
    telemetry.configure("driver", session_dir=paths.root, session_id=paths.session_id)
    logs.configure("driver", session_dir=paths.root, session_id=paths.session_id,
                   config={"argv": sys.argv})
    # The agents export; the driver only says so, once, when its endpoint is dead.
    endpoint_check.check_in_background(log=lambda event, fields: log.warning(event, **fields))


def _connect_driver(gcs_address: str, paths: session.SessionPaths,
                    processes: node.NodeProcesses | None, namespace: str | None) -> _Cluster:
    from tracedray.api.cluster_runtime import ClusterRuntime
    from tracedray.core.gcs.client import connect
    from tracedray.core.process import freeze_startup_objects
    from tracedray.core.protocol.raylet_client import RayletClient
    from tracedray.core.raylet.telemetry_agent import start_for_driver
    from tracedray.core.worker.core_worker import CoreWorker

    gcs = connect(gcs_address)
    if processes is not None:
        raylet_address, node_id = processes.raylet_address, processes.node_id
    else:
        raylet_address, node_id = node.find_local_raylet(gcs_address)
        # No agent of this machine may export this session folder (a remote head's):
        # then one exports this driver's files, during and after its life.
        start_for_driver(paths.root)
    worker_id = ids.new_worker_id()
    registration = RayletClient(raylet_address).register_worker(worker_id, 0, os.getpid(),
                                                                is_driver=True)
    job_id = ids.new_job_id()
    ns = namespace if namespace is not None else f"anonymous-{job_id.hex()}"
    worker = CoreWorker(mode="driver", gcs_address=gcs_address, raylet_address=raylet_address,
                        node_id=node_id, ip=registration.ip or "127.0.0.1", worker_id=worker_id,
                        job_id=job_id, session_dir=paths.root,
                        object_path_prefix=registration.object_path_prefix, namespace=ns,
                        listen_host=registration.ip or "127.0.0.1")
    # Register again with the real port, now that the driver's server listens, and the
    # job: if this process dies without finishing it, the raylet tells the GCS.
    RayletClient(raylet_address).register_worker(worker_id, worker.address.port, os.getpid(),
                                                 is_driver=True, job_id=job_id)
    gcs.register_job(gcs_pb2.JobInfo(job_id=job_id, driver=worker.address.to_proto(),
                                     start_time=time.time(), entrypoint=" ".join(sys.argv),
                                     namespace=ns))
    # The driver speaks for its node now: its lines and spans carry the node's advertised
    # address (as a worker's do), not the default route's.
    if registration.ip:
        advertise_ip(registration.ip)
        logs.configure("driver", session_dir=paths.root, session_id=paths.session_id,
                       node_id=node_id)
    logs.set_process_context(job_id=job_id.hex(), node_id=node_id, worker_id=worker_id)
    # Now that the driver knows its node, its spans say so (resource tracedray.node.id),
    # as every other process's do: the CLI groups spans by node.
    telemetry.configure("driver", session_dir=paths.root, session_id=paths.session_id,
                        node_id=node_id)
    rt = ClusterRuntime(worker)
    runtime.set_current(rt)
    freeze_startup_objects()
    log.info("driver.connected", gcs=gcs_address, raylet=raylet_address, job_id=job_id.hex(),
             session=str(paths.root))
    return _Cluster(rt, processes, paths, gcs_address, ns)


def shutdown() -> None:
    global _cluster
    with _init_lock:
        cluster, _cluster = _cluster, None
        if cluster is None:
            return
        rt = cluster.runtime
        runtime.set_current(None)
        try:
            if cluster.processes is None:
                rt.finish_job()
        except RaySystemError as exc:
            log.warning("job.finish_failed", error=str(exc))
        rt.shutdown()
        if cluster.processes is not None:
            cluster.processes.stop()
        from tracedray.core import rpc

        rpc.close_all_channels()
        auth.reset()
        telemetry.force_flush()
        log.info("driver.shutdown")
        # The job is over (the next init() starts another). The node id stays: this
        # process still ran there, and its process.exit line says so.
        logs.set_process_context(job_id="")


# Not atexit: that runs after Python joined the thread pools (exit_hook says why).
exit_hook.run_before_thread_joins(shutdown)


def current_session_dir() -> Path | None:
    """The session folder of the cluster this process is connected to, if any."""
    return _cluster.session.root if _cluster is not None else None


def _context_info() -> dict[str, Any]:
    assert _cluster is not None
    return {"address": _cluster.gcs_address, "session_dir": str(_cluster.session.root),
            "namespace": _cluster.namespace, "node_id": _cluster.runtime.node_id}


def init_unless_initialized() -> None:
    """``init()`` with its defaults, unless a runtime is set (``runtime.global_runtime``)."""
    with _init_lock:
        if runtime.current_runtime() is None:
            init()


def global_worker() -> Any:
    """The current runtime's worker (the ``CoreWorker`` in a cluster), for tools and tests."""
    return global_runtime().worker


# --- objects
def put(value: Any, *, _owner: Any = None) -> ObjectRef:
    if isinstance(value, ObjectRef):
        raise TypeError("calling put() on an ObjectRef is not allowed (it is already stored)")
    return global_runtime().put(value)


def get(object_refs: ObjectRef | Sequence[ObjectRef], *, timeout: float | None = None) -> Any:
    single = isinstance(object_refs, ObjectRef)
    refs: Any = [object_refs] if single else object_refs
    if not isinstance(refs, list | tuple) or not all(isinstance(r, ObjectRef) for r in refs):
        raise TypeError(f"get() takes an ObjectRef or a list of ObjectRefs, got "
                        f"{type(object_refs).__name__}"
                        + (" (did you forget .remote()?)" if not single else ""))
    if timeout is not None and timeout < 0:
        raise ValueError(f"timeout must be >= 0 or None, got {timeout}")
    values = global_runtime().get(refs, timeout)
    return values[0] if single else values


object_ref.set_resolver(get)


def wait(object_refs: Sequence[ObjectRef], *, num_returns: int = 1,
         timeout: float | None = None, fetch_local: bool = True
         ) -> tuple[list[ObjectRef], list[ObjectRef]]:
    if isinstance(object_refs, ObjectRef) or not isinstance(object_refs, list | tuple):
        raise TypeError("wait() expects a list of ObjectRefs")
    if not object_refs:
        return [], []  # as Ray: nothing to wait for, whatever num_returns says
    if not all(isinstance(r, ObjectRef) for r in object_refs):
        raise TypeError("wait() expects a list of ObjectRefs")
    if len(set(object_refs)) != len(object_refs):
        raise ValueError("wait() got duplicate ObjectRefs")
    if not 0 <= num_returns <= len(object_refs):
        raise ValueError(f"num_returns must be between 0 and {len(object_refs)}, "
                         f"got {num_returns}")
    return global_runtime().wait(object_refs, num_returns, timeout)


def cancel(object_ref: ObjectRef, *, force: bool = False, recursive: bool = True) -> None:
    if not isinstance(object_ref, ObjectRef):
        raise TypeError(f"cancel() takes an ObjectRef, got {type(object_ref).__name__}")
    global_runtime().cancel(object_ref, force, recursive)


# --- actors
def kill(actor: Any, *, no_restart: bool = True) -> None:
    if not isinstance(actor, ActorHandle):
        raise TypeError(f"kill() takes an actor handle, got {type(actor).__name__}")
    global_runtime().kill(actor._actor_id, no_restart)


def get_actor(name: str, namespace: str | None = None) -> Any:
    if not isinstance(name, str) or not name:
        raise ValueError("get_actor() needs a non-empty actor name")
    rt = global_runtime()
    ns = namespace if namespace is not None else rt.namespace
    # Ray's wording first: programs and their tests match on it. Only the GCS's answer
    # "none" is "no such actor": an unreachable GCS raises GcsUnavailableError (after
    # waiting out a restart), it does not say that the actor does not exist.
    info = rt.actor_info(name, ns)
    if info is None:
        raise ValueError(f"Failed to look up actor with name {name!r} in namespace {ns!r}: "
                         "no such actor (it may not exist, or live in another namespace)")
    if info.state == "DEAD":
        raise ValueError(f"Failed to look up actor with name {name!r} in namespace {ns!r}: "
                         f"the actor is dead: {info.death_cause}")
    return ActorHandle._from_info(info)


# --- cluster info
def nodes() -> list[dict[str, Any]]:
    out = []
    for entry in global_runtime().node_table():
        info = entry.info
        out.append({"NodeID": info.node_id, "Alive": info.state == "ALIVE",
                    "NodeManagerAddress": info.raylet.ip, "NodeManagerPort": info.raylet.port,
                    "Resources": dict(info.resources_total), "NodeName": info.hostname,
                    "IsHead": info.is_head, "state": info.state,
                    "DeathReason": info.death_reason})
    return out


def cluster_resources() -> dict[str, float]:
    total: dict[str, float] = {}
    for entry in global_runtime().node_table():
        if entry.info.state == "ALIVE":
            for name, amount in entry.info.resources_total.items():
                total[name] = total.get(name, 0.0) + amount
    return total


def available_resources() -> dict[str, float]:
    total: dict[str, float] = {}
    for entry in global_runtime().node_table():
        if entry.info.state == "ALIVE":
            for name, amount in entry.resources_available.items():
                total[name] = total.get(name, 0.0) + amount
    return {k: v for k, v in total.items() if v > 0}


def _require_cluster() -> _Cluster:
    if _cluster is None:
        raise ClusterConnectionError("tracedray is not initialized; call tracedray.init()")
    return _cluster
