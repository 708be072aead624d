// The scorer of one model: its settings, the request encoder (harness semantics), and
// scoring units as plan → run. This is what the batcher, the CLI and tests call.
import type { Engine } from '../engine.js';
import { InvalidArgumentError } from '../errors.js';
import { plan, type Plan } from './planner.js';
import { runPlan, type PlanResult, type RunOptions } from './runner.js';
import {
  RequestEncoder,
  type ContinuationScore,
  type EchoScore,
  type LoglikelihoodRequest,
  type RollingRequest,
  type RollingScore,
} from './requests.js';
import type { Prepared, Unit } from './units.js';

export interface ScorerOptions {
  /** Padded tokens per forward pass (rows × longest row); default 1024 on CPU, 8192 on CUDA. */
  maxBatchTokens?: number;
  /** Model context length used for truncation and windows; default: the model's. */
  maxLength?: number;
  /** Share the KV cache of a common prefix; off computes every row in full. */
  prefixSharing?: boolean;
  /** Largest top-k a request may ask for. */
  maxTopK?: number;
  /** Continuations per item (default 256). */
  maxContinuations?: number;
  /** Bytes of one layer's attention scores a pass may build (default 256 MiB): longer
   * rows run in query blocks that shrink as their keys grow. */
  maxAttentionBytes?: number;
}

export class Scorer {
  readonly maxLength: number;
  readonly maxBatchTokens: number;
  readonly prefixSharing: boolean;
  readonly maxTopK: number;
  readonly maxAttentionBytes: number;
  readonly encoder: RequestEncoder;

  constructor(
    readonly engine: Engine,
    options: ScorerOptions = {},
  ) {
    this.maxLength = options.maxLength ?? engine.config.maxPositions;
    if (this.maxLength > engine.config.maxPositions) {
      throw new InvalidArgumentError('max_length', `${this.maxLength} exceeds the model's ${engine.config.maxPositions} positions`);
    }
    // Measured on the CPU (56M Llama, CHARPEval shapes): 512–1024 tokens per pass beat
    // 4096 by 25–40%, as larger attention and KV-gather tensors fall out of cache. GPUs
    // want large passes.
    this.maxBatchTokens = options.maxBatchTokens ?? (engine.device.kind === 'cuda' ? 8192 : 1024);
    this.prefixSharing = options.prefixSharing ?? true;
    this.maxTopK = options.maxTopK ?? 100;
    // Measured with bench/long.ts: with 1024-token blocks and no attention bound, scoring
    // 16k tokens peaked 2.4 GiB above the loaded model.
    this.maxAttentionBytes = options.maxAttentionBytes ?? 256 * 2 ** 20;
    this.encoder = new RequestEncoder(engine.tokenizer, {
      vocabSize: engine.config.vocabSize,
      maxLength: this.maxLength,
      maxTopK: this.maxTopK,
      maxContinuations: options.maxContinuations,
    });
  }

  prepareLoglikelihood(requests: LoglikelihoodRequest[]): Promise<Prepared<ContinuationScore[][]>> {
    return this.encoder.prepareLoglikelihood(requests);
  }

  prepareRolling(requests: RollingRequest[]): Promise<Prepared<RollingScore[]>> {
    return this.encoder.prepareRolling(requests);
  }

  prepareEcho(prompts: number[][], topK: number, minShared?: number): Prepared<EchoScore[]> {
    return this.encoder.prepareEcho(prompts, topK, minShared);
  }

  /** The passes that would score `units` (pure: nothing runs). */
  plan(units: readonly Unit[]): Plan {
    return plan(units, {
      maxBatchTokens: this.maxBatchTokens,
      prefixSharing: this.prefixSharing,
      maxAttentionCells: Math.floor(this.maxAttentionBytes / (this.engine.config.numHeads * 4)),
    });
  }

  /** Score units: plan the passes, run them; the scores in unit order and the work done. */
  scoreUnits(units: readonly Unit[], options: RunOptions = {}): Promise<PlanResult> {
    return runPlan(this.engine, units, this.plan(units), options);
  }

  async loglikelihood(requests: LoglikelihoodRequest[]): Promise<ContinuationScore[][]> {
    return this.run(await this.prepareLoglikelihood(requests));
  }

  async rolling(requests: RollingRequest[]): Promise<RollingScore[]> {
    return this.run(await this.prepareRolling(requests));
  }

  private async run<T>(prepared: Prepared<T>): Promise<T> {
    return prepared.finish((await this.scoreUnits(prepared.units)).scores);
  }
}
