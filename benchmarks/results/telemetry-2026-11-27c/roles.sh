#!/bin/sh
# CPU per op by process (roles.py), telemetry on and off, before and after trees,
# alternated; at nice 15 outside the bench lock (CPU time is what is compared).
cd /work/wt/telemetry
R=benchmarks/results/telemetry-2026-11-27c
for tree in /tmp/tel-before2/src /tmp/tel-after/src; do
for off in "" true; do
for w in "empty 5000" "put 20000"; do
  PYTHONPATH=$tree OTEL_SDK_DISABLED=$off TRACEDRAY_TEMP_DIR=/tmp/tel-run nice -n 15 \
    timeout 200 .venv/bin/python $R/roles.py $w 2 >> $R/roles.jsonl 2>>$R/roles.txt
done; done; done
uptime >> $R/roles.txt
