#!/usr/bin/env bash
# On a GPU host (after ../shared/gpu/pack.sh, through .device/on-device.sh): ctxprobe's GPU
# workloads (bench/gpu.js), then PyTorch's on the same checkpoint when python3 has torch
# and transformers. JSON lines on stdout, also in $OUT/gpu-bench.jsonl when OUT is set.
#   bash .device/on-device.sh bash bench/gpu-host.sh [bench/gpu.js flags]
set -uo pipefail
out=${OUT:-/tmp}/gpu-bench.jsonl
dir=/tmp/ctxprobe-gpu-bench-360m
{
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | sed 's/^/# gpu: /'
  node bench/gpu.js --dir "$dir" "$@"
  node bench/gpu.js --dir "$dir" --dtype float16 --only score "$@"
  if python3 -c 'import torch, transformers' 2>/dev/null; then
    python3 bench/gpu_peer.py --dir "$dir"
  else
    echo '# no python3 with torch and transformers here: no PyTorch peer'
  fi
} 2>&1 | tee "$out"
