"""Entry point of a worker process, started by its raylet: a core worker under a
``ClusterRuntime``, the runtime its tasks' API calls go through (so it sits in the API
layer, above ``core/worker/``)."""

from __future__ import annotations

import argparse
import threading
from pathlib import Path

from tracedray.core.process import (
    exit_on_sigterm,
    exit_with_parent,
    freeze_startup_objects,
    setup_process,
)


def main() -> None:
    parser = argparse.ArgumentParser(description="tracedray worker")
    parser.add_argument("--gcs", required=True)
    parser.add_argument("--raylet", required=True)
    parser.add_argument("--node-id", required=True)
    parser.add_argument("--worker-id", required=True)
    parser.add_argument("--session-dir", type=Path, required=True)
    parser.add_argument("--ip", default="127.0.0.1")
    parser.add_argument("--object-path-prefix", required=True)
    parser.add_argument("--parent-pid", type=int, default=0)
    args = parser.parse_args()
    setup_process("worker", session_dir=args.session_dir, node_id=args.node_id, ip=args.ip)
    import tracedray.api.calls  # noqa: F401 - installs the get that ObjectRef.future() uses
    from tracedray import logs
    from tracedray.api import runtime
    from tracedray.api.cluster_runtime import ClusterRuntime
    from tracedray.core import auth
    from tracedray.core.worker.core_worker import CoreWorker

    logs.set_process_context(worker_id=args.worker_id)
    auth.configure_from_environment()  # its raylet passes the token on
    worker = CoreWorker(mode="worker", gcs_address=args.gcs, raylet_address=args.raylet,
                        node_id=args.node_id, ip=args.ip, worker_id=args.worker_id,
                        job_id=b"", session_dir=args.session_dir,
                        object_path_prefix=args.object_path_prefix, listen_host=args.ip)
    runtime.set_current(ClusterRuntime(worker))
    logs.install_output_capture(worker.output.forward)
    # The raylet stops its workers with SIGTERM: end the log with process.exit and the
    # spans flushed, like every other process (partial printed lines become records).
    exit_on_sigterm(logs.uninstall_output_capture)
    exit_with_parent(args.parent_pid)
    freeze_startup_objects()
    worker.raylet.register_worker(args.worker_id, worker.address.port, worker.address.pid,
                                  task_port=worker.address.task_port)
    threading.Event().wait()


if __name__ == "__main__":
    main()
