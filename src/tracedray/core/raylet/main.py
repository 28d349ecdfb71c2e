"""Entry point of a raylet process: ``python -m tracedray.core.raylet.main``."""

from __future__ import annotations

import argparse
import json
import sys
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING

# structlog renders tracebacks with rich when it can import it; the raylet writes JSON lines
# only, so it never loads rich's ~70 modules (~4 MB of RSS; benchmarks/submission.py).
sys.modules.setdefault("rich", None)  # type: ignore[arg-type]

from tracedray import logs  # noqa: E402
from tracedray.core import allocator  # noqa: E402
from tracedray.core.process import exit_on_sigterm, exit_with_parent, setup_process  # noqa: E402
from tracedray.exceptions import AuthenticationError  # noqa: E402

if TYPE_CHECKING:
    from prometheus_client.core import Metric

    from tracedray.core.raylet.server import Raylet
    from tracedray.metrics.deferred import DeferredMetricsServer

# The raylet's malloc arenas: its RPC threads would each get one (glibc: up to 8 per
# core), each keeping what a burst freed in it; two keep its RSS near what it holds.
ARENAS = 2


def main() -> None:
    allocator.limit_arenas(ARENAS)  # first: before any thread starts
    parser = argparse.ArgumentParser(description="tracedray raylet")
    parser.add_argument("--session-dir", type=Path, required=True)
    parser.add_argument("--gcs", required=True)
    parser.add_argument("--node-id", required=True)
    parser.add_argument("--ip", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--resources", default="{}", help="JSON: name -> amount (incl. CPU)")
    parser.add_argument("--object-store-memory", type=int, required=True)
    parser.add_argument("--no-spilling", action="store_true")
    parser.add_argument("--head", action="store_true")
    parser.add_argument("--prestart", type=int, default=0)
    parser.add_argument("--parent-pid", type=int, default=0)
    parser.add_argument("--ready-file", type=Path, required=True)
    parser.add_argument("--supervise-gcs", default="",
                        help="JSON GcsLaunchSpec: restart that GCS when it dies (head only)")
    parser.add_argument("--gcs-pid", type=int, default=0)
    parser.add_argument("--metrics-export-port", type=int, default=None,
                        help="port of /metrics (default: $TRACEDRAY_METRICS_EXPORT_PORT, or "
                             "0: a free port)")
    args = parser.parse_args()
    setup_process("raylet", session_dir=args.session_dir, node_id=args.node_id,
                  config={"resources": args.resources, "gcs": args.gcs,
                          "object_store_memory": args.object_store_memory,
                          "spilling": not args.no_spilling},
                  ip=args.ip)
    from tracedray.core import auth, rpc
    from tracedray.core.raylet.server import Raylet
    from tracedray.metrics import serve as metrics

    try:
        auth.configure_from_environment()  # no token: a ConfigError, reported below
        # Before the raylet: its port goes into the node's registration.
        endpoint = metrics.open_deferred_endpoint(args.ip, args.metrics_export_port,
                                                  rpc.add_server_interceptor)
        raylet = Raylet(node_id=args.node_id, ip=args.ip, gcs_address=args.gcs,
                        session_dir=args.session_dir, resources=json.loads(args.resources),
                        object_store_memory=args.object_store_memory,
                        object_spilling=not args.no_spilling, is_head=args.head, port=args.port,
                        listen_host=args.ip,
                        metrics_export_port=endpoint.port if endpoint is not None else 0)
        if endpoint is not None:
            _attach_metrics(endpoint, raylet)
        raylet.start(prestart_workers=args.prestart)
    except Exception as exc:
        logs.get_logger(__name__).error("raylet.start_failed", error=str(exc))
        report = {"error": str(exc)}
        if isinstance(exc, AuthenticationError):  # the starter re-raises it as one
            report["error_type"] = type(exc).__name__
        args.ready_file.write_text(json.dumps(report))
        # sys.exit, not raise SystemExit: process.exit can tell the code (logs/_exit_status).
        sys.exit(1)
    on_exit = raylet.shutdown
    if args.supervise_gcs:
        from tracedray.core.gcs.launch import GcsLaunchSpec
        from tracedray.core.gcs.supervisor import GcsSupervisor

        supervisor = GcsSupervisor(GcsLaunchSpec.from_json(args.supervise_gcs), args.gcs_pid,
                                   owner_pid=args.parent_pid)
        supervisor.start()

        def on_exit() -> None:
            # Stop restarting first (the GCS may go down with us), shut the node down
            # while a GCS still answers, then stop the GCS we started, if any.
            supervisor.stop()
            raylet.shutdown()
            supervisor.close()

    exit_on_sigterm(on_exit)
    exit_with_parent(args.parent_pid, on_exit)
    tmp = args.ready_file.with_suffix(".tmp")
    tmp.write_text(json.dumps({"port": raylet.port, "node_id": args.node_id,
                               "address": raylet.address.target}))
    tmp.replace(args.ready_file)
    threading.Event().wait()


def _attach_metrics(endpoint: DeferredMetricsServer, raylet: Raylet) -> None:
    """Serve the raylet's metrics on ``endpoint``, loading their code on the first scrape."""
    from tracedray.metrics import serve

    def make_collect() -> Callable[[], Iterable[Metric]]:
        # Here, not at start: the collector's module imports prometheus-client.
        from tracedray.core.raylet import metrics as raylet_metrics

        return raylet_metrics.collector(raylet).collect

    serve.attach_deferred(endpoint, "raylet", make_collect, node_id=raylet.node_id,
                          session_name=raylet.session_dir.name)


if __name__ == "__main__":
    main()
