// Execution providers: a thin, explicit choice of device and compute dtype.
import fs from 'node:fs';
import path from 'node:path';
import { createRequire } from 'node:module';
import ort from 'onnxruntime-node';
import { DeviceError } from './errors.js';
import type { ComputeDType } from './dtypes.js';

export interface DeviceOptions {
  /** `cpu` (default), `cuda` or `cuda:N`. */
  device?: string;
  /** Compute dtype; default float32 on CPU, float16 on CUDA. */
  dtype?: ComputeDType;
  /** Intra-op threads on CPU (0 = onnxruntime's default: one per core). */
  threads?: number;
  /** onnxruntime's CPU memory arena (default off: see bench/memory.ts). */
  cpuMemArena?: boolean;
}

export interface ResolvedDevice {
  kind: 'cpu' | 'cuda';
  deviceId: number;
  dtype: ComputeDType;
  sessionOptions: ort.InferenceSession.SessionOptions;
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
  const match = /^(cpu|cuda)(?::(\d+))?$/.exec(spec);
  if (!match || (match[1] === 'cpu' && match[2] !== undefined)) {
    throw new DeviceError(`device ${JSON.stringify(options.device)} is not one of cpu, cuda, cuda:N`);
  }
  const kind = match[1] as 'cpu' | 'cuda';
  const deviceId = Number(match[2] ?? 0);
  const dtype = options.dtype ?? (kind === 'cuda' ? 'float16' : 'float32');
  if (kind === 'cpu' && dtype === 'bfloat16') {
    throw new DeviceError('dtype bfloat16 needs device cuda: the CPU execution provider has no bfloat16 MatMul');
  }
  const threads = options.threads ?? 0;
  if (!Number.isInteger(threads) || threads < 0) throw new DeviceError(`threads must be a whole number ≥ 0 (got ${threads})`);
  const sessionOptions: ort.InferenceSession.SessionOptions = {
    graphOptimizationLevel: 'all',
    intraOpNumThreads: threads,
    interOpNumThreads: 1,
    executionMode: 'sequential',
    enableCpuMemArena: options.cpuMemArena ?? CPU_MEM_ARENA_DEFAULT,
  };
  if (kind === 'cuda') {
    if (!cudaProviderInstalled()) throw new DeviceError(`device ${spec}: ${CUDA_HELP}`);
    sessionOptions.executionProviders = [{ name: 'cuda', deviceId }];
  } else {
    sessionOptions.executionProviders = ['cpu'];
  }
  return { kind, deviceId, dtype, sessionOptions };
}

/** The CUDA provider library (libonnxruntime_providers_cuda.so) ships only when the
 * install script fetched it; the bundled CPU build lists cuda but cannot load it. */
function cudaProviderInstalled(): boolean {
  const req = createRequire(import.meta.url);
  const root = path.dirname(req.resolve('onnxruntime-node/package.json'));
  const dir = path.join(root, 'bin', 'napi-v6', process.platform, process.arch);
  return fs.existsSync(dir) && fs.readdirSync(dir).some((f) => f.includes('providers_cuda'));
}
