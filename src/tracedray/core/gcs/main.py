"""Entry point of the GCS process: ``python -m tracedray.core.gcs.main``."""

from __future__ import annotations

import argparse
import json
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

# structlog renders tracebacks with rich when it can import it; the GCS writes JSON lines
# only, so it never loads rich's ~70 modules (~4 MB of RSS; benchmarks/submission.py).
sys.modules.setdefault("rich", None)  # type: ignore[arg-type]

from tracedray import config, logs  # noqa: E402
from tracedray.core.process import exit_on_sigterm, exit_with_parent, setup_process  # noqa: E402

if TYPE_CHECKING:
    from tracedray.metrics.exposition import MetricsServer

T = TypeVar("T")


def main() -> None:
    parser = argparse.ArgumentParser(description="tracedray GCS")
    parser.add_argument("--session-dir", type=Path, required=True)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--storage", default="memory")
    parser.add_argument("--parent-pid", type=int, default=0)
    parser.add_argument("--ready-file", type=Path, required=True)
    parser.add_argument("--no-flush", action="store_true")
    # Unset options fall back to the TRACEDRAY_GCS_FLUSH_* variables.
    parser.add_argument("--flush-interval", type=float, default=None)
    parser.add_argument("--flush-max-hot-entries", type=int, default=None)
    parser.add_argument("--flush-min-age", type=float, default=None)
    parser.add_argument("--flush-max-live-entries", type=int, default=None)
    args = parser.parse_args()
    setup_process("gcs", session_dir=args.session_dir,
                  config={"storage": args.storage, "port": args.port, "flush": not args.no_flush},
                  ip=args.host)
    from tracedray.core import auth
    from tracedray.core.gcs.server import Gcs
    from tracedray.core.gcs.storage import FlushPolicy

    # Before the GCS builds its server: its RPCs are timed (metrics/rpc_latency.py).
    endpoint = _open_metrics(args.host)
    try:
        auth.configure_from_environment()  # no token: a ConfigError, reported below
        policy = FlushPolicy(
            interval_s=_or(args.flush_interval, config.GCS_FLUSH_INTERVAL_S.get()),
            max_hot_entries=_or(args.flush_max_hot_entries,
                                config.GCS_FLUSH_MAX_HOT_ENTRIES.get()),
            min_age_s=_or(args.flush_min_age, config.GCS_FLUSH_MIN_AGE_S.get()),
            max_live_entries=_or(args.flush_max_live_entries,
                                 config.GCS_FLUSH_MAX_LIVE_ENTRIES.get()))
        gcs = Gcs(session_dir=args.session_dir, storage_url=args.storage, port=args.port,
                  listen_host=args.host, flush_policy=policy, flushing=not args.no_flush)
    except Exception as exc:
        logs.get_logger(__name__).error("gcs.start_failed", error=str(exc),
                                        error_type=type(exc).__name__)
        # The starter re-raises the same tracedray exception type (ConfigError for a bad
        # URL, ClusterConnectionError for an unreachable Redis) with this message.
        args.ready_file.write_text(json.dumps({"error": str(exc),
                                               "error_type": type(exc).__name__}))
        # sys.exit, not raise SystemExit: process.exit can tell the code (logs/_exit_status).
        sys.exit(1)
    gcs.start()
    on_exit = gcs.stop
    if endpoint is not None:
        from tracedray.core.gcs import metrics as gcs_metrics

        discovery = gcs_metrics.attach(endpoint, gcs, args.session_dir)

        def on_exit() -> None:
            gcs.stop()
            discovery.close()  # a stopped cluster has no targets left to scrape

    exit_on_sigterm(on_exit)
    exit_with_parent(args.parent_pid, on_exit)
    tmp = args.ready_file.with_suffix(".tmp")
    tmp.write_text(json.dumps({"port": gcs.port}))
    tmp.replace(args.ready_file)
    threading.Event().wait()


def _open_metrics(host: str) -> MetricsServer | None:
    """The GCS's /metrics (a free port); the GCS runs on without it."""
    from tracedray.core import rpc
    from tracedray.metrics import serve as metrics

    try:
        return metrics.open_endpoint(host, 0, rpc.add_server_interceptor)
    except Exception as exc:  # noqa: BLE001 - metrics never stop the cluster
        logs.get_logger(__name__).warning("metrics.start_failed", component="gcs",
                                          error=f"{type(exc).__name__}: {exc}")
        return None


def _or(given: T | None, fallback: T) -> T:
    return fallback if given is None else given


if __name__ == "__main__":
    main()
