#!/bin/sh
# $1 = label (after|before), $2 = index
cd /work/wt/telemetry
R=benchmarks/results/telemetry-2026-11-27c
if [ "$1" = before ]; then export PYTHONPATH=/tmp/tel-before2/src; else export PYTHONPATH=/tmp/tel-after/src; fi
export TRACEDRAY_TEMP_DIR=/tmp/tel-run
{ date -u; uptime; .venv/bin/python benchmarks/telemetry.py --rounds 8 --save $R/onoff-$1-$2.json; date -u; uptime; } > $R/onoff-$1-$2.txt 2>&1
