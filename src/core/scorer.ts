// The scorer of one model: its settings, its prefix cache, and the lock that keeps one
// round at a time on that cache. A round of units runs through the cache
// (cached-round.ts) or, without one, as planned whole. The batcher calls it; requests are
// encoded into units above it (requests/), and it knows none of their kinds.
import type { Engine } from '../engine/engine.js';
import type { ModelConfig } from '../model/families.js';
import { InvalidArgumentError } from '../common/errors.js';
import { planUnits, type Plan, type PlanOptions } from './planner.js';
import { PrefixCache } from './prefix-cache.js';
import { runPlan, type PlanResult, type RunOptions } from './runner.js';
import { scoreWithCache } from './cached-round.js';
import type { Unit } from './units.js';

export interface ScorerOptions {
  /** Padded tokens per forward pass (rows × longest row); default 512 on CPU and WebGPU,
   * 8192 on CUDA and on WebGPU with the `simple` buffer cache. */
  maxBatchTokens?: number;
  /** Model context length used for truncation and windows; default: the model's. */
  maxLength?: number;
  /** Share the KV cache of a common prefix; off computes every row in full. */
  prefixSharing?: boolean;
  /** Largest top-k a request may ask for. */
  maxTopK?: number;
  /** Bytes of one layer's attention scores a pass may build (default 192 MiB, 128 on WebGPU): longer
   * rows run in query blocks that shrink as their keys grow. */
  maxAttentionBytes?: number;
  /** KV bytes of past a pass of rows longer than one token may lay out, each distinct past
   * once (default 8 MiB on the CPU, no bound on CUDA); decode passes are not bounded. */
  maxPastBytes?: number;
  /** KV bytes the prefix cache keeps between rounds (default 1 GiB); 0 shares prefixes
   * within a round only. Needs `prefixSharing`. */
  prefixCacheBytes?: number;
  /** Tokens a stretch shared by several rows of one round must have to get a pass of its
   * own (default 8). */
  minSharedTokens?: number;
}

/** Whether a prefix's KV is the same in every sequence that starts with it: false when
 * rotary values depend on the sequence length (then every row runs whole, uncached). */
export function reusableKv(config: Pick<ModelConfig, 'rope'>): boolean {
  return !config.rope?.dependsOnLength;
}

export class Scorer {
  readonly maxLength: number;
  readonly maxBatchTokens: number;
  readonly prefixSharing: boolean;
  readonly maxTopK: number;
  readonly maxAttentionBytes: number;
  readonly maxPastBytes: number;
  readonly minSharedTokens: number;
  /** Absent when prefix sharing is off. */
  readonly cache?: PrefixCache;
  /** Rounds that use the cache run one at a time (pins and inserts assume it). */
  private queue: Promise<unknown> = Promise.resolve();

  constructor(
    readonly engine: Engine,
    options: ScorerOptions = {},
  ) {
    this.maxLength = options.maxLength ?? engine.config.maxPositions;
    if (this.maxLength > engine.config.maxPositions) {
      throw new InvalidArgumentError('max_length', `${this.maxLength} exceeds the model's ${engine.config.maxPositions} positions`);
    }
    // Measured on the CPU (56M Llama, CHARPEval shapes): 512–1024 tokens per pass beat
    // 4096 by 25–40%, as larger attention and KV-gather tensors fall out of cache. Peak RSS
    // follows the pass (bench/peer.ts, 2 threads, mmap threshold 1 MiB): 512 against 1024
    // took multiple choice from 1.38–1.84 s / 675 MiB to 1.34–1.38 s / 596 MiB and
    // 4 × 1024-token rolling from 2.56–2.71 s / 553–559 MiB to 2.87–2.98 s / 522–531 MiB
    // (llama.cpp: 548). GPUs want large passes.
    // WebGPU: 512, as on the CPU, for another reason. onnxruntime's WebGPU provider keeps
    // freed buffers for reuse in size buckets up to 160 MiB (a few of each) and makes and
    // frees anything larger every pass; a pass of thousands of tokens has many such tensors
    // (logits of 49,152 tokens a row, attention scores). On the H100 (360M shape,
    // 2026-11-27), 16 × 512 scored at 5.6k tokens/s in passes of 8192 tokens and 8.3k in
    // passes of 512; 32 × 1024, 2.3k and 8.0k. (With the provider's 'simple' cache, which
    // keeps every buffer size it ever freed, the large passes ran at 14.6k and 13.8k: fast,
    // but device memory that grows with every new shape a server sees.)
    const largePasses = engine.device.kind === 'cuda' || engine.device.bufferCache === 'simple';
    this.maxBatchTokens = options.maxBatchTokens ?? (largePasses ? 8192 : 512);
    this.prefixSharing = options.prefixSharing ?? true;
    this.maxTopK = options.maxTopK ?? 100;
    // Measured with bench/long.ts (32k-token rolling scoring, 8 heads, glibc mmap threshold
    // 1 MiB): peak above the model 2096 MiB / 220 s at 256 MiB, 1965 MiB / 233 s at 192,
    // 1834 MiB / 299 s at 128 (smaller blocks copy the growing KV more often).
    // On WebGPU 128 MiB, to stay within the provider's cached buffer sizes (above).
    this.maxAttentionBytes = options.maxAttentionBytes ?? (engine.device.kind === 'webgpu' ? 128 : 192) * 2 ** 20;
    // Measured with bench/peer.ts's multiple choice (4 × 6 continuations of 400-token
    // contexts, mmap threshold 1 MiB), peak RSS / time, a context's continuations sharing
    // its laid-out past (the graph gathers it per row): 32 MiB 488–491 MiB / 1.57–1.75 s,
    // 16 MiB 480–485 / 1.54–1.83, 8 MiB 427–435 / 1.76–1.87 (llama.cpp 449–456), in-process
    // 1.37–1.54 s at 8 and 1.32–1.51 at 16. Before they shared it (each row's past laid
    // out): no bound 606 / 1.76–1.80, 16 MiB 497 / 1.52–1.59, 8 MiB 470 / 2.11–2.29.
    this.maxPastBytes = options.maxPastBytes ?? (engine.device.kind === 'cpu' ? 8 * 2 ** 20 : Infinity);
    this.minSharedTokens = options.minSharedTokens ?? 8;
    // KV reused across sequences must be what each sequence would compute itself.
    if (this.prefixSharing && !reusableKv(engine.config)) {
      if (options.prefixSharing) throw new InvalidArgumentError('prefix_sharing', `${engine.config.modelType}: positions depend on the sequence length`);
      this.prefixSharing = false;
    }
    if (this.prefixSharing) {
      const budget = options.prefixCacheBytes ?? 2 ** 30;
      this.cache = new PrefixCache(engine.kvBytesPerToken, budget, (handle) => engine.dropPast({ handle, validLengths: [], length: 0 }));
    }
  }

  private get planOptions(): PlanOptions {
    return {
      maxBatchTokens: this.maxBatchTokens,
      maxAttentionCells: Math.floor(this.maxAttentionBytes / (this.engine.config.numHeads * 4)),
      maxPastSlots: Math.floor(this.maxPastBytes / this.engine.kvBytesPerToken),
    };
  }

  /** The passes that score `units` as whole rows, as with a cold cache and nothing
   * shared (pure: nothing runs). */
  plan(units: readonly Unit[]): Plan {
    return planUnits(units, this.planOptions);
  }

  /** Score units: the scores in unit order and the work done. */
  scoreUnits(units: readonly Unit[], options: RunOptions = {}): Promise<PlanResult> {
    const cache = this.cache;
    if (!cache) return runPlan(this.engine, units, this.plan(units), options);
    return this.exclusive(() => scoreWithCache(this.engine, cache, units, { planOptions: this.planOptions, minSharedTokens: this.minSharedTokens }, options));
  }

  /** Run `fn` after every earlier user of the cache has finished (pins and inserts assume
   * one at a time). */
  private exclusive<T>(fn: () => Promise<T>): Promise<T> {
    const run = this.queue.then(fn);
    this.queue = run.catch(() => {});
    return run;
  }
}
