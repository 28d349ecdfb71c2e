#!/bin/bash
# A session's closing figures against Ray, one benchmark at a time (about 10 minutes on
# a quiet 2-core machine): bash benchmarks/final.sh benchmarks/results/<folder>
# Ray's python: RAY_PYTHON (default /tmp/rayvenv/bin/python, a venv with ray installed).
set -u
D=${1:?usage: final.sh RESULTS_FOLDER}
RAY_PYTHON=${RAY_PYTHON:-/tmp/rayvenv/bin/python}
cd "$(dirname "$0")/.."
mkdir -p "$D"
log() { echo "$(date -u +%H:%M:%S) $1: $(cut -d' ' -f1-3 /proc/loadavg)" >> "$D/load.txt"; }
log start
git rev-parse --short HEAD > "$D/commit.txt"
.venv/bin/python benchmarks/submission.py --rounds 7 --ray-python "$RAY_PYTHON" --json "$D/submission.json" > "$D/submission.txt" 2>&1; log submission
.venv/bin/python benchmarks/transfer.py --rounds 3 --ray-python "$RAY_PYTHON" --save "$D/transfer.json" > "$D/transfer.txt" 2>&1; log transfer
.venv/bin/python benchmarks/core.py --runs 3 --rounds 3 --ray-python "$RAY_PYTHON" --json "$D/core.json" > "$D/core.txt" 2>&1; log core
.venv/bin/python benchmarks/footprint.py --runs 3 --idle 3 --json "$D/footprint.json" > "$D/footprint.txt" 2>&1; log footprint
.venv/bin/python benchmarks/telemetry.py --rounds 16 --save "$D/telemetry.json" > "$D/telemetry.txt" 2>&1; log telemetry
echo done >> "$D/load.txt"
.venv/bin/python benchmarks/submission.py --rounds 7 --ray-python "$RAY_PYTHON" --json "$D/submission-2.json" > "$D/submission-2.txt" 2>&1; log submission-2
.venv/bin/python benchmarks/submission.py --pool "$D/submission.json" "$D/submission-2.json" > "$D/submission-pooled.txt" 2>&1; log pooled
