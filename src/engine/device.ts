// Execution providers: a thin, explicit choice of device and compute dtype.
import fs from 'node:fs';
import path from 'node:path';
import { createRequire } from 'node:module';
import ort from 'onnxruntime-node';
import { DeviceError } from '../common/errors.js';
import type { ComputeDType } from '../common/dtypes.js';

export interface DeviceOptions {
  /** `cpu` (default), `webgpu`, `cuda` or `cuda:N`. */
  device?: string;
  /** Compute dtype; default: see `chooseDtype`. */
  dtype?: ComputeDType;
  /** The checkpoint's own dtype (config `torch_dtype`, else its tensors'), for the default. */
  checkpointDtype?: string;
  /** Intra-op threads on CPU (0 = onnxruntime's default: one per core). */
  threads?: number;
  /** onnxruntime's CPU memory arena (default off: see bench/memory.ts). */
  cpuMemArena?: boolean;
  /** Write onnxruntime's profile (each node's kernel time, JSON) to files starting with
   * this path, one per session, when the engine is released: where a pass's time goes on
   * a device (bench/gpu.ts --only profile). */
  profilePrefix?: string;
  /** WebGPU only: onnxruntime's storage buffer cache (its storageBufferCacheMode).
   * `bucket` (default): freed buffers up to 160 MiB kept for reuse in size buckets, larger
   * ones made and freed every pass. `simple`: every freed buffer kept by its exact size,
   * never given back: fast when shapes repeat (a fixed evaluation set), device memory that
   * grows with each new shape otherwise. bench/gpu.ts --buffer-cache also tries the
   * provider's `lazyRelease` and `disabled`. */
  bufferCache?: GpuBufferCache;
  /** onnxruntime's WebGPU validationMode (default `basic`); bench/gpu.ts --validation
   * measures what the checks cost a pass of many small dispatches. */
  gpuValidation?: 'disabled' | 'wgpuOnly' | 'basic' | 'full';
}

export type DeviceKind = 'cpu' | 'cuda' | 'webgpu';
export type GpuBufferCache = 'bucket' | 'simple' | 'lazyRelease' | 'disabled';

export interface ResolvedDevice {
  kind: DeviceKind;
  deviceId: number;
  dtype: ComputeDType;
  /** Why this dtype (reported in ListModels and the load log). */
  dtypeReason: string;
  sessionOptions: ort.InferenceSession.SessionOptions;
  /** WebGPU: the provider's buffer cache. */
  bufferCache?: GpuBufferCache;
}

// Off: measured by bench/memory.ts (56M-parameter model, 4 × 2048-token probe, then a
// 4 × 2048-token rolling score): with the arena, RSS stayed at 2792 then 3860 MiB after
// the requests (loaded: 294); without, 584 then 616 MiB, with a lower peak (2121 vs 2922)
// for +8% probe time and −6% rolling time.
const CPU_MEM_ARENA_DEFAULT = false;

const CUDA_HELP =
  'the CUDA build of onnxruntime-node is not installed. On a GPU host with CUDA 12 and cuDNN 9, ' +
  'reinstall it with its CUDA binaries: `ONNXRUNTIME_NODE_INSTALL=cuda12 npm rebuild onnxruntime-node` (see README, "GPU hosts")';

export function resolveDevice(options: DeviceOptions = {}): ResolvedDevice {
  const spec = (options.device ?? 'cpu').trim().toLowerCase();
  const match = /^(cpu|cuda|webgpu)(?::(\d+))?$/.exec(spec);
  if (!match || (match[1] !== 'cuda' && match[2] !== undefined)) {
    throw new DeviceError(`device ${JSON.stringify(options.device)} is not one of cpu, webgpu, cuda, cuda:N`);
  }
  const kind = match[1] as DeviceKind;
  const deviceId = Number(match[2] ?? 0);
  const { dtype, reason: dtypeReason } = chooseDtype(kind, options.dtype, options.checkpointDtype);
  if (kind !== 'cuda' && dtype === 'bfloat16') {
    throw new DeviceError(
      `dtype bfloat16 needs device cuda: the ${kind === 'cpu' ? 'CPU execution provider has no bfloat16 MatMul' : 'WebGPU provider has no bfloat16 type'}`,
    );
  }
  if (kind !== 'webgpu' && options.bufferCache !== undefined)
    throw new DeviceError(`gpuBufferCache (--gpu-buffer-cache) is a setting of device webgpu, not ${kind}`);
  const threads = options.threads ?? 0;
  if (!Number.isInteger(threads) || threads < 0) throw new DeviceError(`threads must be a whole number ≥ 0 (got ${threads})`);
  const sessionOptions: ort.InferenceSession.SessionOptions = {
    graphOptimizationLevel: 'all',
    intraOpNumThreads: threads,
    interOpNumThreads: 1,
    executionMode: 'sequential',
    enableCpuMemArena: options.cpuMemArena ?? CPU_MEM_ARENA_DEFAULT,
    ...(options.profilePrefix !== undefined && { enableProfiling: true, profileFilePrefix: options.profilePrefix }),
  };
  if (kind === 'cuda') {
    if (!cudaProviderInstalled()) throw new DeviceError(`device ${spec}: ${CUDA_HELP}`);
    sessionOptions.executionProviders = [{ name: 'cuda', deviceId }];
  } else if (kind === 'webgpu') {
    if (!ort.listSupportedBackends().some((b) => b.name === 'webgpu' && b.bundled)) {
      throw new DeviceError(`device webgpu: this build of onnxruntime-node has no WebGPU provider (${process.platform}-${process.arch})`);
    }
    sessionOptions.executionProviders = [
      {
        name: 'webgpu',
        ...(options.bufferCache ? { storageBufferCacheMode: options.bufferCache } : {}),
        ...(options.gpuValidation ? { validationMode: options.gpuValidation } : {}),
      },
    ];
    // Its warning that some nodes run on the CPU says nothing of which: the load reports the
    // placements itself (placements.ts).
    sessionOptions.logSeverityLevel = 3;
  } else {
    sessionOptions.executionProviders = ['cpu'];
  }
  return { kind, deviceId, dtype, dtypeReason, sessionOptions, ...(kind === 'webgpu' ? { bufferCache: options.bufferCache ?? 'bucket' } : {}) };
}

/** The compute dtype and why: the one asked for; on the CPU float32 (its provider has no
 * half-precision MatMul worth using); on CUDA bfloat16 for a bfloat16 checkpoint (float16's
 * range is too small for some models' activations: Qwen2.5 and Gemma are known to
 * overflow), else float16. Norms, soft-caps, softmax and log-probs run in float32 in every
 * case (decoder.ts). */
export function chooseDtype(
  kind: DeviceKind,
  requested: ComputeDType | undefined,
  checkpointDtype: string | undefined,
): { dtype: ComputeDType; reason: string } {
  if (requested === 'float16' && kind === 'webgpu')
    return { dtype: requested, reason: `asked for (--dtype or the model config): ${WEBGPU_FLOAT16}` };
  if (requested) return { dtype: requested, reason: 'asked for (--dtype or the model config)' };
  if (kind === 'cpu') return { dtype: 'float32', reason: 'CPU default' };
  if (kind === 'webgpu')
    return {
      dtype: 'float32',
      reason: 'WebGPU default: matrix products accumulate in float32 (its float16 MatMul accumulates in float16)',
    };
  if (checkpointDtype === 'bfloat16')
    return {
      dtype: 'bfloat16',
      reason: 'CUDA default for a bfloat16 checkpoint (float16 can overflow where the model was trained in bfloat16)',
    };
  return { dtype: 'float16', reason: `CUDA default for a ${checkpointDtype ?? 'float32'} checkpoint` };
}

/** What float16 costs on WebGPU: onnxruntime's WebGPU MatMul accumulates float16 products in
 * float16 (an all-ones 1×4096 · 4096×1 product gives 2048), so log-probs move by far more than
 * float32's rounding (README, "GPU hosts": the error measured on the fixtures). */
export const WEBGPU_FLOAT16 = 'products accumulate in float16 on WebGPU, log-probs are approximate (README: GPU hosts)';

/** The CUDA provider library (libonnxruntime_providers_cuda.so) ships only when the
 * install script fetched it; the bundled CPU build lists cuda but cannot load it. */
function cudaProviderInstalled(): boolean {
  const req = createRequire(import.meta.url);
  const root = path.dirname(req.resolve('onnxruntime-node/package.json'));
  const dir = path.join(root, 'bin', 'napi-v6', process.platform, process.arch);
  return fs.existsSync(dir) && fs.readdirSync(dir).some((f) => f.includes('providers_cuda'));
}
