// What a model needs in memory, worked out before anything is built: its weights at rest,
// the largest pass the scheduler will make of it, the prefix cache's budget, and the
// runtime's own. A BF16 or F16 checkpoint computed in float32 keeps its weights as stored
// when the widened copy would not fit (model/ops.ts, WeightsAtRest), and a model that does
// not fit either way is refused at load with what it needs and what to do, where before the
// kernel killed the process with no word (a Llama-3-8B shape in BF16 on a 24 GiB machine:
// every weight widened to float32, 24.3 GiB after 79 s, signal 9).
import fs from 'node:fs';
import os from 'node:os';
import type { ComputeDType, DTypeName } from '../common/dtypes.js';
import type { ModelConfig } from '../model/families.js';
import type { WeightsAtRest } from '../model/ops.js';
import type { ProviderProfile } from '../common/providers.js';
import { quantizeTarget, type QuantizeAtLoad } from '../model/quantized.js';
import { repackedBytes } from '../checkpoint/ggml-blocks.js';

const GiB = 2 ** 30;
const BYTES: Record<DTypeName, number> = { float32: 4, float16: 2, bfloat16: 2, int64: 8, int32: 4, bool: 1 } as Record<DTypeName, number>;

/** A stored tensor as the plan counts it: its dtype and dims; a quantized one (kept in its
 * blocks at rest, as its products read it) by its stored bytes. */
export interface StoredShape {
  dtype: DTypeName | 'quantized';
  shape: number[];
  bytes?: number;
}

/** What the pass the scheduler makes of a model costs: tokens per pass, one layer's
 * attention, the prefix cache. */
export interface PassLimits {
  maxBatchTokens: number;
  maxAttentionBytes: number;
  prefixCacheBytes: number;
}

/** The limits a model's scorer will run with: those given, else the provider's defaults
 * (core/scorer.ts reads the same). */
export function passLimits(profile: ProviderProfile, bufferCache: string | undefined, given: Partial<PassLimits> = {}): PassLimits {
  const { default: passTokens, simpleCache } = profile.maxBatchTokens;
  return {
    maxBatchTokens: given.maxBatchTokens ?? (simpleCache !== undefined && bufferCache === 'simple' ? simpleCache : passTokens),
    maxAttentionBytes: given.maxAttentionBytes ?? profile.maxAttentionBytes,
    prefixCacheBytes: given.prefixCacheBytes ?? GiB,
  };
}

export interface MemoryPlan {
  atRest: WeightsAtRest;
  /** Bytes of the weights at rest, as the plan keeps them. */
  weights: number;
  /** The largest pass, the prefix cache and the runtime, besides the weights. */
  working: number;
  /** weights + working. */
  need: number;
  /** What the host has for it (MemAvailable, within a cgroup's limit); undefined: unknown. */
  available?: number;
  /** Why this way, for the load log and ListModels. */
  reason: string;
}

/** Memory the process can still have: /proc/meminfo's MemAvailable, capped by the cgroup's
 * limit (a container's) less what the cgroup uses; undefined off Linux. */
export function availableMemory(): number | undefined {
  const meminfo = read('/proc/meminfo');
  const avail = meminfo ? Number(/^MemAvailable:\s+(\d+) kB/m.exec(meminfo)?.[1]) * 1024 : NaN;
  let best = Number.isFinite(avail) ? avail : os.freemem();
  // cgroup v2, then v1: a limit below the host's memory is the container's.
  const limit = Number(read('/sys/fs/cgroup/memory.max') ?? read('/sys/fs/cgroup/memory/memory.limit_in_bytes') ?? NaN);
  const used = Number(read('/sys/fs/cgroup/memory.current') ?? read('/sys/fs/cgroup/memory/memory.usage_in_bytes') ?? NaN);
  if (Number.isFinite(limit) && limit < os.totalmem() && Number.isFinite(used)) best = Math.min(best, limit - used);
  return best;
}

function read(file: string): string | undefined {
  try {
    return fs.readFileSync(file, 'utf8').trim();
  } catch {
    return undefined;
  }
}

/** The bytes of one pass beyond the weights (an estimate, rounded up): per token the hidden
 * states, q/k/v, the MLP's two widest products and a row of logits with its log-softmax;
 * one layer's attention scores and probabilities; with weights as stored, the widest
 * matrix widened: one at a time, each freed once its product ran, the arena then carving the
 * smaller ones from it (Llama-3-8B shape in BF16: peak RSS 16.7 GiB, the file 15.0 GiB, the
 * head widened 2.0 GiB; bench/real-models.ts). The file's pages are the kernel's to drop. */
function passBytes(c: ModelConfig, limits: PassLimits, widestMatrix: number, atRest: WeightsAtRest): number {
  const T = limits.maxBatchTokens;
  const perToken = 4 * (8 * c.hiddenSize + 3 * c.intermediateSize + 2 * c.vocabSize);
  const widening = atRest === 'stored' ? widestMatrix * 4 : 0;
  return T * perToken + 2 * limits.maxAttentionBytes + widening;
}

/** The runtime's own memory besides the model (Node, onnxruntime, the tokenizer, the worker
 * threads), measured at about 0.4 GiB serving the default model. */
const RUNTIME_BYTES = 0.5 * GiB;

/** How to hold a model's weights, and whether it fits: as computed (widened at load) when
 * that fits, else as stored (widened per product), else refused (`fits` false); `asked`
 * (weightsAtRest) takes one way, and says whether that one fits. */
export function planMemory(
  c: ModelConfig,
  tensors: Iterable<StoredShape>,
  dtype: ComputeDType,
  limits: PassLimits,
  available: number | undefined = availableMemory(),
  asked?: WeightsAtRest,
): MemoryPlan & { fits: boolean } {
  let stored = 0;
  let widened = 0;
  let widest = 0;
  let narrow = false;
  for (const t of tensors) {
    const n = t.shape.reduce((a, b) => a * b, 1);
    if (t.dtype === 'quantized') {
      stored += t.bytes ?? 0;
      widened += t.bytes ?? 0;
      continue;
    }
    stored += n * BYTES[t.dtype];
    const computed = t.dtype === 'float32' || t.dtype === dtype ? BYTES[t.dtype] : BYTES[dtype];
    widened += n * Math.max(computed, BYTES[t.dtype]);
    if (t.shape.length === 2) widest = Math.max(widest, n);
    narrow ||= BYTES[t.dtype] < BYTES[dtype];
  }
  const plan = (atRest: WeightsAtRest, weights: number, reason: string) => {
    const working = passBytes(c, limits, widest, atRest) + limits.prefixCacheBytes + RUNTIME_BYTES;
    return { atRest, weights, working, need: weights + working, ...(available !== undefined ? { available } : {}), reason };
  };
  const gib = (b: number) => `${(b / GiB).toFixed(1)} GiB`;
  const compute = plan(
    'compute',
    widened,
    narrow ? `widened to ${dtype} at load (${gib(widened)}), which fits` : `as stored (${gib(stored)})`,
  );
  const fits = (p: MemoryPlan) => available === undefined || p.need <= available;
  if (asked === 'compute') return { ...compute, reason: `widened at load, as asked (weightsAtRest)`, fits: fits(compute) };
  if (asked === undefined && fits(compute)) return { ...compute, fits: true };
  if (!narrow) return { ...compute, fits: false };
  const kept = plan(
    'stored',
    stored,
    asked === 'stored'
      ? 'kept as stored, as asked (weightsAtRest)'
      : `kept as stored (${gib(stored)}), each matrix widened to ${dtype} for its product: widened at load it would need ${gib(compute.need)}, ${gib(available!)} available`,
  );
  return { ...kept, fits: fits(kept) };
}

/** The refusal of a model that does not fit: what it needs, what there is, what to do. */
export function memoryRefusal(model: string, p: MemoryPlan, limits: PassLimits): string {
  const gib = (b: number) => `${(b / GiB).toFixed(1)} GiB`;
  return (
    `${model}: needs about ${gib(p.need)} of memory — weights ${gib(p.weights)} (${p.atRest === 'stored' ? 'as stored' : 'as computed'}), ` +
    `a pass of ${limits.maxBatchTokens} tokens, the prefix cache (${gib(limits.prefixCacheBytes)}) and the runtime ${gib(p.working)} — ` +
    `and ${gib(p.available ?? 0)} is available. Options: a quantized checkpoint (a GGUF file in Q4_K_M or Q8_0), ` +
    'a smaller --prefix-cache-bytes or --max-batch-tokens, or a machine with more memory (docs/models.md#memory)'
  );
}

/** The stored tensors as the memory plan counts them on int8 activations, where the weights
 * are in host memory: onnxruntime's int8 kernels prepack each quantized matrix into a
 * layout of their own, held beside its parts. Measured (bench/real-models.ts, the 8B
 * Q4_K_M shape, 6.5 GiB of parts): 3.7 GiB more at the end of the load than exact, 2.0 GiB
 * more after a 512-token pass; counted as 0.6 of the parts more. */
export function prepackedForInt8(stored: StoredShape[]): StoredShape[] {
  return stored.map((t) => (t.dtype === 'quantized' ? { ...t, bytes: Math.ceil((t.bytes ?? 0) * 1.6) } : t));
}

/** The stored tensors as the memory plan counts them under `--quantize`: every float matrix
 * the format takes as its repacked bytes (the routers, kept float, are a rounding error). */
export function quantizedAtLoad(stored: StoredShape[], to: QuantizeAtLoad): StoredShape[] {
  return stored.map((t) => {
    const [rows, cols] = t.shape;
    const type = t.dtype !== 'quantized' && t.shape.length === 2 ? quantizeTarget(to, cols!) : undefined;
    return type ? { dtype: 'quantized', shape: t.shape, bytes: repackedBytes(type, rows!, cols!) } : t;
  });
}
