// The engine runs the scoring graph: one onnxruntime session per model. It knows rows,
// positions and KV tensors; it knows nothing of text, requests or clients.
import ort from 'onnxruntime-node';
import { SafetensorsCheckpoint } from './checkpoint/safetensors.js';
import { readModelConfig, type ModelConfig } from './model/families.js';
import { buildDecoderGraph } from './model/decoder.js';
import { kvDType, type ComputeDType } from './dtypes.js';
import { probeTap } from '../kernels/probe-tap.js';
import { resolveDevice, type DeviceOptions, type ResolvedDevice } from './device.js';
import { TextTokenizer } from './tokenizer.js';

/** One row of new tokens, continuing row `pastRow` of the past KV (if any). */
export interface Row {
  tokens: number[];
  /** Absolute position of tokens[0] (= the valid length of its past row). */
  startPosition: number;
  pastRow: number;
}

/** KV cache of a prefix pass: per layer [rows, kv_heads, P, head_dim], right-padded. */
export interface PastKV {
  keys: ort.Tensor[];
  values: ort.Tensor[];
  validLengths: number[];
  length: number;
}

export interface ScoredPosition {
  row: number;
  index: number; // position within the row's new tokens whose logits are scored
  target: number;
}

export interface ForwardRequest {
  rows: Row[];
  past?: PastKV;
  scored: ScoredPosition[];
  topK: number;
  keepPresent: boolean;
}

export interface ForwardResult {
  logprobs: Float32Array;
  greedy: boolean[];
  topkLogprobs?: Float32Array; // [scored, k]
  topkIds?: BigInt64Array;
  present?: PastKV;
}

/** One sample of a probe pass: its tokens, each key's bin and each query's weight. */
export interface ProbeRow {
  tokens: number[];
  /** Per token: 0..C-1 its chunk, C excluded (sink); padding gets C+1. */
  keyBins: number[];
  /** Per token: 1 in a query chunk, 0 elsewhere. */
  queryWeights: number[];
}

export interface ProbeRequest {
  rows: ProbeRow[];
  /** C + 2: the chunks, the excluded bin, the padding bin. */
  numBins: number;
  raw?: { layers: number[]; heads: number[]; queries: number[] };
}

export interface ProbeResult {
  T: number;
  votes: Float32Array; // [B, L, H, bins]
  sinkVotes: Float32Array; // [B, L, H]
  mass: Float32Array; // [B, L, H, bins]
  sinkMass: Float32Array; // [B, L, H]
  heat: Record<'max' | 'mean', { keyMax: Float32Array; keySum: Float32Array }>; // [B, T, bins]
  keyCount: Float32Array; // [B, T, bins]
  raw: Map<number, Float32Array>; // layer → [B, Hr, Q, T]
}

export interface EngineInfo {
  family: string;
  modelType: string;
  layers: number;
  heads: number;
  kvHeads: number;
  headDim: number;
  hidden: number;
  vocab: number;
  maxLength: number;
  device: string;
  dtype: ComputeDType;
  graphNodes: number;
  sessionSeconds: number;
}

export class Engine {
  private probeSession?: Promise<ort.InferenceSession>;

  private constructor(
    readonly dir: string,
    readonly config: ModelConfig,
    readonly tokenizer: TextTokenizer,
    private readonly session: ort.InferenceSession,
    readonly device: ResolvedDevice,
    readonly info: EngineInfo,
    private readonly ckpt: SafetensorsCheckpoint,
  ) {}

  static async load(dir: string, options: DeviceOptions = {}): Promise<Engine> {
    const device = resolveDevice(options);
    const config = readModelConfig(dir);
    const ckpt = new SafetensorsCheckpoint(dir);
    const tokenizer = TextTokenizer.load(dir, { bos: config.bosTokenId, eos: config.eosTokenId });
    const graph = buildDecoderGraph(config, ckpt, device.dtype);
    const started = performance.now();
    const session = await createSession(graph.model, graph.weightsDir, device);
    const sessionSeconds = (performance.now() - started) / 1000;
    const info: EngineInfo = {
      family: config.spec.family,
      modelType: config.modelType,
      layers: config.numLayers,
      heads: config.numHeads,
      kvHeads: config.numKvHeads,
      headDim: config.headDim,
      hidden: config.hiddenSize,
      vocab: config.vocabSize,
      maxLength: config.maxPositions,
      device: device.kind === 'cuda' ? `cuda:${device.deviceId}` : 'cpu',
      dtype: device.dtype,
      graphNodes: graph.nodeCount,
      sessionSeconds,
    };
    return new Engine(dir, config, tokenizer, session, device, info, ckpt);
  }

  async release(): Promise<void> {
    await this.session.release();
    if (this.probeSession) await (await this.probeSession).release();
  }

  /** The probe graph's session, built on first use (it holds its own copy of the
   * prepacked weights, so servers that never probe never pay for it). */
  private probeGraph(): Promise<ort.InferenceSession> {
    this.probeSession ??= (async () => {
      const graph = buildDecoderGraph(this.config, this.ckpt, this.device.dtype, probeTap());
      return createSession(graph.model, graph.weightsDir, this.device);
    })();
    return this.probeSession;
  }

  /** One probe pass over full sequences (no past): attention statistics per sample. */
  async probe(req: ProbeRequest): Promise<ProbeResult> {
    const c = this.config;
    const session = await this.probeGraph();
    const B = req.rows.length;
    const T = Math.max(1, ...req.rows.map((r) => r.tokens.length));
    const inputIds = new BigInt64Array(B * T);
    const positionIds = new BigInt64Array(B * T);
    const keyPositions = new BigInt64Array(B * T).fill(-1n);
    const keyBin = new BigInt64Array(B * T).fill(BigInt(req.numBins - 1));
    const queryWeight = new Float32Array(B * T);
    req.rows.forEach((row, b) =>
      row.tokens.forEach((tok, t) => {
        inputIds[b * T + t] = BigInt(tok);
        positionIds[b * T + t] = BigInt(t);
        keyPositions[b * T + t] = BigInt(t);
        keyBin[b * T + t] = BigInt(row.keyBins[t]!);
        queryWeight[b * T + t] = row.queryWeights[t]!;
      }),
    );
    const raw = req.raw ?? { layers: [], heads: [], queries: [] };
    const i64 = (values: number[]) => new ort.Tensor('int64', BigInt64Array.from(values, BigInt), [values.length]);
    const feeds: Record<string, ort.Tensor> = {
      input_ids: new ort.Tensor('int64', inputIds, [B, T]),
      position_ids: new ort.Tensor('int64', positionIds, [B, T]),
      key_positions: new ort.Tensor('int64', keyPositions, [B, T]),
      past_index: new ort.Tensor('int64', new BigInt64Array(B), [B]),
      key_bin: new ort.Tensor('int64', keyBin, [B, T]),
      query_weight: new ort.Tensor('float32', queryWeight, [B, T]),
      num_bins: i64([req.numBins]),
      raw_heads: i64(raw.heads),
      raw_queries: i64(raw.queries),
      // 1 + the most excluded keys of any row: the top keys always hold a kept one.
      probe_top_keys: i64([1 + Math.max(0, ...req.rows.map((r) => r.keyBins.filter((b) => b === req.numBins - 2).length))]),
    };
    const past = this.emptyPast();
    for (let i = 0; i < c.numLayers; i++) {
      feeds[`past.${i}.key`] = past.keys[i]!;
      feeds[`past.${i}.value`] = past.values[i]!;
    }
    const names = ['probe.votes', 'probe.sink_votes', 'probe.mass', 'probe.sink_mass', 'heat.key_count'];
    for (const pool of ['max', 'mean']) names.push(`heat.${pool}.key_max`, `heat.${pool}.key_sum`);
    for (const l of raw.layers) names.push(`raw.${l}`);
    const out = await session.run(feeds, names);
    const f = (name: string) => out[name]!.data as Float32Array;
    return {
      T,
      votes: f('probe.votes'),
      sinkVotes: f('probe.sink_votes'),
      mass: f('probe.mass'),
      sinkMass: f('probe.sink_mass'),
      heat: {
        max: { keyMax: f('heat.max.key_max'), keySum: f('heat.max.key_sum') },
        mean: { keyMax: f('heat.mean.key_max'), keySum: f('heat.mean.key_sum') },
      },
      keyCount: f('heat.key_count'),
      raw: new Map(raw.layers.map((l) => [l, f(`raw.${l}`)])),
    };
  }

  private emptyPastCache?: PastKV;

  /** An empty past (P = 0) for rows that start at position 0; made once, fed every pass. */
  private emptyPast(): PastKV {
    return (this.emptyPastCache ??= this.makeEmptyPast());
  }

  private makeEmptyPast(): PastKV {
    const c = this.config;
    const dims = [1, c.numKvHeads, 0, c.headDim];
    const type = kvDType(this.device.dtype);
    const t = () => new ort.Tensor(type, type === 'float16' ? new Uint16Array(0) : new Float32Array(0), dims);
    return {
      keys: Array.from({ length: c.numLayers }, t),
      values: Array.from({ length: c.numLayers }, t),
      validLengths: [0],
      length: 0,
    };
  }

  async forward(req: ForwardRequest): Promise<ForwardResult> {
    const c = this.config;
    const past = req.past ?? this.emptyPast();
    const B = req.rows.length;
    const T = Math.max(1, ...req.rows.map((r) => r.tokens.length));
    const P = past.length;
    if (req.keepPresent && P > 0) throw new Error('engine: present KV is only kept from a pass without past');

    const inputIds = new BigInt64Array(B * T);
    const positionIds = new BigInt64Array(B * T);
    const keyPositions = new BigInt64Array(B * (P + T)).fill(-1n);
    const pastIndex = new BigInt64Array(B);
    req.rows.forEach((row, b) => {
      pastIndex[b] = BigInt(row.pastRow);
      const valid = past.validLengths[row.pastRow] ?? 0;
      for (let j = 0; j < valid; j++) keyPositions[b * (P + T) + j] = BigInt(j);
      row.tokens.forEach((tok, t) => {
        inputIds[b * T + t] = BigInt(tok);
        positionIds[b * T + t] = BigInt(row.startPosition + t);
        keyPositions[b * (P + T) + P + t] = BigInt(row.startPosition + t);
      });
    });
    // Reductions over an empty [0, vocab] tensor crash onnxruntime's CPU kernels
    // (SIGFPE), so a pass that scores nothing scores one dummy position, unread.
    const scoredOrDummy = req.scored.length > 0 ? req.scored : [{ row: 0, index: 0, target: 0 }];
    const N = req.scored.length;
    const scoreRows = new BigInt64Array(scoredOrDummy.length);
    const targetIds = new BigInt64Array(scoredOrDummy.length);
    scoredOrDummy.forEach((s, n) => {
      scoreRows[n] = BigInt(s.row * T + s.index);
      targetIds[n] = BigInt(s.target);
    });
    // TopK runs whether or not its outputs are fetched: k = 0 makes it free.
    const k = Math.min(Math.max(0, req.topK), c.vocabSize);

    const feeds: Record<string, ort.Tensor> = {
      input_ids: new ort.Tensor('int64', inputIds, [B, T]),
      position_ids: new ort.Tensor('int64', positionIds, [B, T]),
      key_positions: new ort.Tensor('int64', keyPositions, [B, P + T]),
      past_index: new ort.Tensor('int64', pastIndex, [B]),
      score_rows: new ort.Tensor('int64', scoreRows, [scoreRows.length]),
      target_ids: new ort.Tensor('int64', targetIds, [targetIds.length]),
      top_k: new ort.Tensor('int64', BigInt64Array.from([BigInt(k)]), [1]),
    };
    for (let i = 0; i < c.numLayers; i++) {
      feeds[`past.${i}.key`] = past.keys[i]!;
      feeds[`past.${i}.value`] = past.values[i]!;
    }
    const fetches: string[] = [];
    if (N > 0) fetches.push('logprobs', 'greedy');
    if (N > 0 && req.topK > 0) fetches.push('topk_logprobs', 'topk_ids');
    if (req.keepPresent) for (let i = 0; i < c.numLayers; i++) fetches.push(`present.${i}.key`, `present.${i}.value`);
    if (fetches.length === 0) fetches.push('logprobs');

    const out = await this.session.run(feeds, fetches);
    const result: ForwardResult = {
      logprobs: N > 0 ? (out.logprobs!.data as Float32Array) : new Float32Array(0),
      greedy: N > 0 ? Array.from(out.greedy!.data as Uint8Array, (v) => v !== 0) : [],
    };
    if (N > 0 && req.topK > 0) {
      result.topkLogprobs = out.topk_logprobs!.data as Float32Array;
      result.topkIds = out.topk_ids!.data as BigInt64Array;
    }
    if (req.keepPresent) {
      result.present = {
        keys: Array.from({ length: c.numLayers }, (_, i) => out[`present.${i}.key`]!),
        values: Array.from({ length: c.numLayers }, (_, i) => out[`present.${i}.value`]!),
        validLengths: req.rows.map((r) => r.tokens.length),
        length: T,
      };
    }
    return result;
  }
}

function createSession(model: Uint8Array, weightsDir: string, device: ResolvedDevice): Promise<ort.InferenceSession> {
  return ort.InferenceSession.create(model, {
    ...device.sessionOptions,
    extra: { session: { model_external_initializers_file_folder_path: weightsDir } },
  });
}
