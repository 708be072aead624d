#!/usr/bin/env bash
# Generate the Python stubs from proto/ (Debian: apt-get install python3-grpcio python3-grpc-tools).
#   examples/python/generate.sh [OUT_DIR]     (default: examples/python/generated)
# The stubs need a Python that has grpc_tools: $PYTHON if set, else the first of
# /usr/bin/python3 (where Debian's packages install) and the python3 on PATH that has it.
# Run the client with the same Python.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${1:-$here/generated}"
python=""
for candidate in ${PYTHON:-} /usr/bin/python3 "$(command -v python3 || true)"; do
  [ -n "$candidate" ] && [ -x "$candidate" ] || continue
  if "$candidate" -c 'import grpc, grpc_tools.protoc' 2>/dev/null; then python="$candidate"; break; fi
  if [ -n "${PYTHON:-}" ] && [ "$candidate" = "$PYTHON" ]; then
    echo "PYTHON=$PYTHON cannot import grpc and grpc_tools" >&2; exit 1
  fi
done
if [ -z "$python" ]; then
  echo "no Python with grpcio and grpc_tools: apt-get install python3-grpcio python3-grpc-tools (they install into /usr/bin/python3), or set PYTHON" >&2
  exit 1
fi
mkdir -p "$out"
# google/api: the HTTP annotations ctxprobe.proto imports (a namespace package beside
# protobuf's own google.protobuf).
"$python" -m grpc_tools.protoc -I "$here/../../proto" --python_out="$out" --grpc_python_out="$out" \
  "$here/../../proto/ctxprobe/v1/ctxprobe.proto" "$here/../../proto/google/api/http.proto" "$here/../../proto/google/api/annotations.proto"
echo "stubs in $out (for $python)"
