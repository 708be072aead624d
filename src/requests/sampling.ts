// What a generation request asks of sampling, checked, and how each token is drawn from
// a step's distribution (generate.ts): temperature → top-k → top-p → min-p, then one
// uniform draw; at temperature 0 the argmax.
import { InvalidArgumentError } from '../common/errors.js';
import type { TopK } from '../core/units.js';

export interface SamplingParams {
  /** 0: greedy. */
  temperature: number;
  /** 1: off. */
  topP: number;
  /** 0: off. */
  topK: number;
  /** 0: off. */
  minP: number;
  /** Same seed, same tokens (whatever else shares the passes); absent: a random one. */
  seed?: number;
  maxTokens: number;
  /** Strings that end a choice, matched on its text across token boundaries; not returned. */
  stop: string[];
  /** Choices per prompt. */
  n: number;
  /** Alternatives reported per generated token (0: none). */
  logprobs: number;
  /** Do not stop at the end-of-sequence token. */
  ignoreEos?: boolean;
}

/** The fields a request names its sampling options by, where they are not the
 * completions API's (chat: `top_logprobs`, `max_completion_tokens`). */
export type SamplingFieldNames = Partial<Record<'logprobs' | 'max_tokens', string>>;

const needer =
  (names: SamplingFieldNames) =>
  (ok: boolean, field: string, what: string): void => {
    if (!ok) throw new InvalidArgumentError(names[field as keyof SamplingFieldNames] ?? field, what);
  };

/** Check the options of how tokens are drawn and when a choice ends (temperature, top_p,
 * top_k, min_p, seed, n, stop), naming the field: also what a scoring request (one greedy
 * token) is given of them, so that it refuses what generation refuses. */
export function checkSamplingOptions(p: Omit<SamplingParams, 'maxTokens' | 'logprobs'>): void {
  const need = needer({});
  need(Number.isFinite(p.temperature) && p.temperature >= 0, 'temperature', 'must be a number ≥ 0');
  need(Number.isFinite(p.topP) && p.topP > 0 && p.topP <= 1, 'top_p', 'must be in (0, 1]');
  need(Number.isInteger(p.topK) && p.topK >= 0, 'top_k', 'must be a whole number ≥ 0 (0 or -1: off)');
  need(Number.isFinite(p.minP) && p.minP >= 0 && p.minP <= 1, 'min_p', 'must be in [0, 1]');
  // OpenAI's seed is an int64 (JSON numbers past 2⁵³ arrive rounded, still whole).
  need(p.seed === undefined || (Number.isInteger(p.seed) && Math.abs(p.seed) <= 2 ** 63), 'seed', 'must be a whole number in [-2⁶³, 2⁶³]');
  need(Number.isInteger(p.n) && p.n >= 1 && p.n <= 64, 'n', 'must be a whole number in [1, 64]');
  need(
    p.stop.length <= 16 && p.stop.every((s) => s.length > 0 && s.length <= 256),
    'stop',
    'at most 16 non-empty strings of at most 256 characters',
  );
}

/** Check sampling parameters, naming the field (OpenAI's names). */
export function checkSampling(
  p: SamplingParams,
  promptLength: number,
  model: { maxLength: number },
  maxTopK: number,
  names: SamplingFieldNames = {},
): void {
  const need = needer(names);
  checkSamplingOptions(p);
  need(Number.isInteger(p.maxTokens) && p.maxTokens >= 1, 'max_tokens', 'must be a whole number ≥ 1 to generate');
  need(Number.isInteger(p.logprobs) && p.logprobs >= 0 && p.logprobs <= maxTopK, 'logprobs', `must be a whole number in [0, ${maxTopK}]`);
  need(promptLength >= 1, 'prompt', 'must hold at least one token');
  if (promptLength + p.maxTokens > model.maxLength)
    throw new InvalidArgumentError(
      names.max_tokens ?? 'max_tokens',
      `the prompt's ${promptLength} tokens plus ${p.maxTokens} to generate exceed the model's ${model.maxLength} positions`,
    );
}

/** Sample a token from log-probs `logp`: temperature, then top-k, top-p and min-p (the order
 * of Hugging Face's logits warpers), then one uniform draw `u` in [0, 1). */
export function sampleToken(logp: Float32Array, p: Pick<SamplingParams, 'temperature' | 'topK' | 'topP' | 'minP'>, u: number): number {
  if (p.temperature === 0) return argmax(logp);
  const V = logp.length;
  const best = logp[argmax(logp)]!;
  // Weights relative to the most likely token: exp((logp − max) / T), in float64.
  let ids: number[] | undefined;
  const weight = new Float64Array(V);
  for (let i = 0; i < V; i++) weight[i] = Math.exp((logp[i]! - best) / p.temperature);
  if ((p.topK > 0 && p.topK < V) || p.topP < 1) {
    ids = Array.from({ length: V }, (_, i) => i).sort((a, b) => weight[b]! - weight[a]! || a - b);
    if (p.topK > 0 && p.topK < V) {
      // Ties with the k-th keep their place (as masking logits below the k-th does).
      const kth = weight[ids[p.topK - 1]!]!;
      let k = p.topK;
      while (k < V && weight[ids[k]!]! === kth) k++;
      ids = ids.slice(0, k);
    }
    if (p.topP < 1) {
      const total = ids.reduce((n, i) => n + weight[i]!, 0);
      let cum = 0;
      let keep = 0;
      while (keep < ids.length && (keep === 0 || cum < p.topP * total)) cum += weight[ids[keep++]!]!;
      ids = ids.slice(0, keep);
    }
  }
  const candidates = ids ?? Array.from({ length: V }, (_, i) => i);
  // min-p: tokens at least min_p times as likely as the most likely one (weight 1).
  const kept = p.minP > 0 ? candidates.filter((i) => weight[i]! >= p.minP) : candidates;
  const total = kept.reduce((n, i) => n + weight[i]!, 0);
  let r = u * total;
  for (const i of kept) {
    r -= weight[i]!;
    if (r < 0) return i;
  }
  return kept.at(-1)!;
}

/** The first index of the maximum (torch.argmax on ties). */
export function argmax(values: Float32Array): number {
  let best = 0;
  for (let i = 1; i < values.length; i++) if (values[i]! > values[best]!) best = i;
  return best;
}

/** The `k` most likely tokens, most likely first (ties: lower id first). */
export function topOf(logp: Float32Array, k: number): TopK {
  const ids: number[] = [];
  for (let i = 0; i < logp.length; i++) {
    if (ids.length === k && logp[i]! <= logp[ids[k - 1]!]!) continue;
    let at = ids.length === k ? k - 1 : ids.length;
    if (ids.length < k) ids.push(i);
    while (at > 0 && logp[ids[at - 1]!]! < logp[i]!) {
      ids[at] = ids[at - 1]!;
      at--;
    }
    ids[at] = i;
  }
  return { ids, logprobs: ids.map((i) => logp[i]!) };
}
