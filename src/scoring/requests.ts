// lm-evaluation-harness request semantics: how continuation, rolling and echo requests
// become units (units.ts) and how the units' scores become answers. Above the batcher:
// it validates (throwing InvalidArgumentError naming the field) and encodes; it never
// runs the model.
import type { TextTokenizer } from '../tokenizer.js';
import { InvalidArgumentError } from '../errors.js';
import type { Prepared, TopK, Unit, UnitScore } from './units.js';

export type TextOrTokens = string | number[];

export interface LoglikelihoodRequest {
  context: TextOrTokens;
  continuations: TextOrTokens[];
  /** Run the tokenizer's post-processor (adds BOS where it does) on text input. */
  addBos?: boolean;
  /** Also return the k most likely tokens at each continuation position. */
  topK?: number;
  /** `left` (harness default): drop context tokens from the left; `error`: refuse. */
  truncation?: 'left' | 'error';
  /** How error messages name this request (default `items[i]`). */
  field?: string;
}

export interface ContinuationScore {
  logprob: number;
  isGreedy: boolean;
  tokenIds: number[];
  tokenLogprobs: number[];
  tokenGreedy: boolean[];
  numTokens: number;
  /** Length of the continuation as given, in Unicode code points (Python's len). */
  numChars: number;
  numBytes: number;
  topK?: TopK[];
  /** Context tokens dropped from the left to fit the maximum length. */
  truncatedTokens: number;
}

export interface RollingRequest {
  text: TextOrTokens;
  /** Min-K% Prob's k, in percent (Shi et al. 2023); default 20. */
  minKPercent?: number;
}

export interface RollingScore {
  logprob: number;
  numTokens: number;
  /** −mean token log-prob (KIEval's average LM loss). */
  meanLoss: number;
  perplexity: number;
  minKPercent: number;
  /** Mean of the lowest ⌊n·k/100⌋ (at least one) token log-probs. */
  minKLogprob: number;
  tokenIds: number[];
  tokenLogprobs: number[];
  numWindows: number;
}

/** The echo answer for one prompt. */
export interface EchoScore {
  /** log p(prompt[t] | prompt[..t]) for t = 1..n-1. */
  promptLogprobs: number[];
  /** Top-k alternatives at positions 0..n-1 (the last one is the next-token distribution). */
  top: TopK[];
  nextToken: number;
  nextLogprob: number;
  length: number;
}

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
    const vocab = this.vocabSize;
    ids.forEach((id, i) => {
      if (!Number.isInteger(id) || id < 0 || id >= vocab) {
        throw new InvalidArgumentError(`${field}[${i}]`, `token id ${id} is outside the vocabulary [0, ${vocab})`);
      }
    });
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
    const meta: { numChars: number; numBytes: number; truncated: number }[] = [];
    const shape: number[] = [];
    // Every text encoding of the request is asked for first (the tokenizer's workers take
    // them in a stream), then awaited; checks on the results run in field order.
    const pending: {
      field: string;
      topK: number;
      truncation: 'left' | 'error';
      text: string;
      pair: Promise<{ context: number[]; continuation: number[] }>;
    }[] = [];
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
      shape.push(req.continuations.length);
      const tokCtx = typeof req.context === 'string' ? undefined : req.context;
      if (tokCtx) this.checkTokens(tokCtx, `${field}.context_ids`);
      const addBos = req.addBos ?? false;
      const sharedContext = typeof req.context === 'string' ? this.contextEncoding(req.context, addBos) : undefined;
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
          });
        } else if (typeof cont !== 'string' && tokCtx) {
          this.checkTokens(cont, cfield);
          const context = tokCtx.length > 0 ? tokCtx : [this.tokenizer.prefixTokenId];
          pending.push({
            field: cfield,
            topK,
            truncation,
            text: this.tokenizer.decode(cont),
            pair: Promise.resolve({ context, continuation: cont }),
          });
        } else {
          throw new InvalidArgumentError(cfield, 'context and continuations must both be text or both be token ids');
        }
      });
    });
    const pairs = await Promise.all(pending.map((p) => p.pair));
    pending.forEach(({ field, topK, truncation, text }, n) => {
      const { context, continuation } = pairs[n]!;
      if (continuation.length === 0) throw new InvalidArgumentError(field, 'continuation adds no tokens after the context');
      const { unit, truncated } = this.toUnit(context, continuation, topK, truncation, field);
      units.push(unit);
      meta.push({ numChars: [...text].length, numBytes: Buffer.byteLength(text, 'utf8'), truncated });
    });
    const finish = (scored: UnitScore[]) => {
      let u = 0;
      return shape.map((count) =>
        Array.from({ length: count }, () => {
          const s = scored[u]!;
          const m = meta[u]!;
          const unit = units[u++]!;
          return {
            logprob: s.logprobs.reduce((a, b) => a + b, 0),
            isGreedy: s.greedy.every(Boolean),
            tokenIds: unit.targets,
            tokenLogprobs: s.logprobs,
            tokenGreedy: s.greedy,
            numTokens: unit.targets.length,
            numChars: m.numChars,
            numBytes: m.numBytes,
            topK: s.topK,
            truncatedTokens: m.truncated,
          };
        }),
      );
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
    const spans: { tokens: number[]; first: number; count: number; k: number }[] = [];
    const encoded = await Promise.all(
      requests.map((req, i) => {
        const k = req.minKPercent ?? 20;
        if (!(k > 0 && k <= 100)) throw new InvalidArgumentError(`items[${i}].min_k_percent`, `must be in (0, 100] (got ${k})`);
        if (typeof req.text === 'string') return quiet(this.tokenizer.encodeAsync(req.text, false));
        this.checkTokens(req.text, `items[${i}].token_ids`);
        return req.text;
      }),
    );
    requests.forEach((req, i) => {
      const field = `items[${i}]`;
      const k = req.minKPercent ?? 20;
      const tokens = encoded[i]!;
      if (tokens.length === 0) throw new InvalidArgumentError(`${field}.text`, 'text is empty');
      const windows = rollingWindows(tokens, this.tokenizer.prefixTokenId, this.maxLength);
      spans.push({ tokens, first: units.length, count: windows.length, k });
      for (const [ctx, cont] of windows) units.push(this.toUnit(ctx, cont, 0, 'left', field).unit);
    });
    const finish = (scored: UnitScore[]) =>
      spans.map(({ tokens, first, count, k }) => {
        const logprobs = scored.slice(first, first + count).flatMap((s) => s.logprobs);
        const sum = logprobs.reduce((a, b) => a + b, 0);
        const n = logprobs.length;
        const lowest = [...logprobs].sort((a, b) => a - b).slice(0, Math.max(1, Math.floor((n * k) / 100)));
        return {
          logprob: sum,
          numTokens: n,
          meanLoss: -sum / n,
          perplexity: Math.exp(-sum / n),
          minKPercent: k,
          minKLogprob: lowest.reduce((a, b) => a + b, 0) / lowest.length,
          tokenIds: tokens,
          tokenLogprobs: logprobs,
          numWindows: count,
        };
      });
    return { units, finish };
  }
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
