// Attention probing as a request kind: `prepare` turns samples into probe units (the
// scheduler plans and runs them with every other unit: scores, other probes), `finish`
// turns their attention sums into CHARPEval's per-layer chunk distribution (argmax votes
// and attention mass), RefuteBench's round heatmap, and raw attention slices under a size
// cap. The graph does the reductions over layers, heads and keys (kernels/attention.ts);
// this file turns per-bin sums into the reported distributions and reduces query tokens
// to segments.
import { maxOf, minOf } from '../common/sequences.js';
import type { Engine } from '../engine/engine.js';
import { Scorer } from '../core/scorer.js';
import type { Prepared, ProbeSums, Unit, UnitScore } from '../core/units.js';
import { InvalidArgumentError } from '../common/errors.js';
import { meanMatrix, meanVector } from '../common/matrix.js';
import { segmentSample, type SampleContent, type Segment, type Segmented } from './segments.js';

export type Reducer = 'mean' | 'max' | 'sum';

export interface ProbeSample extends SampleContent {
  /** Labels whose tokens are the queries of the chunk distribution; default: the last chunk's. */
  queryLabels?: string[];
  /** Token positions removed from the key side (attention sinks), their share reported apart. */
  excludePositions?: number[];
}

export interface ProbeOptions {
  /** Pool over layers and heads for the heatmap: `max` (RefuteBench) or `mean`. Default max. */
  pool?: 'max' | 'mean';
  /** Heatmap query side: reduce over the query segment's tokens. Default mean. */
  queryReduce?: Reducer;
  /** Heatmap key side: reduce over the key segment's (visible) tokens. Default max. */
  keyReduce?: Reducer;
  /** Also return [layers × heads × chunks]. */
  perHead?: boolean;
  /** Also return the log-prob of every query-chunk token given all before it, from the
   * same forward pass (CHARPEval ranks by these and plots attention from the same
   * samples). */
  logprobs?: boolean;
  /** Compute the heatmap (default true). Without it only the query chunks' rows need
   * attention: everything before the first query token is a cached prefix (prefix cache,
   * KV only), and the probe pass runs from there. */
  heatmap?: boolean;
}

export interface SampleProbe {
  labels: string[];
  segments: Segment[];
  /** The sample's token ids. */
  ids: number[];
  numTokens: number;
  queryLabels: string[];
  /** [layers][chunks]: share of (head, query token) argmax votes per chunk; sums to 1. */
  votes: number[][];
  /** [layers]: share of (head, query token) whose overall argmax is an excluded key. */
  votesExcluded: number[];
  /** [layers][chunks]: attention mass per chunk, each row renormalised without excluded keys; sums to 1. */
  mass: number[][];
  /** [layers]: mean attention mass on excluded keys. */
  massExcluded: number[];
  votesPerHead?: number[][][];
  massPerHead?: number[][][];
  /** [segments][segments], lower-triangular: query segment (row) → key segment (column);
   * empty when the heatmap was not asked for. */
  heatmap: number[][];
  /** [segments]: the same reduction over the excluded keys. */
  heatmapExcluded: number[];
  /** Tokens before the first query token: computed here (KV only), or taken from the
   * prefix cache; absent when the probe ran the whole sample. */
  prefix?: { computed: number; reused: number };
  /** With `logprobs`: log p(token | all before it) of each query-chunk token after the
   * first of the sample, in order, and their sum. */
  queryLogprobs?: number[];
  queryLogprob?: number;
  /** With `logprobs`: whether each of those tokens is the model's most likely one there. */
  queryGreedy?: boolean[];
}

export interface ProbeMean {
  labels: string[];
  votes: number[][];
  votesExcluded: number[];
  mass: number[][];
  massExcluded: number[];
  heatmap?: number[][];
}

export interface ProbeAnswer {
  samples: SampleProbe[];
  /** Mean over the samples (what CHARPEval's Figure 2 plots); present when they share labels. */
  mean?: ProbeMean;
  options: Required<ProbeOptions>;
}

export interface RawRequest {
  layers: number[];
  heads: number[];
  /** Query positions [start, end). */
  queryStart: number;
  queryEnd: number;
}

export interface RawSlice {
  layer: number;
  head: number;
  queryStart: number;
  /** [queries × keys], row-major; keys = the sample's tokens. */
  values: Float32Array;
  keys: number;
}


export interface ProberOptions {
  /** The model's scorer: its planner and runner run the probe units (`probe`, `raw`), its
   * prefix cache serves probes without a heatmap. Default: one without a prefix cache. */
  scorer?: Scorer;
  /** Bytes of one layer's attention a pass may hold, for the scorer made here (with a
   * scorer of your own, set its `maxAttentionBytes`). */
  maxAttentionBytes?: number;
  /** Largest raw-attention answer, in bytes of the requested dtype. */
  maxRawBytes?: number;
}

/** A sample as one row: its tokens, each key's bin and each query's weight. */
export interface ProbeRow {
  tokens: number[];
  /** Per token: 0..C-1 its chunk, C excluded (an attention sink). */
  keyBins: number[];
  /** Per token: 1 in a query chunk, 0 elsewhere. */
  queryWeights: number[];
}

/** A sample turned into tokens, bins and query weights. */
export interface PreparedSample {
  seg: Segmented;
  row: ProbeRow;
  queryLabels: string[];
  excluded: Set<number>;
}

export class Prober {
  readonly maxRawBytes: number;
  /** Runs the units of `probe` and `raw` (the server queues them in its batcher instead). */
  readonly scorer: Scorer;

  constructor(
    readonly engine: Engine,
    options: ProberOptions = {},
  ) {
    if (options.scorer && options.maxAttentionBytes !== undefined)
      throw new Error('prober: maxAttentionBytes belongs to the scorer given (its planner makes the passes)');
    this.scorer =
      options.scorer ??
      new Scorer(engine, { prefixSharing: false, ...(options.maxAttentionBytes !== undefined ? { maxAttentionBytes: options.maxAttentionBytes } : {}) });
    this.maxRawBytes = options.maxRawBytes ?? 64 * 2 ** 20;
  }

  /** Bytes of one layer's attention a pass may hold (the scorer's planner's limit). */
  get maxAttentionBytes(): number {
    return this.scorer.maxAttentionBytes;
  }

  private attentionBytes(rows: number, tokens: number): number {
    return rows * this.engine.config.numHeads * tokens * tokens * 4;
  }

  /** Validate and tokenise one sample (throws InvalidArgumentError naming the field). */
  async prepare(sample: ProbeSample, field: string): Promise<PreparedSample> {
    const seg = await segmentSample(this.engine, sample, field);
    const T = seg.ids.length;
    if (T > this.engine.config.maxPositions)
      throw new InvalidArgumentError(field, `${T} tokens, over the model's ${this.engine.config.maxPositions} positions`);
    const labels = seg.segments.map((s) => s.label);
    const queryLabels = sample.queryLabels?.length ? sample.queryLabels : [labels[labels.length - 1]!];
    for (const [k, q] of queryLabels.entries()) {
      if (!labels.includes(q))
        throw new InvalidArgumentError(
          `${field}.query_labels[${k}]`,
          `no chunk is labelled ${JSON.stringify(q)} (labels: ${labels.join(', ')})`,
        );
    }
    const excluded = new Set(sample.excludePositions ?? []);
    for (const [k, p] of [...excluded].entries()) {
      if (!Number.isInteger(p) || p < 0 || p >= T)
        throw new InvalidArgumentError(`${field}.exclude_positions[${k}]`, `position ${p} is outside the sample's ${T} tokens`);
    }
    const C = seg.segments.length;
    const keyBins = new Array<number>(T);
    const queryWeights = new Array<number>(T).fill(0);
    seg.segments.forEach((s, c) => {
      for (let t = s.start; t < s.end; t++) {
        keyBins[t] = excluded.has(t) ? C : c;
        if (queryLabels.includes(s.label) && !excluded.has(t)) queryWeights[t] = 1;
      }
    });
    if (!queryWeights.some((w) => w > 0))
      throw new InvalidArgumentError(`${field}.query_labels`, 'the query chunks have no tokens left after exclusions');
    return { seg, row: { tokens: seg.ids, keyBins, queryWeights }, queryLabels, excluded };
  }

  /** Probe samples here, through the scorer's planner and runner. */
  async probe(samples: ProbeSample[], options: ProbeOptions = {}): Promise<ProbeAnswer> {
    const { prepared, opts } = await this.prepareAll(samples, options);
    const job = this.units(prepared, opts);
    return job.finish((await this.scorer.scoreUnits(job.units)).scores);
  }

  /** Validate samples and options (throws InvalidArgumentError naming the field). */
  async prepareAll(
    samples: ProbeSample[],
    options: ProbeOptions = {},
  ): Promise<{ prepared: PreparedSample[]; opts: ProbeAnswer['options'] }> {
    if (samples.length === 0) throw new InvalidArgumentError('samples', 'at least one sample is needed');
    const opts = {
      pool: options.pool ?? 'max',
      queryReduce: options.queryReduce ?? 'mean',
      keyReduce: options.keyReduce ?? 'max',
      perHead: options.perHead ?? false,
      heatmap: options.heatmap ?? true,
      logprobs: options.logprobs ?? false,
    };
    if (!['max', 'mean'].includes(opts.pool)) throw new InvalidArgumentError('pool', `must be max or mean (got ${opts.pool})`);
    for (const side of ['queryReduce', 'keyReduce'] as const) {
      if (!['mean', 'max', 'sum'].includes(opts[side])) {
        throw new InvalidArgumentError(
          side === 'queryReduce' ? 'query_reduce' : 'key_reduce',
          `must be mean, max or sum (got ${opts[side]})`,
        );
      }
    }
    const prepared: PreparedSample[] = [];
    for (const [i, s] of samples.entries()) prepared.push(await this.prepare(s, `samples[${i}]`));
    return { prepared, opts };
  }

  /** Prepared samples as probe units (one each), and the answer from their outputs. A
   * unit's rows: every token with a heatmap (each row of the map is a query); without,
   * only from its first query row (or the row that predicts the query chunks' first
   * token, with log-probs) to its last query token: the tokens before are its prefix,
   * kept in the prefix cache for later probes of the same dialogue, and rows after the
   * last query token matter to no query (causal). */
  units(prepared: PreparedSample[], opts: ProbeAnswer['options']): Prepared<ProbeAnswer> {
    const spans = prepared.map((p) => {
      const T = p.row.tokens.length;
      return opts.heatmap ? { from: 0, to: T } : { from: passStart(p, opts.logprobs), to: 1 + lastQueryToken(p) };
    });
    const units = prepared.map((p, i): Unit => {
      const { from, to } = spans[i]!;
      const targets = opts.logprobs ? queryTargets(p, from, to) : [];
      return {
        prefix: p.row.tokens.slice(0, from),
        tail: p.row.tokens.slice(from, to),
        targets: targets.map((t) => t.target),
        scored: targets.map((t) => t.index),
        topK: 0,
        sequenceLength: p.row.tokens.length,
        probe: {
          keyBins: p.row.keyBins,
          chunks: p.seg.segments.length,
          queryWeights: p.row.queryWeights,
          heatmap: opts.heatmap,
          ...(from > 0 ? { cachePrefix: true } : {}),
        },
      };
    });
    return {
      units,
      finish: (outputs) => {
        const samples = prepared.map((p, i) => this.finishSample(p, opts, outputs[i]!, spans[i]!.from));
        return { samples, mean: meanOf(samples), options: opts };
      },
    };
  }

  /** One sample's answer from its unit's output: per-bin sums → distributions, heatmap
   * rows → segments × segments, log-probs of the query tokens. */
  private finishSample(p: PreparedSample, opts: ProbeAnswer['options'], out: UnitScore, from: number): SampleProbe {
    const sums: ProbeSums = out.probe!;
    const c = this.engine.config;
    const L = c.numLayers;
    const H = c.numHeads;
    const bins = sums.bins;
    const S = p.seg.segments.length;
    const nq = p.row.queryWeights.reduce((a, w) => a + w, 0);
    const perLayer = (data: Float32Array, l: number, h: number, bin: number) => data[(l * H + h) * bins + bin]!;
    const dist = (data: Float32Array) =>
      Array.from({ length: L }, (_, l) => Array.from({ length: S }, (_, u) => sumHeads(H, (h) => perLayer(data, l, h, u)) / (H * nq)));
    const perHead = (data: Float32Array) =>
      Array.from({ length: L }, (_, l) => Array.from({ length: H }, (_, h) => Array.from({ length: S }, (_, u) => perLayer(data, l, h, u) / nq)));
    const sink = (data: Float32Array) => Array.from({ length: L }, (_, l) => sumHeads(H, (h) => data[l * H + h]!) / (H * nq));
    const heat = sums.heat[opts.pool];
    const keyValue = (t: number, u: number): number => {
      const at = t * bins + u;
      if (opts.keyReduce === 'max') return heat.keyMax[at]!;
      if (opts.keyReduce === 'sum') return heat.keySum[at]!;
      const n = sums.keyCount[at]!;
      return n > 0 ? heat.keySum[at]! / n : 0;
    };
    const reduceQueries = (s: Segment, u: number) => {
      const values: number[] = [];
      for (let t = s.start; t < s.end; t++) if (!p.excluded.has(t)) values.push(keyValue(t, u));
      if (values.length === 0) return 0;
      if (opts.queryReduce === 'max') return maxOf(values);
      const sum = values.reduce((a, v) => a + v, 0);
      return opts.queryReduce === 'sum' ? sum : sum / values.length;
    };
    const result: SampleProbe = {
      labels: p.seg.segments.map((s) => s.label),
      segments: p.seg.segments,
      ids: p.seg.ids,
      numTokens: p.seg.ids.length,
      queryLabels: p.queryLabels,
      votes: dist(sums.votes),
      votesExcluded: sink(sums.sinkVotes),
      mass: dist(sums.mass),
      massExcluded: sink(sums.sinkMass),
      ...(opts.perHead ? { votesPerHead: perHead(sums.votes), massPerHead: perHead(sums.mass) } : {}),
      heatmap: opts.heatmap ? p.seg.segments.map((s) => Array.from({ length: S }, (_, u) => reduceQueries(s, u))) : [],
      heatmapExcluded: opts.heatmap ? p.seg.segments.map((s) => reduceQueries(s, S)) : [],
    };
    // The prefix before the unit's rows: from the cache, or computed into it here.
    if (from > 0 && out.prefixReused !== undefined) result.prefix = { computed: from - out.prefixReused, reused: out.prefixReused };
    if (opts.logprobs) {
      result.queryLogprobs = out.logprobs.slice();
      result.queryLogprob = out.logprobs.reduce((a, v) => a + v, 0);
      result.queryGreedy = out.greedy.slice();
    }
    return result;
  }

  /** Raw attention probabilities of one sample: one slice per (layer, head), each
   * [queries × keys], refused beyond `maxRawBytes`. */
  async raw(sample: ProbeSample, req: RawRequest, bytesPerValue: 2 | 4 = 4): Promise<RawSlice[]> {
    const job = await this.prepareRaw(sample, req, bytesPerValue);
    return job.finish((await this.scorer.scoreUnits(job.units)).scores);
  }

  /** Validate a raw request (sample, layers, heads, query range, size cap) and make its
   * unit: the whole sample in a pass of its own. */
  async prepareRaw(sample: ProbeSample, req: RawRequest, bytesPerValue: 2 | 4 = 4): Promise<Prepared<RawSlice[]>> {
    const p = await this.prepare(sample, 'sample');
    const c = this.engine.config;
    const T = p.seg.ids.length;
    // Raw slices run the whole sample in one pass (not in query blocks yet).
    if (this.attentionBytes(1, T) > this.maxAttentionBytes) {
      throw new InvalidArgumentError(
        'sample',
        `${T} tokens need ${(this.attentionBytes(1, T) / 2 ** 20).toFixed(0)} MiB of attention per layer, over the probe limit of ${(this.maxAttentionBytes / 2 ** 20).toFixed(0)} MiB (raw slices are not computed in blocks)`,
      );
    }
    req.layers.forEach((l, k) => {
      if (!Number.isInteger(l) || l < 0 || l >= c.numLayers)
        throw new InvalidArgumentError(`layers[${k}]`, `layer ${l} is outside [0, ${c.numLayers})`);
    });
    req.heads.forEach((h, k) => {
      if (!Number.isInteger(h) || h < 0 || h >= c.numHeads)
        throw new InvalidArgumentError(`heads[${k}]`, `head ${h} is outside [0, ${c.numHeads})`);
    });
    if (req.layers.length === 0) throw new InvalidArgumentError('layers', 'at least one layer is needed');
    if (req.heads.length === 0) throw new InvalidArgumentError('heads', 'at least one head is needed');
    const end = req.queryEnd > 0 ? Math.min(req.queryEnd, T) : T;
    if (!(req.queryStart >= 0 && req.queryStart < end))
      throw new InvalidArgumentError('query_start', `query range [${req.queryStart}, ${end}) is empty or outside the sample's ${T} tokens`);
    const queries = Array.from({ length: end - req.queryStart }, (_, k) => req.queryStart + k);
    const bytes = req.layers.length * req.heads.length * queries.length * T * bytesPerValue;
    if (bytes > this.maxRawBytes) {
      throw new InvalidArgumentError(
        'layers',
        `${req.layers.length} layers × ${req.heads.length} heads × ${queries.length} queries × ${T} keys is ${(bytes / 2 ** 20).toFixed(1)} MiB, over the raw-attention limit of ${(this.maxRawBytes / 2 ** 20).toFixed(1)} MiB: ask for fewer layers, heads or queries`,
      );
    }
    const unit: Unit = {
      prefix: [],
      tail: p.row.tokens,
      targets: [],
      scored: [],
      topK: 0,
      probe: {
        keyBins: p.row.keyBins,
        chunks: p.seg.segments.length,
        queryWeights: p.row.queryWeights,
        heatmap: false,
        raw: { layers: req.layers, heads: req.heads, queries },
      },
    };
    return {
      units: [unit],
      finish: ([out]) => {
        const Q = queries.length;
        return req.layers.flatMap((l) => {
          const data = out!.probe!.raw.get(l)!;
          return req.heads.map((h, k) => ({ layer: l, head: h, queryStart: req.queryStart, keys: T, values: data.slice(k * Q * T, (k + 1) * Q * T) }));
        });
      },
    };
  }
}


function sumHeads(H: number, f: (h: number) => number): number {
  let s = 0;
  for (let h = 0; h < H; h++) s += f(h);
  return s;
}

function meanOf(results: SampleProbe[]): ProbeMean | undefined {
  const labels = results[0]!.labels;
  if (!results.every((r) => r.labels.length === labels.length && r.labels.every((l, i) => l === labels[i]))) return undefined;
  return {
    labels,
    votes: meanMatrix(results.map((r) => r.votes)),
    votesExcluded: meanVector(results.map((r) => r.votesExcluded)),
    mass: meanMatrix(results.map((r) => r.mass)),
    massExcluded: meanVector(results.map((r) => r.massExcluded)),
    heatmap: meanMatrix(results.map((r) => r.heatmap)),
  };
}

/** Index of a sample's first query token. */
function firstQuery(p: PreparedSample): number {
  return p.row.queryWeights.findIndex((w) => w > 0);
}

/** Where a pass over a sample's query rows starts after a cached prefix: its first query
 * row, or, with log-probs, the row before the query chunks' first token, which predicts
 * that token — also when the token is excluded from the keys and so is no query row. */
function passStart(p: PreparedSample, logprobs: boolean): number {
  const first = firstQuery(p);
  if (!logprobs) return first;
  const firstToken = minOf(p.seg.segments.filter((s) => p.queryLabels.includes(s.label)).map((s) => s.start));
  return Math.max(0, Math.min(first, firstToken - 1));
}

/** Index of a sample's last query-chunk token (excluded positions count: their log-probs
 * may be asked for). */
function lastQueryToken(p: PreparedSample): number {
  return maxOf(p.seg.segments.filter((s) => p.queryLabels.includes(s.label)).map((s) => s.end - 1));
}

/** The positions in [from, to) whose next token is a query-chunk token (indices relative
 * to `from`) and that token. */
function queryTargets(p: PreparedSample, from: number, to: number): { index: number; target: number }[] {
  const tokens = p.row.tokens;
  const inQuery = (t: number) => p.seg.segments.some((s) => t >= s.start && t < s.end && p.queryLabels.includes(s.label));
  const out: { index: number; target: number }[] = [];
  for (let t = from; t < to && t + 1 < tokens.length; t++) if (inQuery(t + 1)) out.push({ index: t - from, target: tokens[t + 1]! });
  return out;
}
