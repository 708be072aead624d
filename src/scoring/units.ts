// The unit of scoring work, between request semantics (requests.ts) and forward passes
// (planner.ts, runner.ts): the tokens before the first scored input position
// (`prefix`), the input tokens whose logits are scored (`tail`) and what they must
// predict (`targets`). Units with the same prefix can share one prefix pass.

export interface Unit {
  prefix: number[];
  tail: number[];
  targets: number[];
  topK: number;
}

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
