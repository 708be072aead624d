// lm-evaluation-harness request semantics: how continuation, rolling and echo requests
// become units (units.ts) and how the units' scores become answers. Above the batcher:
// it validates (throwing InvalidArgumentError naming the field) and encodes; it never
// runs the model.
import type { TextTokenizer } from '../text/tokenizer.js';
import { InvalidArgumentError, checkTokenIds } from '../common/errors.js';
import { segmentIds, segmentText, type Segment } from './segments.js';
import type { Prepared, Unit, UnitScore } from '../core/units.js';
import type { Scorer } from '../core/scorer.js';
import {
  CONTINUATION_LABEL,
  type ChunkedPair,
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

/** A promise whose rejection is handled where it is awaited, and never reported as
 * unhandled if validation stops before that (it would take the process down). */
function quiet<T>(p: Promise<T>): Promise<T> {
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
  /** Encode an item whose context comes as labelled chunks. The continuations are encoded
   * as `prepareLoglikelihood` encodes them (the whole context, trailing whitespace moved to
   * the continuation); the chunks' spans come from tokenising the (stripped) chunk texts as
   * one text, which is that same context encoding. Refuses what the probe pass cannot
   * answer: top-k, the context's own or unconditional scores, and a context cut to fit. */
  async encodeChunked(req: LoglikelihoodRequest, field: string): Promise<ChunkedPair> {
    const chunks = req.contextChunks!;
    const refuse = (name: string, what: string) => {
      throw new InvalidArgumentError(
        `${field}.${name}`,
        `${what} is not available with context_chunks (the attention pass scores the continuations only)`,
      );
    };
    if ((req.topK ?? 0) > 0) refuse('top_k', 'top-k');
    if (req.contextLogprobs) refuse('context_logprobs', "the context's own log-probs");
    if (req.unconditionalContext !== undefined) refuse('unconditional', 'unconditional scoring');
    if (req.continuations.length === 0) throw new InvalidArgumentError(`${field}.continuations`, 'at least one continuation is needed');
    if (req.continuations.length > this.maxContinuations)
      throw new InvalidArgumentError(
        `${field}.continuations`,
        `${req.continuations.length} continuations, over the limit of ${this.maxContinuations} per item`,
      );
    const text = chunks.every((c) => c.text !== undefined && c.ids === undefined);
    const ids = chunks.every((c) => c.ids !== undefined && c.text === undefined);
    if (!text && !ids) throw new InvalidArgumentError(`${field}.context_chunks`, 'chunks must all be text or all be token ids');
    chunks.forEach((c, k) => {
      if (c.label === CONTINUATION_LABEL)
        throw new InvalidArgumentError(
          `${field}.context_chunks[${k}].label`,
          `${JSON.stringify(CONTINUATION_LABEL)} is the continuation's own label`,
        );
      if (c.ids) this.checkTokens(c.ids, `${field}.context_chunks[${k}].ids`);
    });
    const conts = req.continuations.map((cont, j) => {
      const cfield = `${field}.continuations[${j}]`;
      if (cont.length === 0) throw new InvalidArgumentError(cfield, 'continuation is empty');
      if ((typeof cont === 'string') !== text)
        throw new InvalidArgumentError(cfield, 'context chunks and continuations must both be text or both be token ids');
      if (typeof cont !== 'string') this.checkTokens(cont, cfield);
      return { cfield, cont };
    });
    let context: number[];
    let segments: Segment[];
    let encoded: number[][];
    const addBos = req.addBos ?? false;
    if (text) {
      // The whitespace _encode_pair moves to the continuation comes off the last chunks.
      const joined = chunks.map((c) => c.text!).join('');
      let strip = (TRAILING_WS.exec(joined)?.[0] ?? '').length;
      const stripped = chunks.map((c) => ({ label: c.label, text: c.text! })).reverse();
      for (const c of stripped) {
        const cut = Math.min(strip, c.text.length);
        c.text = c.text.slice(0, c.text.length - cut);
        strip -= cut;
      }
      stripped.reverse();
      const shared = quiet(this.tokenizer.encodeAsync(stripped.map((c) => c.text).join(''), addBos));
      const [seg, pairs] = await Promise.all([
        segmentText(this.tokenizer, stripped, addBos, `${field}.context_chunks`),
        Promise.all(conts.map(({ cont }) => this.encodePair(joined, cont as string, addBos, shared))),
      ]);
      ({ ids: context, segments } = seg);
      if (pairs.some((p) => p.context.length !== context.length || p.context.some((t, i) => t !== context[i])))
        throw new InvalidArgumentError(`${field}.context_chunks`, 'the chunks do not tokenise as the context does');
      encoded = pairs.map((p) => p.continuation);
    } else {
      ({ ids: context, segments } = segmentIds(
        chunks.map((c) => ({ label: c.label, ids: c.ids! })),
        `${field}.context_chunks`,
      ));
      encoded = conts.map(({ cont }) => cont as number[]);
    }
    const continuations = conts.map(({ cfield, cont }, j) => {
      const ids = encoded[j]!;
      if (ids.length === 0) throw new InvalidArgumentError(cfield, 'continuation adds no tokens after the context');
      const total = context.length + ids.length - 1;
      if (total > this.maxLength)
        throw new InvalidArgumentError(
          cfield,
          `context + continuation is ${total} tokens, over the maximum length ${this.maxLength}: attention statistics need the whole context, so it is not truncated`,
        );
      const shown = typeof cont === 'string' ? cont : this.tokenizer.decode(cont);
      return { field: cfield, ids, numChars: [...shown].length, numBytes: Buffer.byteLength(shown, 'utf8') };
    });
    return { field, context, segments, continuations };
  }

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
  async encodePair(
    context: string,
    continuation: string,
    addBos = false,
    contextIds?: Promise<number[]>,
  ): Promise<{ context: number[]; continuation: number[] }> {
    const tok = this.tokenizer;
    if (context === '') return { context: [tok.prefixTokenId], continuation: await tok.encodeAsync(continuation, addBos) };
    const spaces = TRAILING_WS.exec(context)?.[0] ?? '';
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
    const spaces = TRAILING_WS.exec(context)?.[0] ?? '';
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
    const units: Unit[] = [];
    // Every text encoding of the request is asked for first (the tokenizer's workers take
    // them in a stream), then awaited; checks on the results run in field order.
    interface Pending {
      field: string;
      topK: number;
      truncation: 'left' | 'error';
      text: string;
      pair: Promise<{ context: number[]; continuation: number[] }>;
      /** The same continuation after the neutral context. */
      unconditional?: Promise<{ context: number[]; continuation: number[] }>;
    }
    const items: { pending: Pending[]; contextLogprobs: boolean }[] = [];
    requests.forEach((req, i) => {
      const field = req.field ?? `items[${i}]`;
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
      const addBos = req.addBos ?? false;
      const sharedContext = typeof req.context === 'string' ? this.contextEncoding(req.context, addBos) : undefined;
      const sharedNeutral = typeof neutral === 'string' ? this.contextEncoding(neutral, addBos) : undefined;
      const pending: Pending[] = [];
      req.continuations.forEach((cont, j) => {
        const cfield = `${field}.continuations[${j}]`;
        if (cont.length === 0) throw new InvalidArgumentError(cfield, 'continuation is empty');
        if (typeof cont === 'string' && typeof req.context === 'string') {
          pending.push({
            field: cfield,
            topK,
            truncation,
            text: cont,
            pair: quiet(this.encodePair(req.context, cont, addBos, sharedContext)),
            ...(typeof neutral === 'string' ? { unconditional: quiet(this.encodePair(neutral, cont, addBos, sharedNeutral)) } : {}),
          });
        } else if (typeof cont !== 'string' && tokCtx) {
          this.checkTokens(cont, cfield);
          const orPrefix = (ids: number[]) => (ids.length > 0 ? ids : [this.tokenizer.prefixTokenId]);
          pending.push({
            field: cfield,
            topK,
            truncation,
            text: this.tokenizer.decode(cont),
            pair: Promise.resolve({ context: orPrefix(tokCtx), continuation: cont }),
            ...(Array.isArray(neutral) ? { unconditional: Promise.resolve({ context: orPrefix(neutral), continuation: cont }) } : {}),
          });
        } else {
          throw new InvalidArgumentError(cfield, 'context and continuations must both be text or both be token ids');
        }
      });
      items.push({ pending, contextLogprobs: req.contextLogprobs ?? false });
    });
    const all = items.flatMap((it) => it.pending);
    const [pairs, neutralPairs] = await Promise.all([Promise.all(all.map((p) => p.pair)), Promise.all(all.map((p) => p.unconditional))]);
    /** Where each answer's scores are: unit indices. */
    const plans: { main: number; unconditional?: number; meta: { numChars: number; numBytes: number; truncated: number } }[][] = [];
    const contexts: ({ tokens: number[]; first: number; count: number } | undefined)[] = [];
    let n = 0;
    for (const item of items) {
      const plan = item.pending.map(({ field, topK, truncation, text }) => {
        const { context, continuation } = pairs[n]!;
        const neutralPair = neutralPairs[n++];
        if (continuation.length === 0) throw new InvalidArgumentError(field, 'continuation adds no tokens after the context');
        const { unit, truncated } = this.toUnit(context, continuation, topK, truncation, field);
        const main = units.push(unit) - 1;
        const unconditional = neutralPair
          ? units.push(
              this.toUnit(neutralPair.context, neutralPair.continuation, 0, truncation, `${field} (after the neutral context)`).unit,
            ) - 1
          : undefined;
        return { main, unconditional, meta: { numChars: [...text].length, numBytes: Buffer.byteLength(text, 'utf8'), truncated } };
      });
      plans.push(plan);
      if (!item.contextLogprobs) {
        contexts.push(undefined);
        continue;
      }
      // The context as encoded for its continuations; a long one in rolling windows.
      const ctx = pairs[n - item.pending.length]!.context;
      const windows = ctx.length > 1 ? rollingWindows(ctx.slice(1), ctx[0]!, this.maxLength) : [];
      contexts.push({ tokens: ctx, first: units.length, count: windows.length });
      for (const [c, t] of windows) units.push(this.toUnit(c, t, 0, 'left', item.pending[0]!.field).unit);
    }
    const finish = (scored: UnitScore[]) => {
      const sum = (v: number[]) => v.reduce((a, b) => a + b, 0);
      return plans.map((plan, i) => {
        const c = contexts[i];
        const contextLogprobs = c ? scored.slice(c.first, c.first + c.count).flatMap((s) => s.logprobs) : undefined;
        const context: ContextScore | undefined = c && {
          tokenIds: c.tokens.slice(1),
          tokenLogprobs: contextLogprobs!,
          logprob: sum(contextLogprobs!),
          numTokens: contextLogprobs!.length,
        };
        return plan.map(({ main, unconditional, meta }) => {
          const s = scored[main]!;
          const unit = units[main]!;
          const logprob = sum(s.logprobs);
          const answer: ContinuationScore = {
            logprob,
            isGreedy: s.greedy.every(Boolean),
            tokenIds: unit.targets,
            tokenLogprobs: s.logprobs,
            tokenGreedy: s.greedy,
            numTokens: unit.targets.length,
            numChars: meta.numChars,
            numBytes: meta.numBytes,
            topK: s.topK,
            truncatedTokens: meta.truncated,
            meanLogprob: logprob / unit.targets.length,
          };
          if (context) answer.context = context;
          if (unconditional !== undefined) {
            const u = scored[unconditional]!;
            const ulp = sum(u.logprobs);
            answer.unconditional = { logprob: ulp, numTokens: u.logprobs.length, tokenLogprobs: u.logprobs, difference: logprob - ulp };
          }
          return answer;
        });
      });
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
