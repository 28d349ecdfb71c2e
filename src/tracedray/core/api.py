"""The Ray-compatible API: init, shutdown, get, put, wait, kill, get_actor, cancel, ..."""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tracedray import config, logs, telemetry
from tracedray.core import auth, exit_hook, ids, node, runtime, session
from tracedray.core.address import parse_host_port
from tracedray.core.call_site import user_call_site
from tracedray.core.object_ref import ObjectRef
from tracedray.core.serialization import serialize
from tracedray.core.worker.memory_store import is_error
from tracedray.exceptions import (
    AuthenticationError,
    ClusterConnectionError,
    ConfigError,
    GetTimeoutError,
    OwnerDiedError,
    RaySystemError,
)
from tracedray.telemetry import attributes as A
from tracedray.telemetry import endpoint_check
from tracedray.telemetry._host import advertise_ip
from tracedray.v1 import gcs_pb2

log = logs.get_logger(__name__)
# object.put and object.get spans (span_shape.py): a put's call site, where it went and
# its node are shared by every put from that line; a get's attributes are all its own.
# Ids go in as bytes (shown as hex): packed records (span_shape.py).
_PUT_SHAPES = telemetry.ShapeCache("object.put", (A.OBJECT_ID, A.OBJECT_SIZE),
                                   (A.OBJECT_CALL_SITE, A.OBJECT_LOCATION, A.NODE_ID),
                                   packing=ids.OBJECT_ID_PACKING + "q")
_GET_SHAPE = telemetry.SpanShape("object.get", (A.OBJECT_COUNT, A.OBJECT_ID, A.OBJECT_SIZE),
                                 packing="q" + ids.OBJECT_ID_PACKING + "q")

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
    worker: Any
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
            from tracedray.core.local_mode import start_local_mode

            _cluster = start_local_mode(namespace or "")
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
    from tracedray.core.gcs.client import connect
    from tracedray.core.raylet.client import RayletClient
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
    runtime.set_current(worker)
    log.info("driver.connected", gcs=gcs_address, raylet=raylet_address, job_id=job_id.hex(),
             session=str(paths.root))
    return _Cluster(worker, processes, paths, gcs_address, ns)


def shutdown() -> None:
    global _cluster
    with _init_lock:
        cluster, _cluster = _cluster, None
        if cluster is None:
            return
        worker = cluster.worker
        runtime.set_current(None)
        try:
            if hasattr(worker, "gcs") and cluster.processes is None:
                worker.gcs.finish_job(gcs_pb2.JobInfo(job_id=worker.job_id))
        except RaySystemError as exc:
            log.warning("job.finish_failed", error=str(exc))
        worker.shutdown()
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


def current_session_dir() -> Any:
    return _cluster.session.root if _cluster is not None else None


def _context_info() -> dict[str, Any]:
    assert _cluster is not None
    return {"address": _cluster.gcs_address, "session_dir": str(_cluster.session.root),
            "namespace": _cluster.namespace, "node_id": getattr(_cluster.worker, "node_id", "")}


def global_worker() -> Any:
    """The current core worker, starting a local cluster first if needed (as Ray does)."""
    worker = runtime.current()
    if worker is not None:
        return worker
    with _init_lock:
        if runtime.current() is None:
            init()
    worker = runtime.current()
    assert worker is not None
    return worker


# --- objects
def put(value: Any, *, _owner: Any = None) -> ObjectRef:
    if isinstance(value, ObjectRef):
        raise TypeError("calling put() on an ObjectRef is not allowed (it is already stored)")
    worker = global_worker()
    if hasattr(worker, "local_put"):
        return worker.local_put(value)
    site = user_call_site(2)
    object_id = ids.object_id_for(ids.new_task_id(), ids.PUT_INDEX_BASE)
    object_hex = object_id.hex()
    # A span recorded whole at the end, not span(): nothing below needs it as the
    # current context, and the SDK path costs ~3x as much (see telemetry._record).
    start_ns = time.time_ns()
    try:
        serialized = serialize(value, what="put() value")
        stored = worker.objects.to_value(object_id, serialized, call_site=site)
        ref = worker.new_owned_ref(object_id, site)
        worker.store_owned_value(stored, "FINISHED")
        for inner in stored.contained_refs:
            worker.add_captured(inner, object_id)
    except BaseException as exc:
        telemetry.record_span("object.put", {A.OBJECT_ID: object_hex, A.OBJECT_CALL_SITE: site},
                              start_ns=start_ns, error=exc)
        log.info("object.put", object_id=object_hex, call_site=site,
                 error_type=type(exc).__qualname__)
        raise
    location = "shm" if stored.store_node_id else "inline"
    if telemetry.enabled():
        telemetry.record_shaped_span(_PUT_SHAPES.get((site, location, worker.node_id)),
                                     (object_id, stored.size), start_ns=start_ns)
    log.info("object.put", object_id=object_hex, size=stored.size, location=location,
             call_site=site)
    return ref


def get(object_refs: ObjectRef | Sequence[ObjectRef], *, timeout: float | None = None) -> Any:
    single = isinstance(object_refs, ObjectRef)
    refs: Any = [object_refs] if single else object_refs
    if not isinstance(refs, list | tuple) or not all(isinstance(r, ObjectRef) for r in refs):
        raise TypeError(f"get() takes an ObjectRef or a list of ObjectRefs, got "
                        f"{type(object_refs).__name__}"
                        + (" (did you forget .remote()?)" if not single else ""))
    if timeout is not None and timeout < 0:
        raise ValueError(f"timeout must be >= 0 or None, got {timeout}")
    worker = global_worker()
    if hasattr(worker, "local_get"):
        values = [worker.local_get(r) for r in refs]
        return values[0] if single else values
    _refuse_stale(refs, worker)
    ids_ = [r.binary() for r in refs]
    first_hex = refs[0].hex() if refs else ""
    size: int | None = None  # known once every value is in
    start_ns = time.time_ns()  # object.get recorded whole at the end: see put()
    try:
        # As Ray's: an error among the values raises at once, not after the slowest.
        ready = worker.wait_values(ids_, len(set(ids_)), timeout, stop_on_error=True)
        if len(ready) < len(set(ids_)):
            for object_id in ids_:
                if object_id in ready:
                    error = worker.memory_store.get_if_ready(object_id)
                    if is_error(error):
                        worker.objects.load(error)  # raises it
            missing = [i.hex() for i in ids_ if i not in ready]
            raise GetTimeoutError(f"get() timed out after {timeout}s waiting for "
                                  f"{len(missing)} of {len(refs)} object(s), e.g. {missing[0]}")
        stored = [worker.memory_store.get_if_ready(object_id) for object_id in ids_]
        # Before loading: a stored error raises from load().
        size = sum(value.size for value in stored)
        values = [worker.objects.load(value) for value in stored]
    except BaseException as exc:
        attributes: dict[str, Any] = {A.OBJECT_COUNT: len(refs), A.OBJECT_ID: first_hex}
        if size is not None:
            attributes[A.OBJECT_SIZE] = size
        telemetry.record_span("object.get", attributes, start_ns=start_ns, error=exc)
        log.info("object.get", object_id=first_hex, count=len(refs), size=size or 0,
                 error_type=type(exc).__qualname__)
        raise
    if telemetry.enabled():
        telemetry.record_shaped_span(_GET_SHAPE, (len(refs), ids_[0] if ids_ else b"", size),
                                     start_ns=start_ns)
    log.info("object.get", object_id=first_hex, count=len(refs), size=size)
    return values[0] if single else values


def _refuse_stale(refs: Sequence[ObjectRef], worker: Any) -> None:
    """A ref made by an earlier connection of this process (before ``shutdown()`` and a
    new ``init()``) names an object nothing here will ever produce: fail at once."""
    for ref in refs:
        made_by = ref._worker
        if made_by is not None and made_by is not worker:
            raise OwnerDiedError(ref.hex(), "it was made before this process's last "
                                 "init(): it might be dead or it's from a different cluster")


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
    worker = global_worker()
    if hasattr(worker, "local_get"):
        return list(object_refs[:num_returns]), list(object_refs[num_returns:])
    _refuse_stale(object_refs, worker)
    ready_ids = worker.wait_values([r.binary() for r in object_refs], num_returns, timeout)
    ready = [r for r in object_refs if r.binary() in ready_ids][:num_returns]
    chosen = set(ready)
    return ready, [r for r in object_refs if r not in chosen]


def cancel(object_ref: ObjectRef, *, force: bool = False, recursive: bool = True) -> None:
    if not isinstance(object_ref, ObjectRef):
        raise TypeError(f"cancel() takes an ObjectRef, got {type(object_ref).__name__}")
    worker = global_worker()
    if not hasattr(worker, "submitter"):
        return
    task_id = object_ref.task_id().binary()
    if worker.submitter.cancel(task_id, force, recursive):
        return
    if force:
        if worker.actor_submitter.owns_call(task_id):
            raise ValueError("force=True is not supported for actor tasks.")
        return
    worker.actor_submitter.cancel(task_id)


# --- actors
def kill(actor: Any, *, no_restart: bool = True) -> None:
    from tracedray.core.actor import ActorHandle

    if not isinstance(actor, ActorHandle):
        raise TypeError(f"kill() takes an actor handle, got {type(actor).__name__}")
    worker = global_worker()
    worker.gcs.kill_actor(actor._actor_id, no_restart)
    if no_restart:
        worker.actor_submitter.mark_dead(actor._actor_id, "killed with tracedray.kill()")


def get_actor(name: str, namespace: str | None = None) -> Any:
    from tracedray.core.actor import ActorHandle

    if not isinstance(name, str) or not name:
        raise ValueError("get_actor() needs a non-empty actor name")
    worker = global_worker()
    ns = namespace if namespace is not None else worker.namespace
    # Ray's wording first: programs and their tests match on it.
    try:
        info = worker.gcs.get_actor(name=name, namespace=ns)
    except RaySystemError as exc:
        raise ValueError(f"Failed to look up actor with name {name!r} in namespace {ns!r}: "
                         "no such actor (it may not exist, or live in another "
                         "namespace)") from exc
    if info.state == "DEAD":
        raise ValueError(f"Failed to look up actor with name {name!r} in namespace {ns!r}: "
                         f"the actor is dead: {info.death_cause}")
    return ActorHandle._from_info(info)


# --- cluster info
def nodes() -> list[dict[str, Any]]:
    worker = global_worker()
    out = []
    for entry in worker.gcs.get_nodes():
        info = entry.info
        out.append({"NodeID": info.node_id, "Alive": info.state == "ALIVE",
                    "NodeManagerAddress": info.raylet.ip, "NodeManagerPort": info.raylet.port,
                    "Resources": dict(info.resources_total), "NodeName": info.hostname,
                    "IsHead": info.is_head, "state": info.state,
                    "DeathReason": info.death_reason})
    return out


def cluster_resources() -> dict[str, float]:
    total: dict[str, float] = {}
    for entry in global_worker().gcs.get_nodes():
        if entry.info.state == "ALIVE":
            for name, amount in entry.info.resources_total.items():
                total[name] = total.get(name, 0.0) + amount
    return total


def available_resources() -> dict[str, float]:
    total: dict[str, float] = {}
    for entry in global_worker().gcs.get_nodes():
        if entry.info.state == "ALIVE":
            for name, amount in entry.resources_available.items():
                total[name] = total.get(name, 0.0) + amount
    return {k: v for k, v in total.items() if v > 0}


def _require_cluster() -> _Cluster:
    if _cluster is None:
        raise ClusterConnectionError("tracedray is not initialized; call tracedray.init()")
    return _cluster
