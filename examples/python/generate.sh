#!/usr/bin/env bash
# Generate the Python stubs from proto/ (Debian: apt-get install python3-grpc-tools).
#   examples/python/generate.sh [OUT_DIR]     (default: examples/python/generated)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${1:-$here/generated}"
mkdir -p "$out"
"${PYTHON:-python3}" -m grpc_tools.protoc -I "$here/../../proto" --python_out="$out" --grpc_python_out="$out" "$here/../../proto/ctxprobe/v1/ctxprobe.proto"
echo "stubs in $out"
