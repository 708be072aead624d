// lm-evaluation-harness request semantics: how continuation, rolling and echo requests
// become units (units.ts) and how the units' scores become answers. Above the batcher:
// it validates (throwing InvalidArgumentError naming the field) and encodes; it never
// runs the model.
import type { TextTokenizer } from '../text/tokenizer.js';
import { InvalidArgumentError, checkTokenIds } from '../common/errors.js';
import type { Prepared, Unit, UnitScore } from '../core/units.js';
import type { Scorer } from '../core/scorer.js';
import {
  type ContextScore,
  type ContinuationScore,
  type EchoScore,
  type LoglikelihoodRequest,
  type MinK,
  type RollingRequest,
  type RollingScore,
} from './scoring-types.js';

export * from './scoring-types.js';

// Python's str.isspace() set, for the harness's rstrip().
const TRAILING_WS = /[\t\n\v\f\r\x1c-\x1f \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]+$/u;

/** The whitespace at the end of `text` that the harness's rstrip() takes off. */
export const trailingWhitespace = (text: string): string => TRAILING_WS.exec(text)?.[0] ?? '';

/** A promise whose rejection is handled where it is awaited, and never reported as
 * unhandled if validation stops before that (it would take the process down). */
export function quiet<T>(p: Promise<T>): Promise<T> {
  p.catch(() => {});
  return p;
}

export interface EncoderLimits {
  vocabSize: number;
  /** Continuations per item. */
  maxContinuations?: number;
  /** Model context length used for truncation and windows. */
  maxLength: number;
  /** Largest top-k a request may ask for. */
  maxTopK: number;
}

/** The encoder of a model's requests, within its scorer's limits (context length, top-k). */
export function encoderFor(scorer: Scorer, maxContinuations?: number): RequestEncoder {
  return new RequestEncoder(scorer.engine.tokenizer, {
    vocabSize: scorer.engine.config.vocabSize,
    maxLength: scorer.maxLength,
    maxTopK: scorer.maxTopK,
    maxContinuations,
  });
}

/** Requests scored on a scorer directly: no queue, no limits, no metrics. The reference
 * path of the core's own tests and benchmarks (what batching, caching and the serving
 * layer must not change); a client's call, the CLI's included, goes through Service. */
export function directScoring(scorer: Scorer) {
  const encoder = encoderFor(scorer);
  const run = async <T>(prepared: Prepared<T>): Promise<T> => prepared.finish((await scorer.scoreUnits(prepared.units)).scores);
  return {
    encoder,
    prepareLoglikelihood: (requests: LoglikelihoodRequest[]) => encoder.prepareLoglikelihood(requests),
    prepareRolling: (requests: RollingRequest[]) => encoder.prepareRolling(requests),
    prepareEcho: (prompts: number[][], topK: number) => encoder.prepareEcho(prompts, topK),
    loglikelihood: async (requests: LoglikelihoodRequest[]) => run(await encoder.prepareLoglikelihood(requests)),
    rolling: async (requests: RollingRequest[]) => run(await encoder.prepareRolling(requests)),
  };
}

export class RequestEncoder {
  readonly vocabSize: number;
  readonly maxLength: number;
  readonly maxTopK: number;
  readonly maxContinuations: number;

  constructor(
    readonly tokenizer: TextTokenizer,
    limits: EncoderLimits,
  ) {
    this.vocabSize = limits.vocabSize;
    this.maxLength = limits.maxLength;
    this.maxTopK = limits.maxTopK;
    this.maxContinuations = limits.maxContinuations ?? 256;
  }

  /** `_encode_pair`: trailing whitespace of the context moves to the continuation; the
   * continuation's tokens are those of encode(context + continuation) past the context's.
   * `contextIds`: the context's encoding when the caller already asked for it (several
   * continuations of one context). */
  async encodePair(context: string, continuation: string, addBos = false, contextIds?: Promise<number[]>): Promise<EncodedPair> {
    const tok = this.tokenizer;
    if (context === '') return { context: [tok.prefixTokenId], continuation: await tok.encodeAsync(continuation, addBos) };
    const spaces = trailingWhitespace(context);
    const stripped = context.slice(0, context.length - spaces.length);
    const [whole, ctx0] = await Promise.all([
      tok.encodeAsync(stripped + spaces + continuation, addBos),
      contextIds ?? tok.encodeAsync(stripped, addBos),
    ]);
    // A whitespace-only context encodes to nothing: score after the prefix token instead.
    const ctx = ctx0.length === 0 ? [tok.prefixTokenId] : ctx0;
    return { context: ctx, continuation: whole.slice(ctx0.length) };
  }

  /** The context as encodePair encodes it, to share among its continuations. */
  private contextEncoding(context: string, addBos: boolean): Promise<number[]> | undefined {
    if (context === '') return undefined;
    const spaces = trailingWhitespace(context);
    return quiet(this.tokenizer.encodeAsync(context.slice(0, context.length - spaces.length), addBos));
  }

  private checkTokens(ids: number[], field: string): void {
    checkTokenIds(ids, this.vocabSize, field);
  }

  /** Turn (context, continuation) tokens into a unit, as `_loglikelihood_tokens` slices:
   * input = (ctx + cont)[-(L+1):][:-1], the last len(cont) positions scored. */
  private toUnit(
    ctx: number[],
    cont: number[],
    topK: number,
    truncation: 'left' | 'error',
    field: string,
  ): { unit: Unit; truncated: number } {
    const L = this.maxLength;
    if (cont.length > L) throw new InvalidArgumentError(field, `continuation has ${cont.length} tokens, more than the maximum length ${L}`);
    const all = ctx.concat(cont);
    const dropped = Math.max(0, all.length - (L + 1));
    if (dropped > 0 && truncation === 'error') {
      throw new InvalidArgumentError(
        field,
        `context + continuation is ${all.length - 1} tokens, over the maximum length ${L} (truncation: error)`,
      );
    }
    const input = all.slice(dropped, all.length - 1);
    const split = input.length - cont.length;
    return { unit: { prefix: input.slice(0, split), tail: input.slice(split), targets: cont, topK }, truncated: dropped };
  }

  /** Validate and encode requests into units (throws InvalidArgumentError before any work is
   * queued); `finish` turns the units' scores into answers. */
  async prepareLoglikelihood(requests: LoglikelihoodRequest[]): Promise<Prepared<ContinuationScore[][]>> {
    const items = requests.map((req, i) => this.checkLoglikelihood(req, i));
    // Every text encoding of the request is asked for first (the tokenizer's workers take
    // them in a stream), then awaited together; checks on the tokens run item by item.
    const encoded = await encodedItems(items.map((item) => this.encodeContinuations(item)));
    return jointJob(items.map((item, i) => this.loglikelihoodJob(item, encoded[i]!)));
  }

  /** An item's checks, in field order, before anything of the request is encoded. */
  private checkLoglikelihood(req: LoglikelihoodRequest, index: number): CheckedItem {
    const field = req.field ?? `items[${index}]`;
    const topK = req.topK ?? 0;
    if (!Number.isInteger(topK) || topK < 0 || topK > this.maxTopK) {
      throw new InvalidArgumentError(`${field}.top_k`, `must be a whole number in [0, ${this.maxTopK}] (got ${topK})`);
    }
    const truncation = req.truncation ?? 'left';
    if (truncation !== 'left' && truncation !== 'error')
      throw new InvalidArgumentError(`${field}.truncation`, `must be left or error (got ${truncation})`);
    if (req.continuations.length === 0) throw new InvalidArgumentError(`${field}.continuations`, 'at least one continuation is needed');
    if (req.continuations.length > this.maxContinuations) {
      throw new InvalidArgumentError(
        `${field}.continuations`,
        `${req.continuations.length} continuations, over the limit of ${this.maxContinuations} per item`,
      );
    }
    const tokCtx = typeof req.context === 'string' ? undefined : req.context;
    if (tokCtx) this.checkTokens(tokCtx, `${field}.context_ids`);
    const neutral = req.unconditionalContext;
    if (neutral !== undefined) {
      if (typeof neutral !== typeof req.context || Array.isArray(neutral) !== Array.isArray(req.context))
        throw new InvalidArgumentError(
          `${field}.unconditional`,
          'the neutral context must be of the same kind as the context (text or token ids)',
        );
      if (Array.isArray(neutral)) this.checkTokens(neutral, `${field}.unconditional_ids`);
    }
    req.continuations.forEach((cont, j) => {
      const cfield = `${field}.continuations[${j}]`;
      if (cont.length === 0) throw new InvalidArgumentError(cfield, 'continuation is empty');
      if (typeof cont === 'string' && typeof req.context === 'string') return;
      if (typeof cont !== 'string' && tokCtx) this.checkTokens(cont, cfield);
      else throw new InvalidArgumentError(cfield, 'context and continuations must both be text or both be token ids');
    });
    return { request: req, field, topK, truncation };
  }

  /** Ask for a checked item's encodings, one (context, continuation) pair per continuation
   * and its pair after the neutral context; token ids are their own encoding. */
  private encodeContinuations({ request: req, field }: CheckedItem): ContinuationEncoding[] {
    const { context, unconditionalContext: neutral } = req;
    const addBos = req.addBos ?? false;
    if (typeof context === 'string') {
      const sharedContext = this.contextEncoding(context, addBos);
      const sharedNeutral = typeof neutral === 'string' ? this.contextEncoding(neutral, addBos) : undefined;
      return req.continuations.map((cont, j) => {
        const text = cont as string; // checked: the same kind as the context
        return {
          field: `${field}.continuations[${j}]`,
          text,
          pair: quiet(this.encodePair(context, text, addBos, sharedContext)),
          ...(typeof neutral === 'string' ? { unconditional: quiet(this.encodePair(neutral, text, addBos, sharedNeutral)) } : {}),
        };
      });
    }
    const orPrefix = (ids: number[]) => (ids.length > 0 ? ids : [this.tokenizer.prefixTokenId]);
    return req.continuations.map((cont, j) => {
      const ids = cont as number[]; // checked: the same kind as the context
      return {
        field: `${field}.continuations[${j}]`,
        text: this.tokenizer.decode(ids),
        pair: Promise.resolve({ context: orPrefix(context), continuation: ids }),
        ...(Array.isArray(neutral) ? { unconditional: Promise.resolve({ context: orPrefix(neutral), continuation: ids }) } : {}),
      };
    });
  }

  /** One item's units — each continuation's, followed by its unconditional one, then the
   * context's windows — and its answers from their scores. */
  private loglikelihoodJob(item: CheckedItem, continuations: EncodedContinuation[]): Prepared<ContinuationScore[]> {
    const units: Unit[] = [];
    const planned = continuations.map(({ field, text, pair, unconditional }): PlannedContinuation => {
      if (pair.continuation.length === 0) throw new InvalidArgumentError(field, 'continuation adds no tokens after the context');
      const { unit, truncated } = this.toUnit(pair.context, pair.continuation, item.topK, item.truncation, field);
      const main = units.push(unit) - 1;
      const neutralUnit =
        unconditional &&
        this.toUnit(unconditional.context, unconditional.continuation, 0, item.truncation, `${field} (after the neutral context)`).unit;
      return {
        main,
        unconditional: neutralUnit ? units.push(neutralUnit) - 1 : undefined,
        numChars: [...text].length,
        numBytes: Buffer.byteLength(text, 'utf8'),
        truncated,
      };
    });
    // The context as encoded for its continuations; a long one in rolling windows.
    let context: PlannedContext | undefined;
    if (item.request.contextLogprobs) {
      const tokens = continuations[0]!.pair.context;
      const windows = tokens.length > 1 ? rollingWindows(tokens.slice(1), tokens[0]!, this.maxLength) : [];
      context = { tokens, first: units.length, count: windows.length };
      for (const [c, t] of windows) units.push(this.toUnit(c, t, 0, 'left', continuations[0]!.field).unit);
    }
    const finish = (scores: UnitScore[]) => {
      const contextAnswer = context && contextScore(context, scores);
      return planned.map((p) => continuationAnswer(p, units[p.main]!, scores, contextAnswer));
    };
    return { units, finish };
  }

  // ---- every-token scoring (OpenAI-style `echo`) ----------------------------------------

  /** Log-probs of every prompt token after the first, plus the greedy next token and its
   * log-prob, with the top-k alternatives at every position: what an OpenAI-compatible
   * `echo: true, logprobs: k, max_tokens: 1` answer needs. One unit per prompt, every
   * position scored; prompts sharing a prefix share it through the scorer's prefix cache
   * (the last target is a placeholder: that position's answer is its top-k). */
  prepareEcho(prompts: number[][], topK: number): Prepared<EchoScore[]> {
    prompts.forEach((p, i) => {
      if (p.length === 0) throw new InvalidArgumentError(`prompt[${i}]`, 'prompt is empty');
      this.checkTokens(p, `prompt[${i}]`);
      if (p.length > this.maxLength)
        throw new InvalidArgumentError(`prompt[${i}]`, `${p.length} tokens, over the maximum length ${this.maxLength}`);
    });
    if (!Number.isInteger(topK) || topK < 0 || topK > this.maxTopK)
      throw new InvalidArgumentError('logprobs', `must be a whole number in [0, ${this.maxTopK}]`);
    const k = Math.max(1, topK);
    const units: Unit[] = prompts.map((p) => ({ prefix: [], tail: p, targets: [...p.slice(1), 0], topK: k }));
    const finish = (scores: UnitScore[]) =>
      prompts.map((p, i) => {
        const { logprobs, topK: top } = scores[i]!;
        const last = top![top!.length - 1]!;
        return {
          promptLogprobs: logprobs.slice(0, -1), // for p[1..]
          top: top!, // for positions 0..n-1 (the last: the next token)
          nextToken: last.ids[0]!,
          nextLogprob: last.logprobs[0]!,
          length: p.length,
        };
      });
    return { units, finish };
  }

  async prepareRolling(requests: RollingRequest[]): Promise<Prepared<RollingScore[]>> {
    const units: Unit[] = [];
    const spans: { tokens: number[]; first: number; count: number; ks: number[]; skip: boolean }[] = [];
    const checkK = (k: number, field: string) => {
      if (!(k > 0 && k <= 100)) throw new InvalidArgumentError(field, `must be in (0, 100] (got ${k})`);
    };
    const encoded = await Promise.all(
      requests.map((req, i) => {
        checkK(req.minKPercent ?? 20, `items[${i}].min_k_percent`);
        (req.minKPercents ?? []).forEach((k, j) => checkK(k, `items[${i}].min_k_percents[${j}]`));
        const rule = req.minKRule ?? 'at-least-one';
        if (rule !== 'at-least-one' && rule !== 'skip')
          throw new InvalidArgumentError(`items[${i}].min_k_rule`, `must be at-least-one or skip (got ${rule})`);
        if (typeof req.text === 'string') return quiet(this.tokenizer.encodeAsync(req.text, false));
        this.checkTokens(req.text, `items[${i}].token_ids`);
        return req.text;
      }),
    );
    requests.forEach((req, i) => {
      const field = `items[${i}]`;
      const tokens = encoded[i]!;
      if (tokens.length === 0) throw new InvalidArgumentError(`${field}.text`, 'text is empty');
      if (req.skipFirstToken && tokens.length < 2)
        throw new InvalidArgumentError(`${field}.text`, 'one token: with skip_first_token nothing is predicted');
      // KIEval: the first token is context only, in place of the prefix token.
      const windows = req.skipFirstToken
        ? rollingWindows(tokens.slice(1), tokens[0]!, this.maxLength)
        : rollingWindows(tokens, this.tokenizer.prefixTokenId, this.maxLength);
      const ks = [req.minKPercent ?? 20, ...(req.minKPercents ?? [])];
      spans.push({ tokens, first: units.length, count: windows.length, ks, skip: req.minKRule === 'skip' });
      for (const [ctx, cont] of windows) units.push(this.toUnit(ctx, cont, 0, 'left', field).unit);
    });
    const finish = (scored: UnitScore[]) =>
      spans.map(({ tokens, first, count, ks, skip }) => {
        const logprobs = scored.slice(first, first + count).flatMap((s) => s.logprobs);
        const sum = logprobs.reduce((a, b) => a + b, 0);
        const n = logprobs.length;
        const sorted = [...logprobs].sort((a, b) => a - b);
        const minK = ks.map((kPercent) => minKOf(sorted, kPercent, skip));
        return {
          logprob: sum,
          numTokens: n,
          meanLoss: -sum / n,
          perplexity: Math.exp(-sum / n),
          minKPercent: ks[0]!,
          minKLogprob: minK[0]!.logprob,
          minK,
          tokenIds: tokens,
          tokenLogprobs: logprobs,
          numWindows: count,
        };
      });
    return { units, finish };
  }
}

/** A (context, continuation) pair as tokens. */
interface EncodedPair {
  context: number[];
  continuation: number[];
}

/** A loglikelihood item whose fields passed their checks. */
interface CheckedItem {
  request: LoglikelihoodRequest;
  /** How error messages name it. */
  field: string;
  topK: number;
  truncation: 'left' | 'error';
}

/** A continuation whose encodings have been asked for. */
interface ContinuationEncoding {
  field: string;
  /** The continuation as text: its length in characters and bytes is answered. */
  text: string;
  pair: Promise<EncodedPair>;
  /** The same continuation after the neutral context. */
  unconditional?: Promise<EncodedPair>;
}

/** A continuation with its encodings. */
interface EncodedContinuation {
  field: string;
  text: string;
  pair: EncodedPair;
  unconditional?: EncodedPair;
}

/** Where a continuation's answer comes from: its unit (and its unconditional one) in its
 * item's units, and what the answer tells of the continuation as given. */
interface PlannedContinuation {
  main: number;
  unconditional?: number;
  numChars: number;
  numBytes: number;
  truncated: number;
}

/** An item's context scored on its own: its tokens and its windows' units in the item's. */
interface PlannedContext {
  tokens: number[];
  first: number;
  count: number;
}

/** Every item's encodings awaited at once (a request fails with the first that fails),
 * each item's continuations back in their places. */
async function encodedItems(items: ContinuationEncoding[][]): Promise<EncodedContinuation[][]> {
  const all = items.flat();
  const [pairs, neutralPairs] = await Promise.all([Promise.all(all.map((c) => c.pair)), Promise.all(all.map((c) => c.unconditional))]);
  const encoded = all.map(({ field, text }, k) => ({ field, text, pair: pairs[k]!, unconditional: neutralPairs[k] }));
  let end = 0;
  return items.map((item) => encoded.slice(end, (end += item.length)));
}

/** Jobs run as one: their units one after another, each job finished from its own range of
 * the outputs. */
function jointJob<T>(jobs: Prepared<T>[]): Prepared<T[]> {
  let end = 0;
  const ranges = jobs.map((job) => ({ job, start: end, end: (end += job.units.length) }));
  return {
    units: jobs.flatMap((job) => job.units),
    finish: (scores) => ranges.map(({ job, start, end }) => job.finish(scores.slice(start, end))),
  };
}

const sum = (v: number[]) => v.reduce((a, b) => a + b, 0);

/** The context's own log-likelihood, from its windows' scores. */
function contextScore(context: PlannedContext, scores: UnitScore[]): ContextScore {
  const tokenLogprobs = scores.slice(context.first, context.first + context.count).flatMap((s) => s.logprobs);
  return { tokenIds: context.tokens.slice(1), tokenLogprobs, logprob: sum(tokenLogprobs), numTokens: tokenLogprobs.length };
}

/** A continuation's answer from its unit's scores (and its unconditional unit's). */
function continuationAnswer(
  planned: PlannedContinuation,
  unit: Unit,
  scores: UnitScore[],
  context: ContextScore | undefined,
): ContinuationScore {
  const s = scores[planned.main]!;
  const logprob = sum(s.logprobs);
  const answer: ContinuationScore = {
    logprob,
    isGreedy: s.greedy.every(Boolean),
    tokenIds: unit.targets,
    tokenLogprobs: s.logprobs,
    tokenGreedy: s.greedy,
    numTokens: unit.targets.length,
    numChars: planned.numChars,
    numBytes: planned.numBytes,
    topK: s.topK,
    truncatedTokens: planned.truncated,
    meanLogprob: logprob / unit.targets.length,
  };
  if (context) answer.context = context;
  if (planned.unconditional !== undefined) {
    const u = scores[planned.unconditional]!;
    const ulp = sum(u.logprobs);
    answer.unconditional = { logprob: ulp, numTokens: u.logprobs.length, tokenLogprobs: u.logprobs, difference: logprob - ulp };
  }
  return answer;
}

/** Min-K% Prob from ascending token log-probs: the mean of the lowest ⌊n·k/100⌋; with
 * fewer than one, the single lowest, or (KIEval's rule, `skip`) none. */
export function minKOf(ascending: number[], kPercent: number, skip: boolean): MinK {
  const exact = Math.floor((ascending.length * kPercent) / 100);
  if (exact === 0 && skip) return { kPercent, count: 0, logprob: NaN, skipped: true };
  const count = Math.max(1, exact);
  return { kPercent, count, logprob: ascending.slice(0, count).reduce((a, b) => a + b, 0) / count, skipped: false };
}

/** lm-evaluation-harness `get_rolling_token_windows` (context_len = 1) followed by
 * `make_disjoint_window`: (context, continuation) pairs that predict every token once. */
export function rollingWindows(tokens: number[], prefixToken: number, maxLength: number): [number[], number[]][] {
  const windows: [number[], number[]][] = [];
  if (tokens.length === 0) return windows;
  const predLen = maxLength; // max_seq_len - context_len + 1 with context_len = 1
  const firstLen = Math.min(maxLength, tokens.length);
  windows.push([[prefixToken, ...tokens.slice(0, firstLen - 1)], tokens.slice(0, firstLen)]);
  let predicted = firstLen;
  while (predicted < tokens.length) {
    const windowPredLen = Math.min(tokens.length - predicted, predLen);
    const windowEnd = predicted + windowPredLen;
    windows.push([tokens.slice(windowEnd - maxLength - 1, windowEnd - 1), tokens.slice(windowEnd - windowPredLen, windowEnd)]);
    predicted += windowPredLen;
  }
  // make_disjoint_window: a[: len(a) - (len(b) - 1)]
  return windows.map(([a, b]) => [a.slice(0, a.length - (b.length - 1)), b]);
}
