"""Entry point of the GCS process: ``python -m tracedray.core.gcs.main``."""

from __future__ import annotations

import argparse
import json
import threading
from pathlib import Path

from tracedray import logs
from tracedray.core.process import exit_on_sigterm, exit_with_parent, setup_process


def main() -> None:
    parser = argparse.ArgumentParser(description="tracedray GCS")
    parser.add_argument("--session-dir", type=Path, required=True)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--storage", default="memory")
    parser.add_argument("--parent-pid", type=int, default=0)
    parser.add_argument("--ready-file", type=Path, required=True)
    parser.add_argument("--no-flush", action="store_true")
    args = parser.parse_args()
    setup_process("gcs", session_dir=args.session_dir,
                  config={"storage": args.storage, "port": args.port, "flush": not args.no_flush})
    from tracedray.core.gcs.server import Gcs

    try:
        gcs = Gcs(session_dir=args.session_dir, storage_url=args.storage, port=args.port,
                  listen_host=args.host, flushing=not args.no_flush)
    except Exception as exc:
        logs.get_logger(__name__).error("gcs.start_failed", error=str(exc))
        args.ready_file.write_text(json.dumps({"error": str(exc)}))
        raise SystemExit(1) from exc
    gcs.start()
    exit_on_sigterm(gcs.stop)
    exit_with_parent(args.parent_pid, gcs.stop)
    tmp = args.ready_file.with_suffix(".tmp")
    tmp.write_text(json.dumps({"port": gcs.port}))
    tmp.replace(args.ready_file)
    threading.Event().wait()


if __name__ == "__main__":
    main()
