#!/usr/bin/env bash
# On a GPU host (after ../shared/gpu/pack.sh, through .device/on-device.sh): ctxprobe's GPU
# workloads (bench/gpu.js), the provider's fused kernels against the graph's forms
# (bench/gpu-kernels.js), then PyTorch's on the same checkpoint when python3 has torch
# and transformers. JSON lines on stdout, also in $OUT/gpu-bench.jsonl when OUT is set.
#   bash .device/on-device.sh bash bench/gpu-host.sh [bench/gpu.js flags]
# STAGES=contracts,score,... runs only those stages (default: all); PROBE_LONG sets
# the long probes' lengths (default 16384,32768).
# A lent GPU host gives minutes, not hours: the stages run most telling first, each under
# its own time limit (a stage that overruns prints a `timeout` line and the next one
# starts), and every line reaches the file as soon as it is printed.
set -uo pipefail
out=${OUT:-/tmp}/gpu-bench.jsonl
dir=${BENCH_DIR:-/tmp/ctxprobe-gpu-bench-360m}
wanted() { [ -z "${STAGES:-}" ] || [[ ",$STAGES," == *",$1,"* ]]; }
stage() { # seconds name command...
  local limit=$1 name=$2 t0=$SECONDS
  shift 2
  wanted "$name" || return 0
  echo "# stage $name: start (limit ${limit}s)"
  timeout --kill-after=5 "$limit" "$@"
  local rc=$?
  echo "{\"workload\":\"stage\",\"stage\":\"$name\",\"rc\":$rc,\"timedOut\":$([ $rc = 124 ] || [ $rc = 137 ] && echo true || echo false),\"seconds\":$((SECONDS - t0))}"
}
{
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | sed 's/^/# gpu: /'
  # The bit contracts first (counts, not times: cheap, and never yet run on a GPU host),
  # then scoring and generation in stages of their own (on 2026-11-27 one stage of all
  # three ran out of time before 16 streams and the contracts).
  stage 90 contracts node bench/gpu.js --dir "$dir" "$@" --only contracts
  stage 90 score node bench/gpu.js --dir "$dir" "$@" --only score
  stage 150 generate node bench/gpu.js --dir "$dir" "$@" --only generate
  stage 60 score-simple node bench/gpu.js --dir "$dir" "$@" --only score --buffer-cache simple
  stage 90 profile node bench/gpu.js --dir "$dir" "$@" --only profile
  stage 90 kernels node bench/gpu-kernels.js "$@"
  stage 90 probe-short node bench/gpu.js --dir "$dir" "$@" --only probe --probe-lengths 4096,8192
  if ! wanted pytorch; then
    :
  elif python3 -c 'import torch, transformers' 2>/dev/null; then
    stage 150 pytorch python3 bench/gpu_peer.py --dir "$dir"
  else
    echo '# no python3 with torch and transformers here: no PyTorch peer'
  fi
  stage 60 score-float16 node bench/gpu.js --dir "$dir" "$@" --dtype float16 --only score
  stage 150 probe-long node bench/gpu.js --dir "$dir" "$@" --only probe --probe-lengths "${PROBE_LONG:-16384,32768}"
} 2>&1 | tee "$out"
