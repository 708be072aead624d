// The unit of work, between request semantics (a request kind's `prepare` and `finish`:
// src/requests/: scoring.ts, probe.ts, attribution.ts, chunk-scores.ts) and forward passes
// (planner.ts, runner.ts): the tokens before the first input position whose output the
// unit needs (`prefix`), the input tokens whose outputs it needs (`tail`) and what they
// must predict (`targets`). Units with the same prefix can share one prefix pass and
// take it from the prefix cache. What a unit asks of its rows:
//   - log-probs of its targets (every tail position, or the `scored` ones), top-k;
//   - with `probe`: attention statistics over its rows (votes, mass, heatmap rows, raw
//     slices), from the same pass, which may hold other units' rows;
//   - with `next`: the whole distribution after its last token (a generation step, which
//     samples the next token from it; requests/generate.ts).

import type { KeyRange } from '../engine/engine.js';

export type { KeyRange };

export interface Unit {
  prefix: number[];
  tail: number[];
  /** The targets of the scored tail positions, in order. */
  targets: number[];
  /** Tail indices scored, ascending, one per target; absent: every tail position. */
  scored?: number[];
  topK: number;
  /** Positions whose keys the queries after them do not see (attribution's `mask`): a
   * query at or after a range's end does not see its keys. The sequence before the first
   * range's end is the plain one (computed as usual, shared); queries after it run with
   * the ranges that ended before them masked. */
  hidden?: KeyRange[];
  /** Length of the whole sequence when the unit's input stops short of it (a probe's rows
   * end at its last query token), for positions that depend on it (longrope). */
  sequenceLength?: number;
  /** Attention statistics over the tail's rows (a probe). */
  probe?: ProbeAsk;
  /** The log-prob distribution after the last input token comes back (`UnitScore.next`);
   * that token is computed even when the prefix cache holds it. */
  next?: boolean;
  /** With `next`: only the `nextTop` most likely tokens come back (`UnitScore.nextTop`), not
   * the whole distribution. A greedy step needs the first (TopK lists the lowest id first
   * on an exact tie, the argmax generation asks for) and the alternatives it reports; the
   * distribution was the most a step moved out of the graph (4 bytes a vocabulary entry:
   * 192 KiB a row for a 49k vocabulary, against a GPU step's 64 KiB target). */
  nextTop?: number;
  /** The prefix is expected in the prefix cache (a generation step continues the KV its
   * previous step put there): the queue weighs the tail only. */
  continues?: boolean;
  /** Its KV stays in the prefix cache after the round, pinned whatever the budget, until
   * the output's `kept` is released (a running generation's sequence: its next step
   * continues it, as vLLM holds a running request's blocks). */
  keep?: boolean;
  /** A link of a long unit run in parts (links.ts): its first `linkedFrom` positions are
   * the links' before it, already counted as requested there (and not reused here). */
  linkedFrom?: number;
}

/** What a probe unit asks of the attention of its rows. */
export interface ProbeAsk {
  /** Per input token (prefix then tail): 0..C−1 its chunk, C excluded from the keys. */
  keyBins: number[];
  /** C: the sample's chunks. */
  chunks: number;
  /** Per input token: its weight as a query (1 in the query chunks, 0 elsewhere). */
  queryWeights: number[];
  /** The per-row maps a heatmap is made of (needs every row: the prefix is empty). */
  heatmap: boolean;
  /** Raw probabilities of some layers, heads and query rows (runs alone, whole). */
  raw?: { layers: number[]; heads: number[]; queries: number[] };
  /** Compute the prefix into the prefix cache first, also for one unit alone (a dialogue's
   * context, probed again for its next query chunk). */
  cachePrefix?: boolean;
}

/** Per-unit attention sums in the unit's own bins (C chunks, C excluded, C+1 unused),
 * added up over the passes and query blocks that ran its rows. */
export interface ProbeSums {
  bins: number;
  /** [layers, heads, bins] */
  votes: Float32Array;
  sinkVotes: Float32Array;
  mass: Float32Array;
  sinkMass: Float32Array;
  /** [tokens, bins] by absolute position; rows not run stay zero (only with `heatmap`). */
  heat: Record<'max' | 'mean', { keyMax: Float32Array; keySum: Float32Array }>;
  keyCount: Float32Array;
  /** layer → [heads asked, queries asked, tokens] */
  raw: Map<number, Float32Array>;
}

/** Where a unit stops being its plain sequence: the first end of a hidden range
 * (`Infinity` without). */
export const maskedFrom = (u: { hidden?: KeyRange[] }) => Math.min(Infinity, ...(u.hidden ?? []).map((h) => h.end));

/** The tail index of target `j`. */
export const scoredIndex = (u: Unit, j: number) => (u.scored ? u.scored[j]! : j);

export interface TopK {
  ids: number[];
  logprobs: number[];
}

export interface UnitScore {
  logprobs: number[];
  greedy: boolean[];
  topK?: TopK[];
  /** Probe units: their attention sums. */
  probe?: ProbeSums;
  /** Units with `next`: log-probs over the vocabulary after the last input token. */
  next?: Float32Array;
  /** Units with `nextTop`: the most likely tokens after the last input token, best first. */
  nextTop?: TopK;
  /** Prefix positions whose KV came from the prefix cache as the round began (units that
   * share a prefix through the cache). */
  prefixReused?: number;
  /** Units with `keep`: the cached sequence's pin, to release once it is not needed. */
  kept?: KeptKv;
}

/** A pinned cached sequence; `release` unpins it (and lets the cache shrink to its budget). */
export interface KeptKv {
  release(): void;
}

/** What of a unit's score is not a finite number (the first found, in words), or
 * undefined: a model whose weights overflow float32 on an input gives NaN there, which is
 * never answered as a number. */
export function nonFiniteIn(s: UnitScore): string | undefined {
  const finite = (xs: ArrayLike<number>) => {
    for (let i = 0; i < xs.length; i++) if (!Number.isFinite(xs[i])) return false;
    return true;
  };
  if (!finite(s.logprobs)) return 'a log-prob';
  if (s.topK && !s.topK.every((t) => finite(t.logprobs))) return 'a top-k log-prob';
  if (s.next && !finite(s.next)) return 'the next-token distribution';
  if (s.nextTop && !finite(s.nextTop.logprobs)) return 'the next-token distribution';
  const p = s.probe;
  if (p && ![p.votes, p.mass, p.sinkVotes, p.sinkMass, p.keyCount, ...p.raw.values()].every(finite)) return 'the attention statistics';
  if (p && ![p.heat.max.keyMax, p.heat.max.keySum, p.heat.mean.keyMax, p.heat.mean.keySum].every(finite)) return 'the attention statistics';
  return undefined;
}

/** Tokens a unit costs to compute in full. */
export const unitTokens = (u: Unit) => u.prefix.length + u.tail.length;

/** Tokens a unit is expected to cost (its queue and round weight): a generation step's
 * prefix is cached. */
export const queueTokens = (u: Unit) => (u.continues ? u.tail.length : unitTokens(u));

/** Requests turned into units, and how to turn the units' outputs back into answers. */
export interface Prepared<T> {
  units: Unit[];
  finish(outputs: UnitScore[]): T;
}
