// Execution providers: a thin, explicit choice of device and compute dtype.
import fs from 'node:fs';
import path from 'node:path';
import { createRequire } from 'node:module';
import ort from 'onnxruntime-node';
import { DeviceError } from '../common/errors.js';
import type { ComputeDType } from '../common/dtypes.js';
import { PROVIDERS, PROVIDER_KINDS, type ProviderKind, type ProviderProfile } from '../common/providers.js';
import { unreachable } from '../common/unreachable.js';

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
  /** Where a provider runs probes in a session of their own (WebGPU): `separate` (default:
   * scoring and generation dispatch no probe node; the probe session is made on the first
   * probe) or `shared` (one session, the probe graph, serves every pass, each dispatching
   * the probe tap). Either way one copy of the weights on the device (device weights). */
  probeSession?: ProbeSession;
}

export const PROBE_SESSIONS = ['separate', 'shared'] as const;
export type ProbeSession = (typeof PROBE_SESSIONS)[number];

export type GpuBufferCache = 'bucket' | 'simple' | 'lazyRelease' | 'disabled';
/** The buffer caches a setting may choose (the others are onnxruntime's, untried here). */
export const SETTABLE_GPU_BUFFER_CACHES = ['bucket', 'simple'] as const satisfies readonly GpuBufferCache[];

export interface ResolvedDevice {
  kind: ProviderKind;
  /** What the provider can do, and the scheduler's defaults on it (common/providers.ts). */
  profile: ProviderProfile;
  deviceId: number;
  /** How ListModels names the device: `cuda:0`, `webgpu`, `cpu`. */
  name: string;
  dtype: ComputeDType;
  /** Why this dtype (reported in ListModels and the load log). */
  dtypeReason: string;
  sessionOptions: ort.InferenceSession.SessionOptions;
  /** WebGPU: the provider's buffer cache. */
  bufferCache?: GpuBufferCache;
  /** Where the provider can run probes apart: whether it does (DeviceOptions.probeSession). */
  probeSession?: ProbeSession;
}

// Off: measured by bench/memory.ts (56M-parameter model, 4 × 2048-token probe, then a
// 4 × 2048-token rolling score): with the arena, RSS stayed at 2792 then 3860 MiB after
// the requests (loaded: 294); without, 584 then 616 MiB, with a lower peak (2121 vs 2922)
// for +8% probe time and −6% rolling time.
const CPU_MEM_ARENA_DEFAULT = false;

const CUDA_HELP =
  'the CUDA build of onnxruntime-node is not installed. On a GPU host with CUDA 12 and cuDNN 9, ' +
  'install its CUDA binaries: `(cd node_modules/onnxruntime-node && ONNXRUNTIME_NODE_INSTALL=cuda12 node script/install.js)` (as docs/gpus.md, "CUDA, untested", and deploy/docker/Dockerfile.cuda do)';

export function resolveDevice(options: DeviceOptions = {}): ResolvedDevice {
  const spec = (options.device ?? 'cpu').trim().toLowerCase();
  const match = /^([a-z]+)(?::(\d+))?$/.exec(spec);
  const kind = PROVIDER_KINDS.find((k) => k === match?.[1]);
  if (!match || !kind || (!PROVIDERS[kind].numbered && match[2] !== undefined)) {
    const names = PROVIDER_KINDS.flatMap((k) => (PROVIDERS[k].numbered ? [k, `${k}:N`] : [k]));
    throw new DeviceError(`device ${JSON.stringify(options.device)} is not one of ${names.join(', ')}`);
  }
  const profile: ProviderProfile = PROVIDERS[kind];
  const deviceId = Number(match[2] ?? 0);
  const { dtype, reason: dtypeReason } = chooseDtype(kind, options.dtype, options.checkpointDtype);
  const unsupported = profile.unsupportedDtypes[dtype];
  if (unsupported) {
    const where = PROVIDER_KINDS.filter((k) => !(dtype in PROVIDERS[k].unsupportedDtypes));
    throw new DeviceError(`dtype ${dtype} needs device ${where.join(' or ')}: ${unsupported}`);
  }
  if (!profile.gpuSettings && options.bufferCache !== undefined)
    throw new DeviceError(`gpuBufferCache (--gpu-buffer-cache) is a setting of device webgpu, not ${kind}`);
  if (!profile.separateProbeSession && options.probeSession !== undefined)
    throw new DeviceError(
      `probeSession (--probe-session) is a setting of device webgpu, not ${kind} (whose one session always serves probes too)`,
    );
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
  const missing = missingProvider(profile);
  if (missing) throw new DeviceError(`device ${spec}: ${missing}`);
  sessionOptions.executionProviders = [executionProvider(profile, deviceId, options)];
  if (profile.session.quiet) sessionOptions.logSeverityLevel = 3;
  return {
    kind,
    profile,
    deviceId,
    name: profile.numbered ? `${kind}:${deviceId}` : kind,
    dtype,
    dtypeReason,
    sessionOptions,
    ...(profile.gpuSettings ? { bufferCache: options.bufferCache ?? 'bucket' } : {}),
    ...(profile.separateProbeSession ? { probeSession: options.probeSession ?? 'separate' } : {}),
  };
}

/** onnxruntime's execution provider entry for a device: its name, a CUDA device's index,
 * WebGPU's buffer cache and validation mode when asked. */
function executionProvider(
  profile: ProviderProfile,
  deviceId: number,
  options: DeviceOptions,
): ort.InferenceSession.ExecutionProviderConfig {
  const name = profile.session.name;
  if (profile.numbered) return { name, deviceId } as ort.InferenceSession.ExecutionProviderConfig;
  if (!profile.gpuSettings) return name;
  return {
    name,
    ...(options.bufferCache ? { storageBufferCacheMode: options.bufferCache } : {}),
    ...(options.gpuValidation ? { validationMode: options.gpuValidation } : {}),
  } as ort.InferenceSession.ExecutionProviderConfig;
}

/** Why the provider cannot be used here, if it cannot: the bundled CPU build lists cuda but
 * cannot load it without the library the install script fetches. */
function missingProvider(profile: ProviderProfile): string | undefined {
  switch (profile.session.install) {
    case 'bundled':
      return undefined;
    case 'listedBackend':
      return ort.listSupportedBackends().some((b) => b.name === profile.session.name && b.bundled)
        ? undefined
        : `this build of onnxruntime-node has no WebGPU provider (${process.platform}-${process.arch})`;
    case 'cudaLibrary':
      return cudaProviderInstalled() ? undefined : CUDA_HELP;
    default:
      return unreachable(profile.session.install);
  }
}

/** The compute dtype and why: the one asked for (with what it costs on the provider), else
 * the provider's default for the checkpoint's dtype (common/providers.ts). Norms, soft-caps,
 * softmax and log-probs run in float32 in every case (decoder.ts). */
export function chooseDtype(
  kind: ProviderKind,
  requested: ComputeDType | undefined,
  checkpointDtype: string | undefined,
): { dtype: ComputeDType; reason: string } {
  const profile: ProviderProfile = PROVIDERS[kind];
  if (requested) {
    const note = profile.dtypeNotes[requested];
    return { dtype: requested, reason: `asked for (--dtype or the model config)${note ? `: ${note}` : ''}` };
  }
  return profile.defaultDtype(checkpointDtype);
}

/** The CUDA provider library (libonnxruntime_providers_cuda.so) ships only when the
 * install script fetched it; the bundled CPU build lists cuda but cannot load it. */
function cudaProviderInstalled(): boolean {
  const req = createRequire(import.meta.url);
  const root = path.dirname(req.resolve('onnxruntime-node/package.json'));
  const dir = path.join(root, 'bin', 'napi-v6', process.platform, process.arch);
  return fs.existsSync(dir) && fs.readdirSync(dir).some((f) => f.includes('providers_cuda'));
}

/** Weights kept as stored are widened for each product into a float32 buffer the size of
 * the matrix; without onnxruntime's arena each is a fresh mapping from the OS, faulted in
 * page by page on every pass. Measured (bench/real-models.ts, Llama-3-8B shape in BF16, 2
 * threads): decode 25 s a token without the arena, 6.7 s with it; a 32-token pass 36.5 →
 * 24.7 s; peak RSS 16.2 → 16.7 GiB. So such a model runs with the arena unless asked. */
export function withCpuArena(device: ResolvedDevice): ResolvedDevice {
  return { ...device, sessionOptions: { ...device.sessionOptions, enableCpuMemArena: true } };
}
