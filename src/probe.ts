// Attention probing on top of the engine's probe graph: CHARPEval's per-layer chunk
// distribution (argmax votes and attention mass), RefuteBench's round heatmap, and raw
// attention slices under a size cap. The graph does the reductions over layers, heads
// and keys (kernels/attention.ts); this file turns per-bin sums into the reported
// distributions and reduces query tokens to segments.
import type { Engine, PastKV, ProbeResult, ProbeRow } from './engine.js';
import type { Scorer } from './scoring/scorer.js';
import { CancelledError, InvalidArgumentError } from './errors.js';
import { meanMatrix, meanVector } from './common/matrix.js';
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

export interface PreparedRaw {
  prepared: PreparedSample;
  req: RawRequest;
  queries: number[];
}

export interface ProberOptions {
  /** The model's scorer, whose prefix cache probes without a heatmap use. */
  scorer?: Scorer;
  /** Bytes of one layer's attention (batch × heads × T × T × 4) a probe pass may hold. */
  maxAttentionBytes?: number;
  /** Largest raw-attention answer, in bytes of the requested dtype. */
  maxRawBytes?: number;
}

/** A sample turned into tokens, bins and query weights. */
export interface PreparedSample {
  seg: Segmented;
  row: ProbeRow;
  queryLabels: string[];
  excluded: Set<number>;
}

export class Prober {
  readonly maxAttentionBytes: number;
  readonly maxRawBytes: number;
  private readonly scorer?: Scorer;

  constructor(
    readonly engine: Engine,
    options: ProberOptions = {},
  ) {
    this.scorer = options.scorer;
    // 256 MiB: with votes and mass over the query rows only, a block's size no longer costs
    // time (16k-token probe, 512/384/256 MiB: 75.5/75.6/74.0 s), and peak RSS follows it
    // (2171/1852/1569 MiB above the loaded model).
    this.maxAttentionBytes = options.maxAttentionBytes ?? 256 * 2 ** 20;
    this.maxRawBytes = options.maxRawBytes ?? 64 * 2 ** 20;
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

  async probe(samples: ProbeSample[], options: ProbeOptions = {}): Promise<ProbeAnswer> {
    const { prepared, opts } = await this.prepareAll(samples, options);
    return this.run(prepared, opts);
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

  /** Probe prepared samples, packed into passes under the attention-memory limit;
   * `shouldStop` is asked before each pass (a caller gone: CancelledError). */
  async run(prepared: PreparedSample[], opts: ProbeAnswer['options'], shouldStop?: () => boolean): Promise<ProbeAnswer> {
    const results: SampleProbe[] = new Array(prepared.length);
    const order = prepared.map((_, i) => i).sort((a, b) => prepared[b]!.row.tokens.length - prepared[a]!.row.tokens.length);
    let batch: number[] = [];
    const flush = async () => {
      if (shouldStop?.()) throw new CancelledError();
      if (batch.length > 0) await this.runBatch(prepared, batch, opts, results);
      batch = [];
    };
    // A sample whose whole attention would exceed the limit runs alone, in query blocks.
    const long = (i: number) => this.attentionBytes(1, prepared[i]!.row.tokens.length) > this.maxAttentionBytes;
    // Without a heatmap, a sample whose queries start late runs alone after its cached prefix.
    const cached = (i: number) => !long(i) && !opts.heatmap && this.scorer?.cache !== undefined && passStart(prepared[i]!, opts.logprobs) > 0;
    for (const i of order.filter(long)) await this.runInBlocks(prepared, i, opts, results, shouldStop);
    for (const i of order.filter(cached)) {
      if (shouldStop?.()) throw new CancelledError();
      await this.runAfterPrefix(prepared, i, opts, results);
    }
    for (const i of order.filter((i) => !cached(i) && !long(i))) {
      const longest = Math.max(prepared[i]!.row.tokens.length, ...batch.map((j) => prepared[j]!.row.tokens.length));
      if (batch.length > 0 && this.attentionBytes(batch.length + 1, longest) > this.maxAttentionBytes) await flush();
      batch.push(i);
    }
    await flush();
    return { samples: results, mean: meanOf(results), options: opts };
  }

  /** One sample in query blocks: each block's rows against the KV of the blocks before it,
   * sized so that heads × block × keys × 4 bytes stays within the limit (blocks shrink as
   * the keys grow). Votes and mass are sums over query rows and add up across blocks; the
   * heatmap's per-row maps are laid side by side. No pass holds T × T. */
  private async runInBlocks(
    prepared: PreparedSample[],
    i: number,
    opts: ProbeAnswer['options'],
    results: SampleProbe[],
    shouldStop?: () => boolean,
  ): Promise<void> {
    const p = prepared[i]!;
    const T = p.row.tokens.length;
    const bins = p.seg.segments.length + 2;
    const H = this.engine.config.numHeads;
    const cells = Math.floor(this.maxAttentionBytes / (H * 4));
    const blockSize = (keys: number) => Math.max(1, Math.floor((Math.sqrt(keys * keys + 4 * cells) - keys) / 2));
    const perBin = (n: number) => new Float32Array(n);
    const L = this.engine.config.numLayers;
    const logprobs: number[] = [];
    const greedy: boolean[] = [];
    const total: ProbeResult = {
      T,
      logprobs: new Float32Array(0),
      greedy: [],
      votes: perBin(L * H * bins),
      sinkVotes: perBin(L * H),
      mass: perBin(L * H * bins),
      sinkMass: perBin(L * H),
      heat: {
        max: { keyMax: perBin(T * bins), keySum: perBin(T * bins) },
        mean: { keyMax: perBin(T * bins), keySum: perBin(T * bins) },
      },
      keyCount: perBin(T * bins),
      raw: new Map(),
    };
    const add = (into: Float32Array, from: Float32Array) => from.forEach((v, k) => (into[k]! += v));
    let past: PastKV | undefined;
    try {
      for (let start = 0; start < T;) {
        if (shouldStop?.()) throw new CancelledError();
        const end = Math.min(T, start + blockSize(start));
        const out = await this.engine.probe({
          rows: [
            {
              tokens: p.row.tokens.slice(start, end),
              keyBins: p.row.keyBins.slice(start, end),
              queryWeights: p.row.queryWeights.slice(start, end),
              sequenceLength: T,
            },
          ],
          numBins: bins,
          ...(past ? { past: { kv: past, keyBins: p.row.keyBins.slice(0, start) } } : {}),
          keepPresent: end < T,
          heatmap: opts.heatmap,
          ...(opts.logprobs ? { scored: queryTargets(p, start, end, 0) } : {}),
        });
        logprobs.push(...out.logprobs);
        greedy.push(...out.greedy);
        if (past) this.engine.dropPast(past);
        past = out.present;
        add(total.votes, out.votes);
        add(total.sinkVotes, out.sinkVotes);
        add(total.mass, out.mass);
        add(total.sinkMass, out.sinkMass);
        if (opts.heatmap) {
          for (const pool of ['max', 'mean'] as const) {
            total.heat[pool].keyMax.set(out.heat[pool].keyMax, start * bins);
            total.heat[pool].keySum.set(out.heat[pool].keySum, start * bins);
          }
          total.keyCount.set(out.keyCount, start * bins);
        }
        start = end;
      }
    } finally {
      if (past) this.engine.dropPast(past);
    }
    total.logprobs = Float32Array.from(logprobs);
    total.greedy = greedy;
    this.collect(prepared, [i], opts, results, total, bins, 0);
  }

  /** One sample without a heatmap: the tokens before its first query token from the
   * prefix cache (computed into it when missing), then a probe pass of the query rows
   * only (up to the last query token; later rows matter to no query). */
  private async runAfterPrefix(prepared: PreparedSample[], i: number, opts: ProbeAnswer['options'], results: SampleProbe[]): Promise<void> {
    const p = prepared[i]!;
    const r0 = passStart(p, opts.logprobs);
    // Rows after the last query token are not needed (causal): stop there.
    const end = 1 + lastQueryToken(p);
    const bins = p.seg.segments.length + 2;
    const { value: out, computed, reused } = await this.scorer!.withCachedPrefix(p.row.tokens.slice(0, r0), (kv: PastKV) =>
      this.engine.probe({
        rows: [
          {
            tokens: p.row.tokens.slice(r0, end),
            keyBins: p.row.keyBins.slice(r0, end),
            queryWeights: p.row.queryWeights.slice(r0, end),
            sequenceLength: p.row.tokens.length,
          },
        ],
        numBins: bins,
        past: { kv, keyBins: p.row.keyBins.slice(0, r0) },
        heatmap: false,
        ...(opts.logprobs ? { scored: queryTargets(p, r0, end, 0) } : {}),
      }),
    );
    this.collect(prepared, [i], opts, results, out, bins, r0);
    results[i]!.prefix = { computed, reused };
  }

  private async runBatch(prepared: PreparedSample[], batch: number[], opts: ProbeAnswer['options'], results: SampleProbe[]): Promise<void> {
    // All samples of a pass share the bin layout: chunks padded to the most chunks.
    const C = Math.max(...batch.map((i) => prepared[i]!.seg.segments.length));
    const rows = batch.map((i) => {
      const p = prepared[i]!;
      const own = p.seg.segments.length;
      return { ...p.row, keyBins: p.row.keyBins.map((b) => (b === own ? C : b)) };
    });
    const bins = C + 2;
    const scored = opts.logprobs ? batch.flatMap((i, b) => queryTargets(prepared[i]!, 0, prepared[i]!.row.tokens.length, b)) : undefined;
    this.collect(prepared, batch, opts, results, await this.engine.probe({ rows, numBins: bins, heatmap: opts.heatmap, ...(scored ? { scored } : {}) }), bins, 0);
  }

  /** Per-sample answers from a probe pass whose rows start at token `offset`. */
  private collect(
    prepared: PreparedSample[],
    batch: number[],
    opts: ProbeAnswer['options'],
    results: SampleProbe[],
    out: ProbeResult,
    bins: number,
    offset: number,
  ): void {
    const c = this.engine.config;
    const L = c.numLayers;
    const H = c.numHeads;
    const C = bins - 2;
    const T = out.T;
    let scoredAt = 0;
    batch.forEach((i, b) => {
      const p = prepared[i]!;
      const S = p.seg.segments.length;
      const nq = p.row.queryWeights.reduce((a, w) => a + w, 0);
      const perLayer = (data: Float32Array, l: number, h: number, bin: number) => data[((b * L + l) * H + h) * bins + bin]!;
      const dist = (data: Float32Array) =>
        Array.from({ length: L }, (_, l) => Array.from({ length: S }, (_, u) => sumHeads(H, (h) => perLayer(data, l, h, u)) / (H * nq)));
      const perHead = (data: Float32Array) =>
        Array.from({ length: L }, (_, l) =>
          Array.from({ length: H }, (_, h) => Array.from({ length: S }, (_, u) => perLayer(data, l, h, u) / nq)),
        );
      const sink = (data: Float32Array) => Array.from({ length: L }, (_, l) => sumHeads(H, (h) => data[(b * L + l) * H + h]!) / (H * nq));
      const heat = out.heat[opts.pool];
      const keyValue = (t: number, u: number): number => {
        const at = (b * T + t - offset) * bins + u;
        if (opts.keyReduce === 'max') return heat.keyMax[at]!;
        if (opts.keyReduce === 'sum') return heat.keySum[at]!;
        const n = out.keyCount[at]!;
        return n > 0 ? heat.keySum[at]! / n : 0;
      };
      const reduceQueries = (s: Segment, u: number) => {
        const values: number[] = [];
        for (let t = s.start; t < s.end; t++) if (!p.excluded.has(t)) values.push(keyValue(t, u));
        if (values.length === 0) return 0;
        if (opts.queryReduce === 'max') return Math.max(...values);
        const sum = values.reduce((a, v) => a + v, 0);
        return opts.queryReduce === 'sum' ? sum : sum / values.length;
      };
      results[i] = {
        labels: p.seg.segments.map((s) => s.label),
        segments: p.seg.segments,
        numTokens: p.seg.ids.length,
        queryLabels: p.queryLabels,
        votes: dist(out.votes),
        votesExcluded: sink(out.sinkVotes),
        mass: dist(out.mass),
        massExcluded: sink(out.sinkMass),
        ...(opts.perHead ? { votesPerHead: perHead(out.votes), massPerHead: perHead(out.mass) } : {}),
        heatmap: opts.heatmap ? p.seg.segments.map((s) => Array.from({ length: S }, (_, u) => reduceQueries(s, u))) : [],
        heatmapExcluded: opts.heatmap ? p.seg.segments.map((s) => reduceQueries(s, C)) : [],
      };
      if (opts.logprobs) {
        // The pass scored this sample's query targets in order (offset: rows before are not in it).
        const n = queryTargets(p, offset, p.row.tokens.length, 0).length;
        const lps = Array.from(out.logprobs.subarray(scoredAt, scoredAt + n));
        scoredAt += n;
        results[i]!.queryLogprobs = lps;
        results[i]!.queryLogprob = lps.reduce((a, v) => a + v, 0);
        results[i]!.queryGreedy = out.greedy.slice(scoredAt - n, scoredAt);
      }
    });
  }

  /** Raw attention probabilities of one sample: one slice per (layer, head), each
   * [queries × keys], refused beyond `maxRawBytes`. */
  async raw(sample: ProbeSample, req: RawRequest, bytesPerValue: 2 | 4 = 4): Promise<RawSlice[]> {
    return this.runRaw(await this.prepareRaw(sample, req, bytesPerValue));
  }

  /** Validate a raw request (sample, layers, heads, query range, size cap) before queueing. */
  async prepareRaw(sample: ProbeSample, req: RawRequest, bytesPerValue: 2 | 4 = 4): Promise<PreparedRaw> {
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
    return { prepared: p, req, queries };
  }

  async runRaw({ prepared: p, req, queries }: PreparedRaw): Promise<RawSlice[]> {
    const T = p.seg.ids.length;
    const C = p.seg.segments.length;
    const out = await this.engine.probe({ rows: [p.row], numBins: C + 2, raw: { layers: req.layers, heads: req.heads, queries } });
    const slices: RawSlice[] = [];
    const Q = queries.length;
    for (const l of req.layers) {
      const data = out.raw.get(l)!;
      req.heads.forEach((h, k) =>
        slices.push({ layer: l, head: h, queryStart: req.queryStart, keys: T, values: data.slice(k * Q * T, (k + 1) * Q * T) }),
      );
    }
    return slices;
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
  const firstToken = Math.min(...p.seg.segments.filter((s) => p.queryLabels.includes(s.label)).map((s) => s.start));
  return Math.max(0, Math.min(first, firstToken - 1));
}

/** Index of a sample's last query-chunk token (excluded positions count: their log-probs
 * may be asked for). */
function lastQueryToken(p: PreparedSample): number {
  return Math.max(...p.seg.segments.filter((s) => p.queryLabels.includes(s.label)).map((s) => s.end - 1));
}

/** The positions in [from, to) whose next token is a query-chunk token, as scored
 * positions of row `row` (indices relative to `from`). */
function queryTargets(p: PreparedSample, from: number, to: number, row: number): { row: number; index: number; target: number }[] {
  const tokens = p.row.tokens;
  const inQuery = (t: number) => p.seg.segments.some((s) => t >= s.start && t < s.end && p.queryLabels.includes(s.label));
  const out: { row: number; index: number; target: number }[] = [];
  for (let t = from; t < to && t + 1 < tokens.length; t++) if (inQuery(t + 1)) out.push({ row, index: t - from, target: tokens[t + 1]! });
  return out;
}
