// The unit of scoring work, between request semantics (requests.ts) and forward passes
// (planner.ts, runner.ts): the tokens before the first scored input position
// (`prefix`), the input tokens whose logits are scored (`tail`) and what they must
// predict (`targets`). Units with the same prefix can share one prefix pass.

import type { KeyRange } from '../engine.js';

export type { KeyRange };

export interface Unit {
  prefix: number[];
  tail: number[];
  targets: number[];
  topK: number;
  /** Positions whose keys the queries after them do not see (attribution's `mask`): a
   * query at or after a range's end does not see its keys. The sequence before the first
   * range's end is the plain one (computed as usual, shared); queries after it run with
   * the ranges that ended before them masked. */
  hidden?: KeyRange[];
}

/** Where a unit stops being its plain sequence: the first end of a hidden range
 * (`Infinity` without). */
export const maskedFrom = (u: { hidden?: KeyRange[] }) => Math.min(Infinity, ...(u.hidden ?? []).map((h) => h.end));

export interface TopK {
  ids: number[];
  logprobs: number[];
}

export interface UnitScore {
  logprobs: number[];
  greedy: boolean[];
  topK?: TopK[];
}

/** Tokens a unit costs to compute in full (its queue and budget weight). */
export const unitTokens = (u: Unit) => u.prefix.length + u.tail.length;

/** Requests turned into units, and how to turn the units' scores back into answers. */
export interface Prepared<T> {
  units: Unit[];
  finish(scores: UnitScore[]): T;
}
