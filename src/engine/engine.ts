// The engine runs the model's graph: one onnxruntime session per model, hosted in a
// worker thread (session-host.ts) so passes never hold the event loop. A pass's rows may
// score (log-probs, top-k), probe (attention statistics) or both. It knows rows,
// positions and KV; it knows nothing of text, requests or clients.
import { SessionHost, type HostTensor, type KvPiece, type RunResult } from './session-host.js';
import { findNonFinite } from '../checkpoint/validate.js';
import { openCheckpoint } from './checkpoint.js';
import type { ModelConfig } from '../model/families.js';
import { buildDecoderGraph, type DecoderGraph } from '../model/decoder.js';
import { kvDType, type ComputeDType } from '../common/dtypes.js';
import { probeTap } from '../../kernels/probe-tap.js';
import { resolveDevice, withCpuArena, type DeviceOptions, type ResolvedDevice } from './device.js';
import { checkQuantizedOptions, memoryNeed, weightPlanLine, weightsInfo, weightsPlan, type WeightOptions } from './weights-plan.js';
import { sessionOptions, sessionWeights, startSession } from './session-options.js';
import { placements } from './placements.js';
import { describeAdapter } from './adapter.js';
import { CheckpointError, DeviceError } from '../common/errors.js';
import { WeightFiles, heldWeightsPath, withHeldPlaceholder } from '../checkpoint/weight-files.js';
import type { CheckpointLinks } from '../checkpoint/files.js';
import type { TextTokenizer } from '../text/tokenizer.js';
import { passFeeds, passFetches, passResult, type PassShape } from './pass.js';
import { checkFinite } from './finite-check.js';
import { buildWithHeldCache, heldCachePath } from '../weights/held-cache.js';
import { throttled, type LoadProgressListener } from '../common/load-progress.js';
import type { ForwardRequest, ForwardResult, PassRecord, PastKV } from './pass-types.js';

export type * from './pass-types.js';
export type { KvPiece } from './session-host.js';

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
  /** How the weights are stored and held: the checkpoint's dtypes, at rest as stored or
   * as computed, and why (memory.ts). */
  weights: string;
  graphNodes: number;
  sessionSeconds: number;
  /** On a GPU provider: the nodes onnxruntime left to its CPU provider, by op type (index
   * arithmetic; a float op among them is named in `floatNodesOnCpu`). */
  cpuNodes?: Record<string, number>;
  floatNodesOnCpu?: string[];
  /** With device weights (WebGPU): the bytes the device holds for every session of the model. */
  deviceWeightBytes?: number;
  /** The weight plan in one line (weights-plan.ts): bytes at rest by form and where. */
  weightPlan?: string;
  /** What the weights cache did: `reused FILE`, `filled FILE`, or why it was not used. */
  weightsCache?: string;
  /** What the model needs in memory and what the host had for it, in words (the memory
   * plan's: `needs 9.0 GiB of 22.7 GiB available`), where the plan counts the host's memory. */
  memory?: string;
}

/** How a model is loaded: its device, what is asked of its weights and what its scorer's
 * passes will be (weights-plan.ts: for the memory plan, the scorer's own settings). */
export interface EngineOptions extends DeviceOptions, WeightOptions {
  /** Where a checkpoint folder's symlinks may lead (default: anywhere; `contain`: inside it). */
  checkpointLinks?: CheckpointLinks;
  /** Told each step of the load and how far it is (common/load-progress.ts). */
  progress?: LoadProgressListener;
  /** The weights cache's folder (weights/held-cache.ts); none: the held copy is made each load. */
  weightsCache?: string;
}

/**
 * On the CPU one graph and one session score and probe, so the weights are prepacked
 * once: the probe nodes cost a pass that only scores next to nothing (one gathered
 * row). On WebGPU a pass costs what the host spends dispatching its nodes (about 18 µs
 * a node on the H100, 2026-11-27: a decode step of the 360M shape, 3,332 nodes, 62 ms,
 * its device work 52 ms of it), and the probe tap is 54 of a layer's 97: scoring and
 * generation run a graph without it, and probes a second session, made on the first
 * probe, which reads the weights the first one reads on the device (device weights,
 * graph/device-weights.ts) — unless asked for one session (`probeSession: 'shared'`):
 * every pass dispatching the tap (its scoring outputs are the scoring graph's bits: the
 * tap only reads). */
const separateProbeSession = (device: ResolvedDevice) => device.profile.separateProbeSession && device.probeSession !== 'shared';

/** The model's shape, as the load log and ListModels give it. */
function shapeInfo(config: ModelConfig) {
  return {
    family: config.spec.family,
    modelType: config.modelType,
    layers: config.numLayers,
    heads: config.numHeads,
    kvHeads: config.numKvHeads,
    headDim: config.headDim,
    hidden: config.hiddenSize,
    vocab: config.vocabSize,
    maxLength: config.maxPositions,
  };
}

/** A loaded model's weights files: as they were at load (`files`); whether its sessions hold
 * every weight in memory of their own (`held`: no weights file is mapped once they are
 * made), the files still mapped (`mapped`; absent where that cannot be told); and the
 * bytes read into held memory. */
export interface EngineWeights {
  /** The checkpoint's folder the files are in. */
  dir: string;
  files: WeightFiles;
  held: boolean;
  mapped?: string[];
  heldBytes: number;
}

/** The model's onnxruntime session, and with a separate probe session the probe graph's
 * (see `Engine.load`). */
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
    /** The weights files as they were at load, and whether the sessions hold every weight in
     * memory of their own (else some stay mapped from a file: a file changed under the
     * server refuses the model's passes, see `forward`). */
    readonly weights: EngineWeights,
    /** The graphs widen stored weights each pass (they read `weights_keep_shape`). */
    private readonly weightsAsStored: boolean,
    /** With a separate probe session: the probe graph, for a session made on the first probe. */
    private readonly probeGraph?: { build: () => DecoderGraph },
  ) {}

  /** Load the checkpoint at `dir`: a Hugging Face checkpoint folder or a GGUF file. */
  static async load(dir: string, options: EngineOptions = {}): Promise<Engine> {
    // Every check of the checkpoint runs before anything is built from it, cheapest first:
    // config values (types, ranges, caps), files and weight headers, the config against
    // the headers' shapes (checkpoint.ts), the device, the tokenizer's ids against the
    // vocabulary, then one read of every weight for NaN and infinity.
    const opened = openCheckpoint(dir, options.checkpointLinks);
    checkQuantizedOptions(opened, options);
    const { config, weights: ckpt } = opened;
    const resolved = resolveDevice({ ...options, checkpointDtype: options.checkpointDtype ?? opened.storedDtype });
    const profile = resolved.profile;
    const tokenizer = opened.tokenizer();
    // What it needs in memory, before anything is allocated: how its weights lie at rest,
    // or a refusal naming the need where it cannot fit (memory.ts).
    const memory = weightsPlan(config, opened, resolved, options);
    const device = memory.atRest === 'stored' && options.cpuMemArena === undefined ? withCpuArena(resolved) : resolved;
    const { quantize, quantizedActivations } = options;
    const cached = heldCachePath(options.weightsCache, dir, opened.files, {
      device: device.kind,
      atRest: memory.atRest,
      quantize,
      quantizedActivations,
    });
    const separateProbe = separateProbeSession(device);
    // The model's held copy may be the weights cache's; a probe graph's is its own.
    const graphWeights = (heldWeightsFile = heldWeightsPath()) => ({
      atRest: memory.atRest,
      heldWeightsFile,
      ...(quantizedActivations && { quantizedActivations }),
      ...(quantize && { quantize }),
    });
    // A copy from the weights cache was made from these very files, scanned and checked then.
    const { graph, cache } = buildWithHeldCache(cached, dir, opened.files, (heldFile) =>
      buildDecoderGraph(config, ckpt, device.dtype, separateProbe ? undefined : probeTap(), device.kind, graphWeights(heldFile)),
    );
    const runOptions = sessionOptions(graph.weightsDir, device, config.numLayers);
    if (cache.kind !== 'reuse') await findNonFinite(opened.scan, throttled('scan', 'bytes', options.progress));
    // The chat template is compiled now, once, in its own process: one that does not parse
    // refuses the model here, naming its file, rather than failing every chat request.
    await tokenizer.startChatTemplate();
    // A copy being made for the cache is this load's own file until commit: gone on a failure.
    const dropPartial = () => cache.kind === 'fill' && cache.drop();
    const failed = async (e: Error): Promise<never> => {
      dropPartial();
      await tokenizer.close();
      sessionFailure(device, e);
    };
    const started = performance.now();
    // No silent CPU fallback: where each node runs, from onnxruntime itself (placements.ts).
    // Quantized parts derived at load are not there yet: it reads them as zeros.
    const placed = profile.checkPlacements
      ? await withHeldPlaceholder(graph.heldWeights, () => placements(graph.model, runOptions)).catch(failed)
      : undefined;
    // Recorded before the session reads them: a change during the load shows at the first check.
    const files = new WeightFiles(opened.files);
    const { host, mapped, deviceWeightBytes } = await startSession(
      SESSION,
      graph,
      runOptions,
      device,
      config,
      files,
      ckpt.weightsDir,
      options.progress,
    ).catch(failed);
    const sessionSeconds = (performance.now() - started) / 1000;
    const info: EngineInfo = {
      ...shapeInfo(config),
      device: device.name,
      adapter: describeAdapter(profile.adapter),
      dtype: device.dtype,
      dtypeReason: device.dtypeReason,
      weights: weightsInfo(opened, memory, options),
      weightPlan: weightPlanLine(graph, memory),
      ...(memory.need > 0 && { memory: memoryNeed(memory) }),
      graphNodes: graph.nodeCount,
      sessionSeconds,
      ...(placed ? { cpuNodes: placed.cpuOps, floatNodesOnCpu: placed.floatOnCpu.map((n) => `${n.op} ${n.name}`) } : {}),
      ...(deviceWeightBytes !== undefined && { deviceWeightBytes }),
      weightsCache: cache.kind === 'off' ? cache.reason : `${cache.kind === 'reuse' ? 'reused' : 'filled'} ${cache.file}`,
    };
    const probeGraph = separateProbe
      ? { build: () => buildDecoderGraph(config, ckpt, device.dtype, probeTap(), device.kind, graphWeights()) }
      : undefined;
    const weights = {
      dir: ckpt.weightsDir,
      files,
      held: mapped?.length === 0,
      ...(mapped && { mapped }),
      heldBytes: graph.heldWeights?.bytes ?? 0,
    };
    const engine = new Engine(dir, config, tokenizer, host, device, info, weights, graph.keepsWeightsAsStored, probeGraph);
    options.progress?.({ step: 'check' });
    if (cache.kind !== 'reuse')
      await checkFinite(opened.name, config, (req) => engine.forward(req)).catch(async (e) => {
        dropPartial();
        await engine.release();
        throw e;
      });
    if (cache.kind === 'fill') cache.commit();
    return engine;
  }

  /** Refuse to run a pass that would read weights from a file changed since the load (only
   * where some weight stayed mapped from it: the held ones cannot change). */
  private checkWeights(): void {
    if (this.weights.held) return;
    const changed = this.weights.files.changed();
    if (changed)
      throw new CheckpointError(
        `${changed.file}: the weights file was ${changed.change} since the model was loaded, and the model reads it in place: restart the server to load it again`,
      );
  }

  /** The session a pass runs in: the model's, or for a probing pass with a separate probe
   * session the probe graph's, made on first use. */
  private sessionFor(probing: boolean): Promise<string> {
    if (!probing || !this.probeGraph) return Promise.resolve(SESSION);
    if (this.probeCreated) return this.probeCreated;
    const graph = this.probeGraph.build();
    // A session made from a file changed since the load would not be the model's; with
    // device weights it reads the ones on the device, and no file.
    const changed = !graph.uploads && this.weights.files.changed();
    if (changed)
      return Promise.reject(new CheckpointError(`${changed.file}: the weights file was ${changed.change} since the model was loaded`));
    this.probeCreated = this.host
      .create(PROBE_SESSION, graph.model, sessionOptions(graph.weightsDir, this.device, this.config.numLayers), {
        keyLayout: graph.keyLayout,
        indexFeeds: graph.indexFeeds,
        ...(!graph.uploads && { weights: sessionWeights(graph, this.weights.files, this.weights.dir) }),
      })
      .then(
        () => PROBE_SESSION,
        (e: Error) => {
          this.probeCreated = undefined; // the next probe tries again
          sessionFailure(this.device, e);
        },
      );
    return this.probeCreated;
  }
  private probeCreated?: Promise<string>;

  private readonly passListeners: ((pass: PassRecord) => void)[] = [];

  /** KV bytes of the passes running now: each one's rows × (past + new positions). What
   * the model holds beyond its prefix cache while it computes (the KV-cache gauge). */
  get runningPassKvBytes(): number {
    return this.passKvBytes;
  }
  private passKvBytes = 0;

  /** `listener` hears of every forward pass this engine runs (what metrics count). */
  onPass(listener: (pass: PassRecord) => void): void {
    this.passListeners.push(listener);
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

  /** The weights on the device that every session of the model reads (a provider with
   * `deviceWeights`; none elsewhere): tensors and bytes. */
  deviceWeights(): Promise<{ tensors: number; bytes: number }> {
    return this.host.deviceWeights();
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

  /** `n` slots as a pass lays them out: a multiple of the provider's slot alignment (four
   * on WebGPU), query and key slots alike. onnxruntime's WebGPU MatMul sums in fours along
   * a dimension that is a multiple of four and one by one otherwise, so a row's rounding
   * depended on its pass's shape (measured on lavapipe: a token scored after a cached past
   * of 1–22 tokens differed from the same token in one pass in 35 of 253 cases, by an ulp;
   * a decode row beside a longer past, in 1 of 16). With every pass's query and key slots
   * rounded up to four (masked, so adding exact zeros), none differed. */
  private slots(n: number): number {
    const align = this.device.profile.slotAlignment;
    return Math.ceil(n / align) * align;
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

  /** One forward pass: its shape, feeds and fetches, the run on the session thread, and
   * its answer read from the outputs. */
  async forward(req: ForwardRequest): Promise<ForwardResult> {
    this.checkWeights();
    const shape = this.shapeOf(req);
    const feeds = passFeeds(req, shape, {
      config: this.config,
      profile: this.device.profile,
      probeTapAlways: !this.probeGraph,
      weightsAsStored: this.weightsAsStored,
    });
    const fetches = passFetches(req, shape);
    // Counted before the run: its buffers are transferred to the session thread (detached
    // here after; the inputs counted 0 bytes until this was measured before it).
    const inputBytes = bytesOf(Object.values(feeds));
    const session = await this.sessionFor(shape.probing);
    const started = performance.now();
    const kvBytes = shape.B * (shape.P + shape.T) * this.kvBytesPerToken;
    this.passKvBytes += kvBytes;
    let ran: RunResult;
    try {
      ran = await this.host.run({
        session,
        feeds,
        fetches,
        past: req.past?.handle,
        pastRows: req.rows.map((r) => r.pastRow),
        pastLengths: shape.pastLengths,
        pastSlots: shape.P,
        numLayers: this.config.numLayers,
        keepPresent: req.keepPresent,
        emptyPast: { type: kvDType(this.device.dtype), dims: [shape.B, this.config.numKvHeads, 0, this.config.headDim] },
      });
    } finally {
      this.passKvBytes -= kvBytes;
    }
    if (this.passListeners.length > 0) this.recordPass(req, shape, ran, inputBytes, (performance.now() - started) / 1000);
    return passResult(req, shape, ran.outputs, ran.present);
  }

  /** The pass's rows, query and past slots, each row's valid past, and what it asks. */
  private shapeOf(req: ForwardRequest): PassShape {
    const past = req.past;
    const T = this.queryWidth(req.rows);
    const P = past?.length ?? 0;
    if (
      past?.room !== undefined &&
      (past.room !== T || req.rows.length !== past.validLengths.length || req.rows.some((r, b) => r.pastRow !== b))
    ) {
      throw new Error(`engine: a past laid out with room for ${past.room} new slots is read by a pass of ${T}, row for row`);
    }
    const probing = req.rows.some((r) => r.probe);
    if (req.raw && (!probing || req.rows.length !== 1 || P > 0))
      throw new Error('engine: raw attention is taken from one probe row without a past');
    return {
      B: req.rows.length,
      T,
      P,
      pastLengths: req.rows.map((row) => past?.validLengths[row.pastRow] ?? 0),
      probing,
      // A greedy pass (a decode step) that wants each position's top token only reads it
      // from top1_* where the provider finds it by reductions (kernels/logprobs.ts).
      topOne: this.device.profile.topOneByReduction && req.topK === 1,
    };
  }

  /** What metrics count of a pass: its kind, rows, padded tokens, time, and the bytes that
   * crossed session.run. With KV on the device, what crossed is what the session thread
   * moved between host and device (KV kept there moves nothing; a layout's slot index goes
   * up with the inputs); else the KV a CPU session reads in place counts as past. */
  private recordPass(req: ForwardRequest, shape: PassShape, ran: RunResult, inputBytes: number, seconds: number): void {
    const { B, T, P } = shape;
    const moved = ran.moved;
    const outputs = bytesOf(Object.values(ran.outputs));
    const record: PassRecord = {
      kind: shape.probing ? 'probe' : 'score',
      rows: B,
      tokens: B * T,
      seconds,
      bytes: this.device.profile.kvOnDevice
        ? { inputs: moved.inputs + moved.layoutIndex, pastKv: moved.pastKv, outputs, presentKv: moved.presentKv }
        : {
            inputs: inputBytes,
            pastKv: B * P * this.kvBytesPerToken,
            outputs,
            presentKv: req.keepPresent ? B * T * this.kvBytesPerToken : 0,
          },
    };
    for (const listener of this.passListeners) listener(record);
  }
}

const bytesOf = (ts: Iterable<HostTensor>) => [...ts].reduce((n, t) => n + t.data.byteLength, 0);

/** A session that could not be made: on a provider with advice to give (WebGPU: most often
 * no Vulkan adapter, no loader or driver on the host), a DeviceError with it; else the
 * error as it came. */
function sessionFailure(device: ResolvedDevice, e: Error): never {
  const help = device.profile.sessionFailureHelp;
  if (!help) throw e;
  throw new DeviceError(`device ${device.kind}: onnxruntime could not create a ${device.profile.label} session (${e.message}). ${help}`);
}
