"""An actor's creation when the GCS is SIGKILLed while its ``__init__`` runs.

A fresh 2-CPU cluster (embedded SQLite storage); each round creates an actor whose
``__init__`` takes ``--init-s``, waits until the raylet has granted it a worker, lets
``__init__`` run ``--kill-after-s``, SIGKILLs the GCS (the head raylet restarts it) and
times the first call on the actor from the kill. Reported per round: that time, the GCS
restart time (the supervisor's ``downtime_s``), the time after the GCS was back, and
whether the actor ended up on the worker granted before the kill (adopted) or on another.

Run: ``.venv/bin/python benchmarks/gcs_kill_mid_init.py [--rounds 8] [--json out.json]``
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from gcs_failover import gcs_pid, restart_downtime  # noqa: E402


def live_workers_of(actor_hex: str) -> list[int]:
    import tracedray.core.api

    stats = tracedray.core.api.global_worker().raylet.node_stats()
    return sorted(w.pid for w in stats.workers if w.actor_id == actor_hex and w.state != "DEAD")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--init-s", type=float, default=2.0)
    parser.add_argument("--kill-after-s", type=float, default=0.3)
    parser.add_argument("--json", default="")
    args = parser.parse_args()
    os.environ.setdefault("TRACEDRAY_LOG_TO_DRIVER", "0")
    import tracedray

    info = tracedray.init(num_cpus=2, object_store_memory=128 << 20)
    session_dir = info["session_dir"]
    init_s = args.init_s

    @tracedray.remote(num_cpus=1)
    class SlowInit:
        def __init__(self) -> None:
            time.sleep(init_s)

        def pid(self) -> int:
            return os.getpid()

    actor_class: Any = SlowInit
    rounds = []
    try:
        for _ in range(args.rounds):
            actor = actor_class.remote()
            actor_hex = actor._actor_id.hex()
            while not (granted := live_workers_of(actor_hex)):
                time.sleep(0.02)
            time.sleep(args.kill_after_s)
            old = gcs_pid(session_dir)
            assert old is not None
            killed_at = time.monotonic()
            os.kill(old, signal.SIGKILL)
            pid = tracedray.get(actor.pid.remote(), timeout=120)
            created_s = time.monotonic() - killed_at
            new = gcs_pid(session_dir)
            downtime = None
            while downtime is None and new is not None:
                downtime = restart_downtime(session_dir, new)
                time.sleep(0.05)
            assert downtime is not None
            rounds.append({"created_s": created_s, "restart_s": downtime,
                           "after_back_s": created_s - downtime,
                           "adopted": pid == granted[0]})
            print(f"created {created_s:.2f} s after the kill, GCS restart {downtime:.2f} s, "
                  f"{created_s - downtime:+.2f} s after it; "
                  f"{'adopted' if pid == granted[0] else 'another worker'}", flush=True)
            tracedray.kill(actor)
            while live_workers_of(actor_hex):
                time.sleep(0.05)
            time.sleep(1.0)
    finally:
        tracedray.shutdown()
    after = [r["after_back_s"] for r in rounds]
    print(f"\n{len(rounds)} rounds: created {statistics.median(after):+.2f} s "
          f"({min(after):+.2f}..{max(after):+.2f}) after the GCS was back; adopted "
          f"{sum(r['adopted'] for r in rounds)}/{len(rounds)}")
    if args.json:
        Path(args.json).write_text(json.dumps({"init_s": init_s, "rounds": rounds}, indent=1))


if __name__ == "__main__":
    main()
