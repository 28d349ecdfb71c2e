"""The floor of a Python process on grpcio: RSS, PSS and USS of the bare interpreter, of
``import grpc``, and of a started ``grpc.server``; each case 3 processes, the median.

Usage: python floor.py OUT.json
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

CASES = {
    "bare interpreter": "pass",
    "import grpc": "import grpc",
    "grpc + protobuf + a started grpc.server (1 thread)": (
        "import grpc; from concurrent.futures import ThreadPoolExecutor\n"
        "import google.protobuf.message\n"
        "s = grpc.server(ThreadPoolExecutor(max_workers=1))\n"
        "s.add_insecure_port('127.0.0.1:0'); s.start()"),
}
READY = "\nimport sys; print('ready', flush=True); sys.stdin.readline()"


def memory_mb(pid: int) -> tuple[float, float, float]:
    """RSS, PSS and USS (private clean + dirty) of ``pid`` in MB."""
    found: dict[str, int] = {}
    with open(f"/proc/{pid}/smaps_rollup") as rollup:
        for line in rollup:
            name, _, rest = line.partition(":")
            if name in ("Rss", "Pss", "Private_Clean", "Private_Dirty"):
                found[name] = int(rest.split()[0])
    return (found["Rss"] / 1024, found["Pss"] / 1024,
            (found["Private_Clean"] + found["Private_Dirty"]) / 1024)


def main() -> None:
    out = {}
    for name, code in CASES.items():
        values = []
        for _ in range(3):
            process = subprocess.Popen([sys.executable, "-c", code + READY],
                                       stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            assert process.stdin is not None and process.stdout is not None
            process.stdout.readline()
            time.sleep(0.5)
            values.append(memory_mb(process.pid))
            process.stdin.write("\n")
            process.stdin.flush()
            process.wait()
        rss, pss, uss = sorted(values)[1]
        out[name] = {"rss": rss, "pss": pss, "uss": uss}
        print(f"{name:55} RSS {rss:5.1f}  PSS {pss:5.1f}  USS {uss:5.1f}")
    with open(sys.argv[1], "w") as file:
        json.dump(out, file, indent=1)


if __name__ == "__main__":
    main()
