"""An idle raylet's memory before and after its /metrics is scraped (3 scrapes, read 6 s
later: past the raylet's 5 s heap trim). One JSON line: {"idle": ..., "scraped": ...}.

Usage: python scraped.py   (PYTHONPATH=<tree>/src for another tree)
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.request

import tracedray as rt
from tracedray.api.calls import current_session_dir


def _empty() -> None:
    return None


def raylet_memory() -> dict[str, float]:
    listing = subprocess.run(["ps", "-o", "pid=,args=", "--ppid", str(os.getpid())],
                             capture_output=True, text=True).stdout
    for line in listing.splitlines():
        pid, command = line.strip().split(" ", 1)
        if "raylet.main" in command:
            found: dict[str, int] = {}
            with open(f"/proc/{pid}/smaps_rollup") as rollup:
                for row in rollup:
                    name, _, rest = row.partition(":")
                    if name in ("Rss", "Pss", "Private_Clean", "Private_Dirty"):
                        found[name] = int(rest.split()[0])
            return {"rss": found["Rss"] / 1024, "pss": found["Pss"] / 1024,
                    "uss": (found["Private_Clean"] + found["Private_Dirty"]) / 1024}
    raise RuntimeError("no raylet")


def raylet_target(session_dir: object) -> str:
    path = os.path.join(str(session_dir), "prometheus_sd.json")
    for _ in range(100):
        groups = []
        if os.path.exists(path):
            with open(path) as file:
                groups = json.load(file)
        targets = [g["targets"][0] for g in groups if g["labels"]["component"] == "raylet"]
        if targets:
            return str(targets[0])
        time.sleep(0.1)
    raise RuntimeError("the raylet is not in prometheus_sd.json")


def main() -> None:
    rt.init(num_cpus=2, object_store_memory=256 << 20)
    try:
        empty = rt.remote(_empty)
        rt.get([empty.remote() for _ in range(1000)])
        time.sleep(2)
        idle = raylet_memory()
        target = raylet_target(current_session_dir())
        for _ in range(3):
            urllib.request.urlopen(f"http://{target}/metrics", timeout=10).read()
        time.sleep(6)
        print(json.dumps({"idle": idle, "scraped": raylet_memory()}))
    finally:
        rt.shutdown()


if __name__ == "__main__":
    main()
