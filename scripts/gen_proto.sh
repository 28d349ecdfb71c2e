#!/usr/bin/env bash
# Regenerate src/tracedray/_proto/v1/*_pb2*.py from proto/tracedray/v1/*.proto.
# tests/unit/test_proto_fresh.py fails when the checked-in code is stale.
#
# The wire names stay `tracedray.v1` (proto package, files, gRPC services); only the Python
# modules live in the private package `tracedray._proto.v1`, so protoc's output is moved
# there and its Python imports and module names rewritten (the serialized descriptors,
# which name the .proto files and the package, are left as they are).
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
out="${1:-$here/src}"
python="${PYTHON:-python}"
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
"$python" -m grpc_tools.protoc -I"$here/proto" --python_out="$scratch" --pyi_out="$scratch" \
  --grpc_python_out="$scratch" "$here"/proto/tracedray/v1/*.proto
target="$out/tracedray/_proto/v1"
mkdir -p "$target"
for file in "$scratch"/tracedray/v1/*; do
  sed -e 's/^from tracedray\.v1 import /from tracedray._proto.v1 import /' \
      -e "s/^_builder\.BuildTopDescriptorsAndMessages(DESCRIPTOR, 'tracedray\.v1\./_builder.BuildTopDescriptorsAndMessages(DESCRIPTOR, 'tracedray._proto.v1./" \
      "$file" > "$target/$(basename "$file")"
done
[ -f "$out/tracedray/_proto/__init__.py" ] || \
  printf '"""Generated protobuf and gRPC code (private: the wire types, not an API)."""\n' \
    > "$out/tracedray/_proto/__init__.py"
touch "$target/__init__.py"
