// Continuation and rolling log-likelihood with lm-evaluation-harness semantics, on top
// of the engine. This is the library the gRPC service and the CLI call.
//
// Every request becomes "units": the tokens before the first scored input position
// (`prefix`), the input tokens whose logits are scored (`tail`) and what they must
// predict (`targets`). Units with the same prefix share one prefix pass: its KV cache is
// computed once and gathered per row inside the graph for all their tails.
import type { Engine, PastKV, Row, ScoredPosition } from './engine.js';

export class ScoringError extends Error {
  constructor(
    readonly field: string,
    message: string,
  ) {
    super(`${field}: ${message}`);
  }
}

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

export interface TopK {
  ids: number[];
  logprobs: number[];
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

export interface ScorerOptions {
  /** Padded tokens per forward pass (rows × longest row); default 1024 on CPU, 8192 on CUDA. */
  maxBatchTokens?: number;
  /** Model context length used for truncation and windows; default: the model's. */
  maxLength?: number;
  /** Share the KV cache of a common prefix; off computes every row in full. */
  prefixSharing?: boolean;
  /** Largest top-k a request may ask for. */
  maxTopK?: number;
}

export interface Unit {
  prefix: number[];
  tail: number[];
  targets: number[];
  topK: number;
}

/** Requests turned into units, and how to turn the units' scores back into answers. */
export interface Prepared<T> {
  units: Unit[];
  finish(scores: UnitScore[]): T;
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

function compareTokens(a: number[], b: number[]): number {
  for (let i = 0; i < Math.min(a.length, b.length); i++) if (a[i] !== b[i]) return a[i]! - b[i]!;
  return a.length - b.length;
}

/** How many leading tokens two sequences share. */
export function commonPrefixLength(a: number[], b: number[]): number {
  let n = 0;
  while (n < a.length && n < b.length && a[n] === b[n]) n++;
  return n;
}

/** Tokens a unit costs to compute in full (its queue and budget weight). */
export const unitTokens = (u: Unit) => u.prefix.length + u.tail.length;

export interface UnitScore {
  logprobs: number[];
  greedy: boolean[];
  topK?: TopK[];
}

// Python's str.isspace() set, for the harness's rstrip().
const TRAILING_WS = /[\t\n\v\f\r\x1c-\x1f \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]+$/u;

export class Scorer {
  readonly maxLength: number;
  readonly maxBatchTokens: number;
  readonly prefixSharing: boolean;
  readonly maxTopK: number;
  /** Tokens run through the model so far (a shared prefix counts once). */
  tokensComputed = 0;

  constructor(
    readonly engine: Engine,
    options: ScorerOptions = {},
  ) {
    this.maxLength = options.maxLength ?? engine.config.maxPositions;
    if (this.maxLength > engine.config.maxPositions) {
      throw new ScoringError('max_length', `${this.maxLength} exceeds the model's ${engine.config.maxPositions} positions`);
    }
    // Measured on the CPU (56M Llama, CHARPEval shapes): 512–1024 tokens per pass beat
    // 4096 by 25–40%, as larger attention and KV-gather tensors fall out of cache. GPUs
    // want large passes.
    this.maxBatchTokens = options.maxBatchTokens ?? (engine.device.kind === 'cuda' ? 8192 : 1024);
    this.prefixSharing = options.prefixSharing ?? true;
    this.maxTopK = options.maxTopK ?? 100;
  }

  // ---- lm-evaluation-harness encoding --------------------------------------------------

  /** `_encode_pair`: trailing whitespace of the context moves to the continuation; the
   * continuation's tokens are those of encode(context + continuation) past the context's. */
  encodePair(context: string, continuation: string, addBos = false): { context: number[]; continuation: number[] } {
    const tok = this.engine.tokenizer;
    if (context === '') return { context: [tok.prefixTokenId], continuation: tok.encode(continuation, addBos) };
    const spaces = TRAILING_WS.exec(context)?.[0] ?? '';
    if (spaces.length > 0) {
      continuation = spaces + continuation;
      context = context.slice(0, context.length - spaces.length);
    }
    const whole = tok.encode(context + continuation, addBos);
    let ctx = tok.encode(context, addBos);
    const cont = whole.slice(ctx.length);
    // A whitespace-only context encodes to nothing: score after the prefix token instead.
    if (ctx.length === 0) ctx = [tok.prefixTokenId];
    return { context: ctx, continuation: cont };
  }

  private checkTokens(ids: number[], field: string): void {
    const vocab = this.engine.config.vocabSize;
    ids.forEach((id, i) => {
      if (!Number.isInteger(id) || id < 0 || id >= vocab) {
        throw new ScoringError(`${field}[${i}]`, `token id ${id} is outside the vocabulary [0, ${vocab})`);
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
    if (cont.length > L) throw new ScoringError(field, `continuation has ${cont.length} tokens, more than the maximum length ${L}`);
    const all = ctx.concat(cont);
    const dropped = Math.max(0, all.length - (L + 1));
    if (dropped > 0 && truncation === 'error') {
      throw new ScoringError(field, `context + continuation is ${all.length - 1} tokens, over the maximum length ${L} (truncation: error)`);
    }
    const input = all.slice(dropped, all.length - 1);
    const split = input.length - cont.length;
    return { unit: { prefix: input.slice(0, split), tail: input.slice(split), targets: cont, topK }, truncated: dropped };
  }

  async loglikelihood(requests: LoglikelihoodRequest[]): Promise<ContinuationScore[][]> {
    const prepared = this.prepareLoglikelihood(requests);
    return prepared.finish(await this.scoreUnits(prepared.units));
  }

  /** Validate and encode requests into units (throws ScoringError before any work is
   * queued); `finish` turns the units' scores into answers. */
  prepareLoglikelihood(requests: LoglikelihoodRequest[]): Prepared<ContinuationScore[][]> {
    const units: Unit[] = [];
    const meta: { numChars: number; numBytes: number; truncated: number }[] = [];
    const shape: number[] = [];
    requests.forEach((req, i) => {
      const field = req.field ?? `items[${i}]`;
      const topK = req.topK ?? 0;
      if (!Number.isInteger(topK) || topK < 0 || topK > this.maxTopK) {
        throw new ScoringError(`${field}.top_k`, `must be a whole number in [0, ${this.maxTopK}] (got ${topK})`);
      }
      const truncation = req.truncation ?? 'left';
      if (truncation !== 'left' && truncation !== 'error')
        throw new ScoringError(`${field}.truncation`, `must be left or error (got ${truncation})`);
      if (req.continuations.length === 0) throw new ScoringError(`${field}.continuations`, 'at least one continuation is needed');
      shape.push(req.continuations.length);
      const tokCtx = typeof req.context === 'string' ? undefined : req.context;
      if (tokCtx) this.checkTokens(tokCtx, `${field}.context_ids`);
      req.continuations.forEach((cont, j) => {
        const cfield = `${field}.continuations[${j}]`;
        if (cont.length === 0) throw new ScoringError(cfield, 'continuation is empty');
        let ctxIds: number[];
        let contIds: number[];
        let text: string;
        if (typeof cont === 'string' && typeof req.context === 'string') {
          ({ context: ctxIds, continuation: contIds } = this.encodePair(req.context, cont, req.addBos ?? false));
          text = cont;
        } else if (typeof cont !== 'string' && tokCtx) {
          this.checkTokens(cont, cfield);
          ctxIds = tokCtx.length > 0 ? tokCtx : [this.engine.tokenizer.prefixTokenId];
          contIds = cont;
          text = this.engine.tokenizer.decode(cont);
        } else {
          throw new ScoringError(cfield, 'context and continuations must both be text or both be token ids');
        }
        if (contIds.length === 0) throw new ScoringError(cfield, 'continuation adds no tokens after the context');
        const { unit, truncated } = this.toUnit(ctxIds, contIds, topK, truncation, cfield);
        units.push(unit);
        meta.push({ numChars: [...text].length, numBytes: Buffer.byteLength(text, 'utf8'), truncated });
      });
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
   * `echo: true, logprobs: k, max_tokens: 1` answer needs. Prompts that share a prefix of
   * at least `minShared` tokens compute it once: its own log-probs in one row, its KV for
   * the rest of every prompt. */
  prepareEcho(prompts: number[][], topK: number, minShared = 16): Prepared<EchoScore[]> {
    prompts.forEach((p, i) => {
      if (p.length === 0) throw new ScoringError(`prompt[${i}]`, 'prompt is empty');
      this.checkTokens(p, `prompt[${i}]`);
      if (p.length > this.maxLength)
        throw new ScoringError(`prompt[${i}]`, `${p.length} tokens, over the maximum length ${this.maxLength}`);
    });
    if (!Number.isInteger(topK) || topK < 0 || topK > this.maxTopK)
      throw new ScoringError('logprobs', `must be a whole number in [0, ${this.maxTopK}]`);
    const k = Math.max(1, topK);
    // Group prompts that share a long prefix: sorted order puts them side by side.
    const order = prompts.map((_, i) => i).sort((a, b) => compareTokens(prompts[a]!, prompts[b]!));
    const groups: { members: number[]; shared: number }[] = [];
    for (const i of order) {
      const g = groups.at(-1);
      const common = g ? commonPrefixLength(prompts[g.members[0]!]!, prompts[i]!) : 0;
      if (g && Math.min(common, g.shared) >= minShared) {
        g.members.push(i);
        g.shared = Math.min(g.shared, common);
      } else groups.push({ members: [i], shared: prompts[i]!.length });
    }
    const units: Unit[] = [];
    // Where each prompt's scores come from: [unit index, first position it covers].
    const parts: { unit: number; from: number }[][] = prompts.map(() => []);
    for (const g of groups) {
      // Every prompt keeps at least its last token in its own row (the next-token guess).
      const shared = g.members.length > 1 ? Math.min(g.shared, ...g.members.map((i) => prompts[i]!.length)) - 1 : 0;
      if (shared >= 1) {
        const head = prompts[g.members[0]!]!.slice(0, shared);
        // Positions 0..shared-2 predict head[1..]; position shared-1's target belongs to each prompt.
        if (shared > 1) {
          units.push({ prefix: [], tail: head.slice(0, shared - 1), targets: head.slice(1), topK: k });
          for (const i of g.members) parts[i]!.push({ unit: units.length - 1, from: 0 });
        }
        for (const i of g.members) {
          const p = prompts[i]!;
          units.push({ prefix: head.slice(0, shared - 1), tail: p.slice(shared - 1), targets: [...p.slice(shared), 0], topK: k });
          parts[i]!.push({ unit: units.length - 1, from: shared - 1 });
        }
      } else {
        for (const i of g.members) {
          const p = prompts[i]!;
          units.push({ prefix: [], tail: p, targets: [...p.slice(1), 0], topK: k });
          parts[i]!.push({ unit: units.length - 1, from: 0 });
        }
      }
    }
    const finish = (scores: UnitScore[]) =>
      prompts.map((p, i) => {
        const logprobs: number[] = [];
        const top: TopK[] = [];
        for (const part of parts[i]!) {
          logprobs.push(...scores[part.unit]!.logprobs);
          top.push(...scores[part.unit]!.topK!);
        }
        // The last position's target was a placeholder: its answer is the greedy token.
        logprobs.pop();
        const last = top[top.length - 1]!;
        return {
          promptLogprobs: logprobs, // for p[1..]
          top, // for positions 0..n-1 (the last: the next token)
          nextToken: last.ids[0]!,
          nextLogprob: last.logprobs[0]!,
          length: p.length,
        };
      });
    return { units, finish };
  }

  // ---- rolling log-likelihood ----------------------------------------------------------

  async rolling(requests: RollingRequest[]): Promise<RollingScore[]> {
    const prepared = this.prepareRolling(requests);
    return prepared.finish(await this.scoreUnits(prepared.units));
  }

  prepareRolling(requests: RollingRequest[]): Prepared<RollingScore[]> {
    const units: Unit[] = [];
    const spans: { tokens: number[]; first: number; count: number; k: number }[] = [];
    requests.forEach((req, i) => {
      const field = `items[${i}]`;
      const k = req.minKPercent ?? 20;
      if (!(k > 0 && k <= 100)) throw new ScoringError(`${field}.min_k_percent`, `must be in (0, 100] (got ${k})`);
      let tokens: number[];
      if (typeof req.text === 'string') {
        tokens = this.engine.tokenizer.encode(req.text, false);
      } else {
        this.checkTokens(req.text, `${field}.token_ids`);
        tokens = req.text;
      }
      if (tokens.length === 0) throw new ScoringError(`${field}.text`, 'text is empty');
      const windows = rollingWindows(tokens, this.engine.tokenizer.prefixTokenId, this.maxLength);
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

  // ---- scheduling units onto forward passes ----------------------------------------------

  /** Score units: shared prefixes once, rows packed by the token budget, answers in order. */
  async scoreUnits(units: Unit[]): Promise<UnitScore[]> {
    const results: UnitScore[] = new Array(units.length);
    const groups = new Map<string, number[]>();
    const solo: number[] = [];
    units.forEach((unit, i) => {
      if (!this.prefixSharing || unit.prefix.length === 0) return solo.push(i);
      const key = unit.prefix.join(',');
      const list = groups.get(key);
      if (list) list.push(i);
      else groups.set(key, [i]);
    });
    const shared: number[][] = [];
    for (const members of groups.values()) {
      if (members.length >= 2) shared.push(members);
      else solo.push(members[0]!);
    }

    // Rows without a shared prefix: the whole input in one row, no past.
    const soloRows = solo.map((i) => {
      const u = units[i]!;
      return { unit: i, tokens: u.prefix.concat(u.tail), start: 0, scoredFrom: u.prefix.length, pastRow: 0 };
    });
    for (const batch of packByLength(soloRows, (r) => r.tokens.length, this.maxBatchTokens)) {
      await this.runRows(units, batch, undefined, results);
    }

    // Shared prefixes: one prefix pass per batch of groups, then their tails against it.
    shared.sort((a, b) => units[a[0]!]!.prefix.length - units[b[0]!]!.prefix.length);
    const prefixBatches = packByLength(shared, (g) => units[g[0]!]!.prefix.length, this.maxBatchTokens);
    for (const groupBatch of prefixBatches) {
      const prefixRows: Row[] = groupBatch.map((g) => ({ tokens: units[g[0]!]!.prefix, startPosition: 0, pastRow: 0 }));
      const { present } = await this.engine.forward({ rows: prefixRows, scored: [], topK: 0, keepPresent: true });
      this.tokensComputed += prefixRows.reduce((n, r) => n + r.tokens.length, 0);
      const tailRows = groupBatch.flatMap((g, groupIndex) =>
        g.map((i) => {
          const u = units[i]!;
          return { unit: i, tokens: u.tail, start: u.prefix.length, scoredFrom: 0, pastRow: groupIndex };
        }),
      );
      for (const batch of packByLength(tailRows, (r) => r.tokens.length, this.maxBatchTokens)) {
        await this.runRows(units, batch, present!, results);
      }
    }
    return results;
  }

  private async runRows(
    units: Unit[],
    rows: { unit: number; tokens: number[]; start: number; scoredFrom: number; pastRow: number }[],
    past: PastKV | undefined,
    results: UnitScore[],
  ): Promise<void> {
    const scored: ScoredPosition[] = [];
    rows.forEach((r, row) => {
      units[r.unit]!.targets.forEach((target, j) => scored.push({ row, index: r.scoredFrom + j, target }));
    });
    const topK = Math.max(0, ...rows.map((r) => units[r.unit]!.topK));
    this.tokensComputed += rows.reduce((n, r) => n + r.tokens.length, 0);
    const out = await this.engine.forward({
      rows: rows.map((r) => ({ tokens: r.tokens, startPosition: r.start, pastRow: r.pastRow })),
      past,
      scored,
      topK,
      keepPresent: false,
    });
    let n = 0;
    for (const r of rows) {
      const unit = units[r.unit]!;
      const count = unit.targets.length;
      const res: UnitScore = {
        logprobs: Array.from(out.logprobs.subarray(n, n + count)),
        greedy: out.greedy.slice(n, n + count),
      };
      if (unit.topK > 0) {
        res.topK = Array.from({ length: count }, (_, j) => {
          const base = (n + j) * topK;
          return {
            ids: Array.from(out.topkIds!.subarray(base, base + unit.topK), Number),
            logprobs: Array.from(out.topkLogprobs!.subarray(base, base + unit.topK)),
          };
        });
      }
      results[r.unit] = res;
      n += count;
    }
  }
}

/** Pack items into batches whose padded size (count × longest) stays within `budget`,
 * longest first so rows of similar length share a batch. One item always fits. */
export function packByLength<T>(items: T[], length: (item: T) => number, budget: number): T[][] {
  const sorted = [...items].sort((a, b) => length(b) - length(a));
  const batches: T[][] = [];
  let current: T[] = [];
  let longest = 0;
  for (const item of sorted) {
    const len = Math.max(1, length(item));
    const next = Math.max(longest, len);
    if (current.length > 0 && next * (current.length + 1) > budget) {
      batches.push(current);
      current = [];
      longest = 0;
    }
    current.push(item);
    longest = Math.max(longest, len);
  }
  if (current.length > 0) batches.push(current);
  return batches;
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
