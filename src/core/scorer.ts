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
    // The provider's defaults, and the measurements behind them: common/providers.ts.
    const defaults = engine.device.profile;
    const { default: passTokens, simpleCache } = defaults.maxBatchTokens;
    this.maxBatchTokens = options.maxBatchTokens ?? (simpleCache !== undefined && engine.device.bufferCache === 'simple' ? simpleCache : passTokens);
    this.prefixSharing = options.prefixSharing ?? true;
    this.maxTopK = options.maxTopK ?? 100;
    this.maxAttentionBytes = options.maxAttentionBytes ?? defaults.maxAttentionBytes;
    this.maxPastBytes = options.maxPastBytes ?? defaults.maxPastBytes;
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

  /** KV this model holds now and what it may hold: the prefix cache's bytes (kept between
   * rounds, and pinned or added by the round running) plus the running passes' own, over
   * the cache's budget plus one pass's (its past bound, where the device has one, and its
   * new positions). The model server protocol's KV-cache use is their ratio. */
  kvUse(): { bytes: number; budgetBytes: number; bytesPerToken: number } {
    const bytesPerToken = this.engine.kvBytesPerToken;
    const pass = (Number.isFinite(this.maxPastBytes) ? this.maxPastBytes : 0) + this.maxBatchTokens * bytesPerToken;
    return {
      bytes: (this.cache?.bytes ?? 0) + this.engine.runningPassKvBytes,
      budgetBytes: (this.cache?.budget ?? 0) + pass,
      bytesPerToken,
    };
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
