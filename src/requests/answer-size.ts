// What an answer holds, counted from the request before any work is queued: the values it
// will carry (log-probs, flags, ids, alternatives, attention statistics, heatmap cells), so
// the serving layer can refuse an answer over --max-answer-values before computing it.
// An answer is built and serialised on the event loop in one piece (gRPC and JSON alike):
// measured here, 125 items × 1,040 continuation tokens with 100 alternatives each (13.1M
// values, under the old token limit) grew the heap past 4.5 GiB and aborted the process.
import type { Unit } from '../core/units.js';
import type { PreparedSample } from './probe.js';

/** A scored token is one value (its log-prob, flag and id together), plus one per
 * alternative asked. */
export function scoredValues(units: readonly Unit[]): number {
  return units.reduce((n, u) => n + u.targets.length * (1 + u.topK), 0);
}

/** An echo: every prompt token's log-prob and `topK` alternatives at each position. */
export function echoValues(prompts: readonly number[][], topK: number): number {
  return prompts.reduce((n, p) => n + p.length * (1 + Math.max(0, topK)), 0);
}

/** A prepared probe sample's size: its chunks, tokens and query tokens. */
export function probeSize(p: PreparedSample): { chunks: number; tokens: number; queryTokens: number } {
  return { chunks: p.seg.segments.length, tokens: p.row.tokens.length, queryTokens: p.row.queryWeights.filter((w) => w !== 0).length };
}

/** A probe sample's statistics: per layer, votes and mass over its chunks (and per head
 * when asked) and the excluded shares; the segments × segments heatmap; its tokens' ids;
 * the query tokens' log-probs when asked. */
export function probeValues(
  sample: { chunks: number; tokens: number; queryTokens: number },
  opts: { perHead: boolean; heatmap: boolean; logprobs: boolean },
  model: { layers: number; heads: number },
): number {
  const perLayer = model.layers * (sample.chunks + 1) * 2 * (opts.perHead ? 1 + model.heads : 1);
  const heatmap = opts.heatmap ? sample.chunks * (sample.chunks + 1) : 0;
  return perLayer + heatmap + sample.tokens + (opts.logprobs ? sample.queryTokens : 0);
}

/** A generation: each choice's tokens with their log-probs and `logprobs` alternatives,
 * and with attention per token its votes and mass per layer over the prompt's chunks. */
export function generationValues(
  prompts: number,
  params: { n: number; maxTokens: number; logprobs: number },
  attention?: { chunks: number; layers: number },
): number {
  const perToken = 1 + params.logprobs + (attention ? attention.layers * (attention.chunks + 2) * 2 : 0);
  return prompts * params.n * params.maxTokens * perToken;
}
