// The engine runs the model's graph: one onnxruntime session per model, hosted in a
// worker thread (session-host.ts) so passes never hold the event loop. A pass's rows may
// score (log-probs, top-k), probe (attention statistics) or both. It knows rows,
// positions and KV; it knows nothing of text, requests or clients.
import { SessionHost, type HostTensor } from './session-host.js';
import { SafetensorsCheckpoint } from '../checkpoint/safetensors.js';
import { readModelConfig } from '../model/config.js';
import type { ModelConfig } from '../model/families.js';
import { buildDecoderGraph, type DecoderGraph } from '../model/decoder.js';
import { kvDType, type ComputeDType } from '../common/dtypes.js';
import { probeTap } from '../../kernels/probe-tap.js';
import { resolveDevice, type DeviceOptions, type ResolvedDevice } from './device.js';
import { buildKvLayoutGraph, layoutBuckets } from './kv-layout.js';
import { placements } from './placements.js';
import { describeAdapter } from './adapter.js';
import { DeviceError } from '../common/errors.js';
import { TextTokenizer } from '../text/tokenizer.js';
import { PROBE_OUTPUTS, idleProbeFeeds, probeBins, probeFeeds } from './probe-feeds.js';

/** One row of new tokens, continuing row `pastRow` of the past KV (if any). */
export interface Row {
  tokens: number[];
  /** Absolute position of tokens[0] (= the valid length of its past row). */
  startPosition: number;
  pastRow: number;
  /** Length of the whole sequence this row belongs to (a query block's sequence runs
   * past its end), when positions depend on it (longrope); default: its end. */
  sequenceLength?: number;
  /** Past positions [start, end) this row's queries must not see (a chunk knocked out of
   * attention for every later query, attribution.ts); every range ends at or before
   * `startPosition`. */
  hidden?: KeyRange[];
  /** Attention statistics over this row's queries (a probe row). */
  probe?: RowProbe;
}

/** What a probe row brings: the bin of every key it sees and the weight of each query. */
export interface RowProbe {
  /** Per position from 0 to the row's end (its past, then its tokens): 0..C−1 a chunk,
   * C excluded (an attention sink, its share reported apart). */
  keyBins: number[];
  /** C, this row's chunks (rows of one pass may have different counts). */
  chunks: number;
  /** Per token of the row: its weight as a query. */
  queryWeights: number[];
}

/** Token positions [start, end). */
export interface KeyRange {
  start: number;
  end: number;
}

/** KV cache of a prefix pass (per layer [rows, kv_heads, P, head_dim], right-padded),
 * kept in the session host under `handle` until `Engine.dropPast`. */
export interface PastKV {
  handle: number;
  validLengths: number[];
  length: number;
  /** Zero slots laid out after `length` for the new tokens of the one pass that reads this
   * past (its query width), which writes them in place. */
  room?: number;
}

/** Positions [offset, offset + count) of row `row` of a kept KV. */
export interface KvPiece {
  handle: number;
  row: number;
  offset: number;
  count: number;
}

export interface ScoredPosition {
  row: number;
  index: number; // position within the row's new tokens whose logits are scored
  target: number;
}

/** One forward pass: rows that score, rows that probe, or both. */
export interface ForwardRequest {
  rows: Row[];
  past?: PastKV;
  scored: ScoredPosition[];
  topK: number;
  /** Indices into `scored` whose whole log-prob distribution comes back (`next`): what a
   * generation step samples from. */
  next?: number[];
  keepPresent: boolean;
  /** With probe rows: compute the per-row maps a heatmap is made of. */
  heatmap?: boolean;
  /** With one probe row and no past: raw probabilities of these layers, heads and query rows. */
  raw?: { layers: number[]; heads: number[]; queries: number[] };
}

/** One forward pass as run: scoring only, or with probe rows; its rows and padded tokens. */
export interface PassRecord {
  kind: 'score' | 'probe';
  rows: number;
  tokens: number;
  /** Bytes that crossed session.run: inputs (token ids, positions, masks; the past KV,
   * which a CPU session reads where it lies) and outputs (log-probs, distributions,
   * statistics; the new slots' KV when kept — the past stays where it is). On a GPU each
   * would be a host transfer. */
  bytes: { inputs: number; pastKv: number; outputs: number; presentKv: number };
  /** Wall seconds of the run on the session thread, the hop there and back included: what
   * a benchmark sets against its total to see where the rest of the time went. */
  seconds: number;
}

export interface ForwardResult {
  logprobs: Float32Array;
  greedy: boolean[];
  /** Alternatives per scored position, as run: the k asked, at most the vocabulary. */
  topK: number;
  topkLogprobs?: Float32Array; // [scored, topK]
  topkIds?: BigInt64Array;
  /** [next.length, vocab] log-probs, with `next`. */
  next?: Float32Array;
  present?: PastKV;
  /** With probe rows: the pass's attention statistics. */
  probe?: PassProbe;
}

/** A pass's attention statistics, every row in the pass's bins: C chunks (C the most of
 * any probe row; a row's own excluded bin is mapped to C), C+1 padding. */
export interface PassProbe {
  /** Query slots per row (the pass's padded row length). */
  T: number;
  bins: number;
  votes: Float32Array; // [B, L, H, bins]
  sinkVotes: Float32Array; // [B, L, H]
  mass: Float32Array; // [B, L, H, bins]
  sinkMass: Float32Array; // [B, L, H]
  /** [B, T, bins] with `heatmap`, else [B, 1, bins] of zeros. */
  heat: Record<'max' | 'mean', { keyMax: Float32Array; keySum: Float32Array }>;
  keyCount: Float32Array;
  raw: Map<number, Float32Array>; // layer → [B, Hr, Q, S]
  /** Keys per row (past + T). */
  S: number;
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
  /** The GPU as the host's drivers name it (WebGPU: the Vulkan adapter); empty on the CPU. */
  adapter: string;
  dtype: ComputeDType;
  dtypeReason: string;
  graphNodes: number;
  sessionSeconds: number;
  /** On a GPU provider: the nodes onnxruntime left to its CPU provider, by op type (index
   * arithmetic; a float op among them is named in `floatNodesOnCpu`). */
  cpuNodes?: Record<string, number>;
  floatNodesOnCpu?: string[];
}

/** The model's onnxruntime session, and on WebGPU the probe graph's (see `Engine.load`). */
const SESSION = 'model';
const PROBE_SESSION = 'probe';

export class Engine {
  private constructor(
    readonly dir: string,
    readonly config: ModelConfig,
    readonly tokenizer: TextTokenizer,
    private readonly host: SessionHost,
    readonly device: ResolvedDevice,
    readonly info: EngineInfo,
    /** On WebGPU: the probe graph, for a session of its own made on the first probe. */
    private readonly probeGraph?: { build: () => DecoderGraph; options: Record<string, unknown> },
  ) {}

  static async load(dir: string, options: DeviceOptions = {}): Promise<Engine> {
    const config = readModelConfig(dir);
    const ckpt = new SafetensorsCheckpoint(dir);
    const device = resolveDevice({ ...options, checkpointDtype: options.checkpointDtype ?? checkpointDtype(config.torchDtype, ckpt) });
    const tokenizer = TextTokenizer.load(dir, { bos: config.bosTokenId, eos: config.eosTokenId });
    // On the CPU one graph and one session score and probe, so the weights are prepacked
    // once: the probe nodes cost a pass that only scores next to nothing (one gathered
    // row). On WebGPU a pass costs what the host spends dispatching its nodes (about 18 µs
    // a node on the H100, 2026-11-27: a decode step of the 360M shape, 3,332 nodes, 62 ms,
    // its device work 52 ms of it), and the probe tap is 54 of a layer's 97: scoring and
    // generation run a graph without it, and probes a second session, made on the first
    // probe (its own copy of the weights on the device from then on).
    const separateProbe = device.kind === 'webgpu';
    const graph = buildDecoderGraph(config, ckpt, device.dtype, separateProbe ? undefined : probeTap(), device.kind);
    const runOptions = sessionOptions(graph.weightsDir, device, config.numLayers);
    const started = performance.now();
    // No silent CPU fallback: where each node runs, from onnxruntime itself (placements.ts).
    const placed =
      device.kind === 'webgpu' ? await placements(graph.model, runOptions).catch((e: Error) => gpuFailure(device, e)) : undefined;
    const host = new SessionHost();
    try {
      await host.create(SESSION, graph.model, runOptions, {
        ...(device.kind === 'webgpu' ? { deviceKv: deviceKv(config, device) } : {}),
        indexFeeds: graph.indexFeeds,
      });
    } catch (e) {
      await host.close();
      if (device.kind === 'webgpu') gpuFailure(device, e as Error);
      throw e;
    }
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
      device: device.kind === 'cuda' ? `cuda:${device.deviceId}` : device.kind,
      adapter: device.kind === 'cpu' ? '' : describeAdapter(device.kind),
      dtype: device.dtype,
      dtypeReason: device.dtypeReason,
      graphNodes: graph.nodeCount,
      sessionSeconds,
      ...(placed ? { cpuNodes: placed.cpuOps, floatNodesOnCpu: placed.floatOnCpu.map((n) => `${n.op} ${n.name}`) } : {}),
    };
    const probeGraph = separateProbe
      ? { build: () => buildDecoderGraph(config, ckpt, device.dtype, probeTap(), device.kind), options: runOptions }
      : undefined;
    return new Engine(dir, config, tokenizer, host, device, info, probeGraph);
  }

  /** The session a pass runs in: the model's, or on WebGPU for a probing pass the probe
   * graph's, made on first use. */
  private sessionFor(probing: boolean): Promise<string> {
    if (!probing || !this.probeGraph) return Promise.resolve(SESSION);
    if (this.probeCreated) return this.probeCreated;
    const graph = this.probeGraph.build();
    this.probeCreated = this.host.create(PROBE_SESSION, graph.model, this.probeGraph.options, { indexFeeds: graph.indexFeeds }).then(
      () => PROBE_SESSION,
      (e: Error) => {
        this.probeCreated = undefined; // the next probe tries again
        gpuFailure(this.device, e);
      },
    );
    return this.probeCreated;
  }
  private probeCreated?: Promise<string>;

  private readonly passListeners: ((pass: PassRecord) => void)[] = [];

  /** `listener` hears of every forward pass this engine runs (what metrics count). */
  onPass(listener: (pass: PassRecord) => void): void {
    this.passListeners.push(listener);
  }

  private passed(record: PassRecord): void {
    for (const listener of this.passListeners) listener(record);
  }

  /** `listener` is called once if the thread that runs this model's sessions dies. */
  onHostLost(listener: (err: Error) => void): void {
    this.host.onLost(listener);
  }

  /** How many KVs the session thread keeps (passes kept for a next block, the prefix
   * cache's segments): a count that must return to the cache's own after every call. */
  keptPasts(): Promise<number> {
    return this.host.keptPasts();
  }

  /** Tensors the session thread holds for kept KV (on a GPU: device buffers). */
  keptTensors(): Promise<number> {
    return this.host.keptTensors();
  }

  /** KV bytes copied into layouts so far (what a past read where it lies saves). */
  laidOutKvBytes(): Promise<number> {
    return this.host.laidOutBytes();
  }

  /** Test hook: KV layout graph runs on the device so far. */
  kvLayoutRuns(): Promise<number> {
    return this.host.layoutRuns();
  }

  /** Test hook (CTXPROBE_TEST_HOOKS): make the session thread die. */
  exitHostForTest(): void {
    this.host.exitForTest();
  }

  async release(): Promise<void> {
    await this.tokenizer.close();
    await this.host.close();
  }

  /** KV bytes of one position: every layer's keys and values. */
  get kvBytesPerToken(): number {
    const c = this.config;
    return c.numLayers * 2 * c.numKvHeads * c.headDim * (kvDType(this.device.dtype) === 'float16' ? 2 : 4);
  }

  /** A past laid out from pieces of kept KV: row b is `rows[b]`'s pieces end to end.
   * Given the rows of the one pass that reads it, row for row, and pasts of different
   * lengths, it gets room after them for that pass's new slots, which the graph writes in
   * place: the keys are copied once, where appending and then moving each row's new slots
   * to the end of its own past copied them twice (streams decoding from prompts of
   * different lengths). */
  async gatherPast(rows: KvPiece[][], forPass?: readonly { tokens: readonly number[] }[]): Promise<PastKV> {
    const validLengths = rows.map((pieces) => pieces.reduce((n, p) => n + p.count, 0));
    const length = this.slots(Math.max(0, ...validLengths));
    const room = forPass?.length === rows.length && validLengths.some((n) => n !== validLengths[0]) ? this.queryWidth(forPass) : 0;
    return { handle: await this.host.gather(rows, length + room), validLengths, length, ...(room > 0 ? { room } : {}) };
  }

  /** The query slots of a pass of these rows (T): the longest row's tokens, at least two. */
  private queryWidth(rows: readonly { tokens: readonly number[] }[]): number {
    // At least two query slots: with one, onnxruntime's CPU attention products take
    // another kernel path whose float32 rounding differs from the same row's in a longer
    // pass (measured: 12 of 21 positions off by an ulp in a chain of one-token passes,
    // none with two or more). A padding slot (an invalid key, unscored) keeps a one-token
    // continuation of a cached prefix bit-identical to computing it in full.
    //
    return this.slots(Math.max(2, ...rows.map((r) => r.tokens.length)));
  }

  /** `n` slots as a pass lays them out: on WebGPU a multiple of four, query and key slots
   * alike. onnxruntime's WebGPU MatMul sums in fours along a dimension that is a multiple
   * of four and one by one otherwise, so a row's rounding depended on its pass's shape
   * (measured on lavapipe: a token scored after a cached past of 1–22 tokens differed from
   * the same token in one pass in 35 of 253 cases, by an ulp; a decode row beside a longer
   * past, in 1 of 16). With every pass's query and key slots rounded up to four (masked,
   * so adding exact zeros), none differed. */
  private slots(n: number): number {
    return this.device.kind === 'webgpu' ? Math.ceil(n / 4) * 4 : n;
  }

  /** Pasts laid out from pieces, one per entry, in one round trip to the session thread. */
  async gatherPasts(layouts: KvPiece[][][]): Promise<PastKV[]> {
    const shaped = layouts.map((rows) => {
      const validLengths = rows.map((pieces) => pieces.reduce((n, p) => n + p.count, 0));
      return { rows, validLengths, length: this.slots(Math.max(0, ...validLengths)) };
    });
    const handles = await this.host.gatherEach(shaped.map((s) => ({ rows: s.rows, length: s.length })));
    return shaped.map((s, i) => ({ handle: handles[i]!, validLengths: s.validLengths, length: s.length }));
  }

  /** Free the KV of a prefix pass once no pass continues it. */
  dropPast(past: PastKV): void {
    this.host.dropPast(past.handle);
  }

  /** The empty past (P = 0) of a pass of `rows` rows starting at position 0. */
  private emptyPast(rows: number): { type: 'float32' | 'float16'; dims: number[] } {
    return { type: kvDType(this.device.dtype), dims: [rows, this.config.numKvHeads, 0, this.config.headDim] };
  }

  /** The log-prob head's inputs: which flat positions, which targets, how many
   * alternatives. Reductions over an empty [0, vocab] tensor crash onnxruntime's CPU
   * kernels (SIGFPE), so a pass that scores nothing scores one dummy position, unread;
   * TopK runs whether or not its outputs are fetched, so k = 0 unless asked. */
  private scoreFeeds(scored: ScoredPosition[], T: number, topK = 0, next: number[] = []): Record<string, HostTensor> {
    const scoredOrDummy = scored.length > 0 ? scored : [{ row: 0, index: 0, target: 0 }];
    const scoreRows = BigInt64Array.from(scoredOrDummy, (s) => BigInt(s.row * T + s.index));
    const targetIds = BigInt64Array.from(scoredOrDummy, (s) => BigInt(s.target));
    const k = Math.min(Math.max(0, topK), this.config.vocabSize);
    return {
      score_rows: int64(scoreRows, [scoreRows.length]),
      target_ids: int64(targetIds, [targetIds.length]),
      top_k: int64(BigInt64Array.from([BigInt(k)]), [1]),
      next_rows: int64(BigInt64Array.from(next, BigInt), [next.length]),
    };
  }

  async forward(req: ForwardRequest): Promise<ForwardResult> {
    const c = this.config;
    const past = req.past;
    const B = req.rows.length;
    const T = this.queryWidth(req.rows);
    const P = past?.length ?? 0;
    if (
      past?.room !== undefined &&
      (past.room !== T || req.rows.length !== past.validLengths.length || req.rows.some((r, b) => r.pastRow !== b))
    ) {
      throw new Error(`engine: a past laid out with room for ${past.room} new slots is read by a pass of ${T}, row for row`);
    }
    // Row b's keys: its past's valid slots, then its new tokens, then padding — so the
    // present's valid slots are a prefix of every row, and any pass can be continued.
    const pastLengths = req.rows.map((row) => past?.validLengths[row.pastRow] ?? 0);

    const inputIds = new BigInt64Array(B * T);
    const positionIds = new BigInt64Array(B * T);
    const keyPositions = new BigInt64Array(B * (P + T)).fill(-1n);
    req.rows.forEach((row, b) => {
      const valid = pastLengths[b]!;
      for (let j = 0; j < valid; j++) keyPositions[b * (P + T) + j] = BigInt(j);
      for (const h of row.hidden ?? []) {
        if (h.end > row.startPosition || h.start < 0) throw new Error("engine: hidden keys must lie in the row's past");
        for (let j = h.start; j < h.end; j++) keyPositions[b * (P + T) + j] = -1n;
      }
      row.tokens.forEach((tok, t) => {
        inputIds[b * T + t] = BigInt(tok);
        positionIds[b * T + t] = BigInt(row.startPosition + t);
        keyPositions[b * (P + T) + valid + t] = BigInt(row.startPosition + t);
      });
    });
    const N = req.scored.length;
    // On WebGPU a pass that wants each position's top token only (a greedy decode step)
    // reads it from top1_* and feeds TopK k = 0 (kernels/logprobs.ts: the provider's TopK
    // sorts the whole vocabulary).
    const topOne = this.device.kind === 'webgpu' && req.topK === 1;
    const probing = req.rows.some((r) => r.probe);
    if (req.raw && (!probing || B !== 1 || P > 0)) throw new Error('engine: raw attention is taken from one probe row without a past');
    const feeds: Record<string, HostTensor> = {
      input_ids: int64(inputIds, [B, T]),
      position_ids: int64(positionIds, [B, T]),
      key_positions: int64(keyPositions, [B, P + T]),
      // WebGPU's graph reads where its keys lie from the session thread (kv_rows, kv_steps).
      ...(this.device.kind === 'webgpu' ? {} : { past_lengths: int64(BigInt64Array.from(pastLengths, BigInt), [B]) }),
      ...this.scoreFeeds(req.scored, T, topOne ? 0 : req.topK, req.next),
      // A graph with the probe tap reads its inputs on every pass (an idle row when none
      // probes); the WebGPU scoring graph has none.
      ...(probing ? probeFeeds(req, P, T) : this.probeGraph ? {} : idleProbeFeeds(B, P + T)),
    };
    // On WebGPU a kept pass of decode steps (four query slots or fewer) also returns its keys
    // and values whole: the next step's past as it lies, with no layout run (session.ts).
    if (this.device.kind === 'webgpu') feeds.full_slots = int64(BigInt64Array.from([BigInt(req.keepPresent && T <= 4 ? P + T : 0)]), [1]);
    if (c.rope?.long) {
      feeds.sequence_lengths = int64(
        BigInt64Array.from(req.rows, (r) => BigInt(r.sequenceLength ?? r.startPosition + r.tokens.length)),
        [B],
      );
    }
    const fetches: string[] = [];
    if (N > 0) fetches.push('logprobs', 'greedy');
    if (N > 0 && req.topK > 0) fetches.push(...(topOne ? ['top1_logprobs', 'top1_ids'] : ['topk_logprobs', 'topk_ids']));
    const M = req.next?.length ?? 0;
    if (M > 0) {
      if (req.next!.some((i) => !(i >= 0 && i < N))) throw new Error('engine: next names a position that is not scored');
      fetches.push('next_logprobs');
    }
    if (fetches.length === 0) fetches.push('logprobs');
    if (probing) {
      fetches.push(...PROBE_OUTPUTS);
      for (const l of req.raw?.layers ?? []) fetches.push(`raw.${l}`);
    }

    // Counted before the run: its buffers are transferred to the session thread (detached
    // here after; the inputs counted 0 bytes until this was measured before it).
    const size = (ts: Iterable<HostTensor>) => [...ts].reduce((n, t) => n + t.data.byteLength, 0);
    const inputBytes = size(Object.values(feeds));
    const session = await this.sessionFor(probing);
    const started = performance.now();
    const {
      outputs: out,
      present,
      moved,
    } = await this.host.run({
      session,
      feeds,
      fetches,
      past: past?.handle,
      pastRows: req.rows.map((r) => r.pastRow),
      pastLengths,
      pastSlots: P,
      numLayers: c.numLayers,
      keepPresent: req.keepPresent,
      emptyPast: this.emptyPast(B),
    });
    if (this.passListeners.length > 0) {
      this.passed({
        kind: probing ? 'probe' : 'score',
        rows: B,
        tokens: B * T,
        seconds: (performance.now() - started) / 1000,
        // On a GPU what crosses is what the session thread moved between host and device (KV
        // kept on the device moves nothing; a layout's slot index goes up with the inputs).
        bytes:
          this.device.kind === 'webgpu'
            ? {
                inputs: moved.inputs + moved.layoutIndex,
                pastKv: moved.pastKv,
                outputs: size(Object.values(out)),
                presentKv: moved.presentKv,
              }
            : {
                inputs: inputBytes,
                pastKv: B * P * this.kvBytesPerToken,
                outputs: size(Object.values(out)),
                presentKv: req.keepPresent ? B * T * this.kvBytesPerToken : 0,
              },
      });
    }
    const result: ForwardResult = {
      logprobs: N > 0 ? (out.logprobs!.data as Float32Array) : new Float32Array(0),
      greedy: N > 0 ? Array.from(out.greedy!.data as Uint8Array, (v) => v !== 0) : [],
      topK: 0,
    };
    if (N > 0 && topOne) {
      result.topK = 1;
      result.topkLogprobs = out.top1_logprobs!.data as Float32Array;
      result.topkIds = out.top1_ids!.data as BigInt64Array;
    } else if (N > 0 && req.topK > 0) {
      result.topK = out.topk_ids!.dims[1]!;
      result.topkLogprobs = out.topk_logprobs!.data as Float32Array;
      result.topkIds = out.topk_ids!.data as BigInt64Array;
    }
    if (M > 0) result.next = out.next_logprobs!.data as Float32Array;
    if (req.keepPresent) {
      result.present = { handle: present!, validLengths: req.rows.map((r, b) => pastLengths[b]! + r.tokens.length), length: P + T };
    }
    if (probing) {
      const f = (name: string) => out[name]!.data as Float32Array;
      result.probe = {
        T,
        S: P + T,
        bins: probeBins(req.rows),
        votes: f('probe.votes'),
        sinkVotes: f('probe.sink_votes'),
        mass: f('probe.mass'),
        sinkMass: f('probe.sink_mass'),
        heat: {
          max: { keyMax: f('heat.max.key_max'), keySum: f('heat.max.key_sum') },
          mean: { keyMax: f('heat.mean.key_max'), keySum: f('heat.mean.key_sum') },
        },
        keyCount: f('heat.key_count'),
        raw: new Map((req.raw?.layers ?? []).map((l) => [l, f(`raw.${l}`)])),
      };
    }
    return result;
  }
}

/** The checkpoint's dtype: config `torch_dtype` (or `dtype`), else the one its weights
 * are stored in when they agree. */
function checkpointDtype(configured: string | undefined, ckpt: SafetensorsCheckpoint): string | undefined {
  if (configured) return configured;
  const stored = new Set([...ckpt.tensors.values()].map((t) => t.dtype));
  return stored.size === 1 ? [...stored][0] : undefined;
}

/** onnxruntime session options: the device's, and where external weights live. On WebGPU
 * the new keys and values stay in device buffers (the next pass reads them there) and
 * everything else comes back to the host. */
function sessionOptions(weightsDir: string, device: ResolvedDevice, layers: number): Record<string, unknown> {
  const options: Record<string, unknown> = {
    ...device.sessionOptions,
    extra: { session: { model_external_initializers_file_folder_path: weightsDir } },
  };
  if (device.kind === 'webgpu') {
    const kv = Array.from({ length: layers }, (_, i) => [`new.${i}.key`, `new.${i}.value`, `full.${i}.key`, `full.${i}.value`]).flat();
    options.preferredOutputLocation = Object.fromEntries(kv.map((name) => [name, 'gpu-buffer']));
  }
  return options;
}

/** The layout graphs the session thread runs to lay out kept KV on the device (kv-layout.ts). */
function deviceKv(config: ModelConfig, device: ResolvedDevice) {
  const shape = { tensors: 2 * config.numLayers, kvHeads: config.numKvHeads, headDim: config.headDim, dtype: device.dtype };
  return {
    layouts: layoutBuckets().map((sources) => ({ sources, model: buildKvLayoutGraph(shape, sources) })),
    kvHeads: config.numKvHeads,
    headDim: config.headDim,
    type: kvDType(device.dtype),
    options: device.sessionOptions,
  };
}

/** A WebGPU session that could not be made: most often no Vulkan adapter (no loader or
 * driver on the host). */
function gpuFailure(device: ResolvedDevice, e: Error): never {
  throw new DeviceError(
    `device ${device.kind}: onnxruntime could not create a WebGPU session (${e.message}). WebGPU on Linux runs on Vulkan: ` +
      'the Vulkan loader (libvulkan1) and a driver (NVIDIA\'s, or Mesa\'s lavapipe from bookworm-backports for a software GPU) must be installed; see README, "GPU hosts"',
  );
}

function int64(data: BigInt64Array, dims: number[]): HostTensor {
  return { type: 'int64', data, dims };
}
