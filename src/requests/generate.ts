// Generation as a request kind: each step's `prepare` makes one unit per running choice
// (its sequence so far, the tokens not yet computed as the tail, `next` asking for the
// distribution after the last one) and its `finish` samples the next token from that
// distribution. The units go through the one scheduler like every other kind: decode
// steps of every running request share passes, a new prompt joins at the next round, and
// the prefix cache carries each sequence's KV from step to step (a step's row goes into
// the cache like any scored row's; the next step's match finds it), so a dialogue's next
// turn reuses the KV of the turn the model wrote.
//
//   prompt ─► prefill chunks (≤ one pass each, so running decodes keep stepping)
//          ─► step: unit {prefix: computed, tail: rest, next} ─► scheduler ─► distribution
//          ─► sample (sampling.ts: temperature → top-k → top-p → min-p, seeded per choice) ─► token
//          ─► text (incremental detokenisation, stop strings across tokens) ─► event
//
// Exactness: a generated token's log-prob is read from the same LogSoftmax row a Score of
// that token after the same prefix gathers from, in a pass the engine keeps bit-identical
// to any other (cached = uncached, batched = alone); at temperature 0 the token is that
// row's argmax (the lowest id among exact ties, as torch.argmax).
import { InvalidArgumentError } from '../common/errors.js';
import { rng, streamSeed } from '../common/random.js';
import { sampleToken, topOf, type SamplingParams } from './sampling.js';
import type { KeptKv, ProbeAsk, ProbeSums, TopK, Unit, UnitScore } from '../core/units.js';
import type { Engine } from '../engine/engine.js';
import type { Scorer } from '../core/scorer.js';
import { segmentSample, type SampleContent, type Segmented } from './segments.js';
import { TokenPieces } from '../text/token-pieces.js';

export type FinishReason = 'stop' | 'length';

/** One generated token of one choice. */
export interface TokenEvent {
  choice: number;
  token: number;
  logprob: number;
  /** The `logprobs` most likely tokens of the distribution it was drawn from. */
  top?: TopK;
  /** Text this token makes final (held back while it could still be part of a stop
   * string or an incomplete character). */
  text: string;
  /** The token's own text where it stands (special tokens as written; "" while it ends
   * inside a character), and its alternatives' (`top`) in the same place: token-pieces.ts. */
  tokenText: string;
  topTexts?: string[];
  finish?: FinishReason;
  /** With attention: where this token looked while it was written. */
  attention?: TokenAttention;
}

/** One generated token's attention, per layer (mean over heads) over the prompt's chunks
 * and, last, the response so far; excluded keys (sinks) apart. */
export interface TokenAttention {
  votes: number[][];
  votesExcluded: number[];
  mass: number[][];
  massExcluded: number[];
}

/** What attention per generated token needs of the prompt: each prompt token's chunk
 * (0..C−1, or −1 for a position excluded from the keys), and C. */
export interface PromptBins {
  keyBins: number[];
  chunks: number;
  excluded: Set<number>;
}

export interface ChoiceResult {
  choice: number;
  tokens: number[];
  logprobs: number[];
  top: TopK[];
  text: string;
  /** Each token's text where it stands, and its alternatives' (they join into the text). */
  tokenTexts: string[];
  topTexts: string[][];
  finish: FinishReason;
  attention?: TokenAttention[];
}

/** What generation needs of a model. */
export interface GenerationModel {
  vocabSize: number;
  maxLength: number;
  /** Tokens that end a choice (EOS). */
  stopIds: number[];
  /** Decode without special tokens. */
  decode(ids: number[]): string;
  /** Decode with special tokens as written (each token's own text). */
  decodeWithSpecial(ids: number[]): string;
  /** Whether steps can continue cached KV (a prefix cache that keeps rows). */
  cached: boolean;
  /** Prompt tokens per prefill unit when cached (one pass's worth). */
  prefillChunk: number;
  /** Layers × heads (attention per token). */
  layers: number;
  heads: number;
}

/** One choice: its tokens so far, its text, its stop state. */
class Choice {
  readonly tokens: number[] = [];
  readonly logprobs: number[] = [];
  readonly top: TopK[] = [];
  readonly tokenTexts: string[] = [];
  readonly topTexts: string[][] = [];
  readonly attention: TokenAttention[] = [];
  private readonly pieces: TokenPieces;
  /** Text made final so far (what events carried). */
  emitted = '';
  finish?: FinishReason;
  private readonly random: () => number;
  /** Prompt tokens decoded before the generated ones: word spaces and merges at the seam
   * come out as in the whole text. */
  private readonly lead: number[];
  private readonly leadText: string;

  constructor(
    readonly index: number,
    private readonly model: GenerationModel,
    private readonly params: SamplingParams,
    prompt: number[],
    seed: number,
  ) {
    this.random = rng(streamSeed(seed, index));
    this.lead = prompt.slice(-6);
    this.leadText = model.decode(this.lead);
    this.pieces = new TokenPieces((ids) => model.decodeWithSpecial(ids), prompt);
  }

  /** All of the text generated so far, final or not. */
  private text(): string {
    const ids = this.tokens.filter((t, k) => !(k === this.tokens.length - 1 && this.finish === 'stop' && this.isEos(t)));
    const whole = this.model.decode(this.lead.concat(ids));
    return whole.startsWith(this.leadText) ? whole.slice(this.leadText.length) : this.model.decode(ids);
  }

  private isEos(token: number): boolean {
    return !this.params.ignoreEos && this.model.stopIds.includes(token);
  }

  /** Take the distribution after the sequence so far, or at temperature 0 its most likely
   * tokens (TopK's order: best first, the lowest id first on a tie — the argmax), and,
   * when asked, the attention of the token that made it: sample, record, return the event. */
  accept(next: Float32Array | TopK, attention?: TokenAttention): TokenEvent {
    if (attention) this.attention.push(attention);
    const whole = next instanceof Float32Array;
    const token = whole ? sampleToken(next, this.params, this.random()) : next.ids[0]!;
    const logprob = whole ? next[token]! : next.logprobs[0]!;
    if (!whole) this.random(); // advanced once a step, as when sampling
    this.tokens.push(token);
    this.logprobs.push(logprob);
    const k = this.params.logprobs;
    const top = k > 0 ? (whole ? topOf(next, k) : { ids: next.ids.slice(0, k), logprobs: next.logprobs.slice(0, k) }) : undefined;
    if (top) this.top.push(top);
    const topTexts = top?.ids.map((id) => this.pieces.peek(id));
    if (topTexts) this.topTexts.push(topTexts);
    const tokenText = this.pieces.push(token);
    this.tokenTexts.push(tokenText);
    if (this.isEos(token)) this.finish = 'stop';
    else if (this.tokens.length >= this.params.maxTokens) this.finish = 'length';
    let text = this.text();
    // A stop string ends the choice where it begins; its text is not returned.
    const cut = firstStop(text, this.params.stop, Math.max(0, this.emitted.length - longest(this.params.stop)));
    if (cut !== undefined) {
      text = text.slice(0, cut);
      this.finish = 'stop';
    }
    const final = this.finish ? text : text.slice(0, safeEnd(text, this.params.stop));
    const delta = final.length > this.emitted.length ? final.slice(this.emitted.length) : '';
    this.emitted += delta;
    return {
      choice: this.index,
      token,
      logprob,
      ...(top ? { top } : {}),
      text: delta,
      tokenText,
      ...(topTexts ? { topTexts } : {}),
      ...(this.finish ? { finish: this.finish } : {}),
      ...(attention ? { attention } : {}),
    };
  }

  result(): ChoiceResult {
    return {
      choice: this.index,
      tokens: this.tokens,
      logprobs: this.logprobs,
      top: this.top,
      text: this.emitted,
      // The last token takes the bytes of a character it left unfinished.
      tokenTexts: this.tokenTexts.map((t, k) => (k === this.tokenTexts.length - 1 ? t + this.pieces.rest() : t)),
      topTexts: this.topTexts,
      finish: this.finish ?? 'length',
      ...(this.attention.length > 0 ? { attention: this.attention } : {}),
    };
  }
}

const longest = (stops: string[]) => Math.max(0, ...stops.map((s) => s.length));

/** Where the earliest stop string begins in `text` (searching from `from`). */
function firstStop(text: string, stops: string[], from: number): number | undefined {
  let best: number | undefined;
  for (const s of stops) {
    const at = text.indexOf(s, from);
    if (at >= 0 && (best === undefined || at < best)) best = at;
  }
  return best;
}

/** How much of an unfinished text is final: not an incomplete character at the end (a
 * byte token's U+FFFD) and not a tail that may yet become a stop string. */
function safeEnd(text: string, stops: string[]): number {
  let end = text.length;
  while (end > 0 && text[end - 1] === '\uFFFD') end--;
  let held = 0;
  for (const s of stops) {
    for (let k = Math.min(s.length - 1, end); k > held; k--) {
      if (text.endsWith(s.slice(0, k), end)) {
        held = k;
        break;
      }
    }
  }
  return end - held;
}

/** One request's generation: its choices from one prompt, stepped through the scheduler
 * by `run`. */
export class Generation {
  private readonly choices: Choice[];
  /** Prompt tokens in the prefix cache (shared by every choice). */
  private computed = 0;
  /** The pinned cached sequence of the prompt (while prefilling) and of each running
   * choice: what the next step continues, kept whatever the cache's budget. */
  private readonly kept = new Map<'prompt' | number, KeptKv>();

  constructor(
    private readonly model: GenerationModel,
    readonly prompt: number[],
    readonly params: SamplingParams,
    /** Attention per generated token over these chunks of the prompt (and the response). */
    private readonly bins?: PromptBins,
  ) {
    const seed = params.seed ?? Math.floor(Math.random() * 2 ** 32);
    this.choices = Array.from({ length: params.n }, (_, i) => new Choice(i, model, params, prompt, seed));
  }

  get done(): boolean {
    return this.choices.every((c) => c.finish);
  }

  /** The units of the next step: a prefill chunk while more than one pass of the prompt is
   * left, then one step unit per running choice. */
  units(): Unit[] {
    const { model, prompt } = this;
    const rest = prompt.length - this.computed;
    if (model.cached && rest > model.prefillChunk) {
      // The distribution after a chunk is not read: `next` makes the chunk computed (and
      // cached) like a step's row.
      return [this.unit(prompt, this.computed, this.computed + model.prefillChunk)];
    }
    return this.choices
      .filter((c) => !c.finish)
      .map((c) => {
        const unit = this.unit(prompt.concat(c.tokens), this.stepFrom(c));
        return this.bins ? { ...unit, probe: this.probeAsk(c) } : unit;
      });
  }

  /** A step's probe: the last token is the query; keys in the prompt's chunks, the
   * response so far in bin C, excluded prompt positions in C+1. */
  private probeAsk(c: Choice): ProbeAsk {
    const { keyBins, chunks: C } = this.bins!;
    const n = this.prompt.length + c.tokens.length;
    const bins = keyBins.map((b) => (b < 0 ? C + 1 : b)).concat(new Array(c.tokens.length).fill(C));
    const queryWeights = new Array<number>(n).fill(0);
    queryWeights[n - 1] = 1;
    return { keyBins: bins, chunks: C + 1, queryWeights, heatmap: false };
  }

  /** Where a running choice's computed KV ends: the prompt's, then every token but the last. */
  private stepFrom(c: Choice): number {
    if (!this.model.cached) return 0;
    return c.tokens.length === 0 ? this.computed : this.prompt.length + c.tokens.length - 1;
  }

  private unit(seq: number[], from: number, to = seq.length): Unit {
    // Greedy steps read the top of the distribution only (units.ts, nextTop).
    const nextTop = this.params.temperature === 0 ? { nextTop: Math.max(1, this.params.logprobs) } : {};
    return {
      prefix: seq.slice(0, from),
      tail: seq.slice(from, to),
      targets: [],
      scored: [],
      topK: 0,
      next: true,
      ...nextTop,
      continues: from > 0,
      keep: true,
    };
  }

  /** Take the outputs of the step `units()` made: the events of the tokens it produced
   * (none after a prefill chunk). */
  accept(outputs: UnitScore[]): TokenEvent[] {
    const rest = this.prompt.length - this.computed;
    if (this.model.cached && rest > this.model.prefillChunk) {
      this.computed += this.model.prefillChunk;
      this.hold('prompt', outputs[0]!.kept);
      return [];
    }
    const running = this.choices.filter((c) => !c.finish);
    const events = running.map((c, k) =>
      c.accept(outputs[k]!.next ?? outputs[k]!.nextTop!, this.bins ? this.attentionOf(outputs[k]!.probe!) : undefined),
    );
    // Each choice now holds the prompt and its tokens; a finished one holds nothing.
    running.forEach((c, k) => {
      const kv = outputs[k]!.kept;
      if (c.finish) kv?.release();
      this.hold(c.index, c.finish ? undefined : kv);
    });
    this.hold('prompt', undefined);
    return events;
  }

  /** Hold `kv` (or nothing) for `key`, releasing what was held. */
  private hold(key: 'prompt' | number, kv: KeptKv | undefined): void {
    this.kept.get(key)?.release();
    if (kv) this.kept.set(key, kv);
    else this.kept.delete(key);
  }

  /** Release every pinned sequence (the generation ended, or failed). */
  release(): void {
    for (const kv of this.kept.values()) kv.release();
    this.kept.clear();
  }

  /** The step's query token's attention, per layer (mean over heads). */
  private attentionOf(sums: ProbeSums): TokenAttention {
    const { layers: L, heads: H } = this.model;
    const bins = sums.bins; // C+1 chunks (prompt's and the response), excluded, unused
    const columns = bins - 2;
    const perLayer = (data: Float32Array) =>
      Array.from({ length: L }, (_, l) =>
        Array.from({ length: columns }, (_, u) => {
          let sum = 0;
          for (let h = 0; h < H; h++) sum += data[(l * H + h) * bins + u]!;
          return sum / H;
        }),
      );
    const apart = (data: Float32Array) =>
      Array.from({ length: L }, (_, l) => {
        let sum = 0;
        for (let h = 0; h < H; h++) sum += data[l * H + h]!;
        return sum / H;
      });
    return {
      votes: perLayer(sums.votes),
      votesExcluded: apart(sums.sinkVotes),
      mass: perLayer(sums.mass),
      massExcluded: apart(sums.sinkMass),
    };
  }

  results(): ChoiceResult[] {
    return this.choices.map((c) => c.result());
  }
}

/** What generation needs of a model served by `engine` and `scorer`. */
export function generationModel(engine: Engine, scorer: Scorer): GenerationModel {
  const tok = engine.tokenizer;
  return {
    vocabSize: engine.config.vocabSize,
    maxLength: scorer.maxLength,
    stopIds: [...new Set([...engine.config.eosTokenIds, ...(tok.eosId === undefined ? [] : [tok.eosId])])],
    decode: (ids) => tok.decodeText(ids),
    decodeWithSpecial: (ids) => tok.decode(ids),
    // Running sequences keep their KV pinned in the cache whatever its budget (0 too).
    cached: scorer.cache !== undefined,
    prefillChunk: scorer.maxBatchTokens,
    layers: engine.config.numLayers,
    heads: engine.config.numHeads,
  };
}

/** Step generations until every choice has finished: each step's units of every running
 * generation go to the scheduler as one job (`step`; `continuing` after the first). */
export async function runGenerations(
  generations: Generation[],
  step: (units: Unit[], continuing: boolean) => Promise<UnitScore[]>,
  onTokens?: (generation: number, events: TokenEvent[]) => void,
  beforeStep?: () => void,
): Promise<ChoiceResult[][]> {
  let continuing = false;
  try {
    for (;;) {
      const live = generations.filter((g) => !g.done);
      if (live.length === 0) break;
      beforeStep?.();
      const steps = live.map((g) => g.units());
      const outputs = await step(steps.flat(), continuing);
      continuing = true;
      let at = 0;
      live.forEach((g, k) => {
        const events = g.accept(outputs.slice(at, (at += steps[k]!.length)));
        if (events.length > 0) onTokens?.(generations.indexOf(g), events);
      });
    }
    return generations.map((g) => g.results());
  } finally {
    for (const g of generations) g.release();
  }
}

/** A prompt as tokens, its chunks, and each token's chunk for attention per token. */
export type PreparedPrompt = Segmented & { bins: PromptBins };

/** A generation prompt given as a sample (labelled chunks or chat messages; positions to
 * leave out of the attention keys): its tokens, chunks and bins. */
export async function preparePrompt(
  engine: Pick<Engine, 'tokenizer' | 'config'>,
  sample: SampleContent & { queryLabels?: string[]; excludePositions?: number[] },
  field: string,
): Promise<PreparedPrompt> {
  if (sample.queryLabels?.length)
    throw new InvalidArgumentError(`${field}.query_labels`, 'does not apply: the generated tokens are the queries');
  const seg = await segmentSample(engine, sample, field);
  const excluded = new Set(sample.excludePositions ?? []);
  for (const [k, p] of [...excluded].entries()) {
    if (!Number.isInteger(p) || p < 0 || p >= seg.ids.length)
      throw new InvalidArgumentError(`${field}.exclude_positions[${k}]`, `position ${p} is outside the prompt's ${seg.ids.length} tokens`);
  }
  const keyBins = new Array<number>(seg.ids.length);
  seg.segments.forEach((s, c) => {
    for (let t = s.start; t < s.end; t++) keyBins[t] = excluded.has(t) ? -1 : c;
  });
  return { ...seg, bins: { keyBins, chunks: seg.segments.length, excluded } };
}
