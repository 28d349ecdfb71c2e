#!/usr/bin/env bash
# Regenerate src/tracedray/v1/*_pb2*.py from proto/tracedray/v1/*.proto.
# tests/unit/test_proto_fresh.py fails when the checked-in code is stale.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
out="${1:-$here/src}"
python="${PYTHON:-python}"
mkdir -p "$out/tracedray/v1"
"$python" -m grpc_tools.protoc -I"$here/proto" --python_out="$out" --pyi_out="$out" \
  --grpc_python_out="$out" "$here"/proto/tracedray/v1/*.proto
touch "$out/tracedray/v1/__init__.py"
