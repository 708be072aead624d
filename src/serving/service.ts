// The serving layer both transports share: the served models and their batchers, model
// lookup, every operation a client can ask for (tokenise, score, probe, …) with its
// queueing, cancellation and deadline (call.ts), the metrics of scored items, and the
// bookkeeping of calls (in flight, counted, logged). gRPC (src/grpc/) and HTTP
// (src/http/) validate and translate their wire formats into these calls; they never
// touch an engine, and neither imports the other. Errors are the ones of src/errors.ts;
// each transport maps them to its statuses.
import { Batcher, type BatcherOptions } from '../core/batcher.js';
import { InvalidArgumentError, NotFoundError, TooLargeError, UnavailableError, checkTokenIds, errorMessage } from '../common/errors.js';
import type { CtxprobeError } from '../common/errors.js';
import { WeightsWatch } from './weights-watch.js';
import type { Metrics } from './metrics.js';
import type { EngineInfo } from '../engine/engine.js';
import type { LoadedModel } from './repository.js';
import {
  countVariants,
  prepareAttribution,
  type AttributionOptions,
  type AttributionSample,
  type SampleAttribution,
} from '../requests/attribution.js';
import { countUnits, prepareScore, type ScoredCounts } from '../requests/score.js';
import { echoValues, generationValues, probeSize, probeValues } from '../requests/answer-size.js';
import type { ProbeAnswer, ProbeOptions, ProbeSample, RawRequest, RawSlice } from '../requests/probe.js';
import type { ContinuationScore, EchoScore, LoglikelihoodRequest, RollingRequest, RollingScore } from '../requests/scoring.js';
import type { Prepared } from '../core/units.js';
import { checkCall, queued, type CallContext } from './call.js';
import {
  Generation,
  generationModel,
  preparePrompt,
  runGenerations,
  type ChoiceResult,
  type PreparedPrompt,
  type PromptBins,
  type TokenEvent,
} from '../requests/generate.js';
import { checkSampling, type SamplingFieldNames, type SamplingParams } from '../requests/sampling.js';
import type { LoadState } from './load-log.js';
import { tokenizerInfo } from './tokenizer-info.js';

// The transports name a call's context as the service's.
export type { CallContext };

export interface ServedModel extends LoadedModel {
  batcher: Batcher;
}

export interface ServiceOptions {
  /** Items (continuations' items, rolling texts, prompts, samples) per request. */
  maxItemsPerRequest?: number;
  /** UTF-8 bytes of text (contexts, continuations, chunks, messages, prompts) per request (default 8 MiB). */
  maxTextBytes?: number;
  /** Tokens in one answer: scored tokens of a request, tokens of a Tokenize (default 131,072). */
  maxScoredTokens?: number;
  /** Values in one answer: log-probs, alternatives, attention statistics, heatmap cells
   * (requests/answer-size.ts; default 262,144). */
  maxAnswerValues?: number;
  /** Worker threads that tokenise for each model (0: on the event loop). */
  tokenizerWorkers?: number;
  batcher?: BatcherOptions;
  log?: (line: Record<string, unknown>) => void;
}

/** What ListModels and /v1/models tell: the engine's facts, the served name and the
 * context length this server scores with. */
export type ModelInfo = Omit<EngineInfo, 'graphNodes' | 'sessionSeconds' | 'cpuNodes' | 'floatNodesOnCpu'> & {
  name: string;
  maxRawAttentionBytes: number;
};

/** One call being answered: `end` records it once, whatever happened. */
export interface CallRecord {
  end(code: string, err?: unknown): void;
}

export class Service {
  readonly models = new Map<string, ServedModel>();
  readonly maxItemsPerRequest: number;
  readonly maxTextBytes: number;
  readonly maxScoredTokens: number;
  readonly maxAnswerValues: number;
  private readonly order: string[] = [];
  private loading = true;
  private draining = false;
  /** Set when a model's session thread died: this process can no longer answer. */
  private broken?: string;
  private inFlight = 0;
  private readonly log: (line: Record<string, unknown>) => void;
  /** Models named in the configuration that are not served, and what a call naming one gets:
   * those that failed to load, and those whose weights changed under them (weights-watch.ts). */
  private readonly unserved = new Map<string, CtxprobeError>();
  private readonly modelHealth: ((model: string, status: 'SERVING' | 'NOT_SERVING') => void)[] = [];
  private readonly weightsWatch: WeightsWatch;

  constructor(
    readonly metrics: Metrics,
    private readonly options: ServiceOptions = {},
  ) {
    this.maxItemsPerRequest = options.maxItemsPerRequest ?? 4096;
    // 8 MiB is ~4.5 s of tokenisation here, and 60 RefuteBench-length (32k-token) dialogues.
    this.maxTextBytes = options.maxTextBytes ?? 8 * 2 ** 20;
    // Answers are serialised on the event loop at 0.5-0.75 µs per token (measured: 600k
    // tokens took 305 ms as a Tokenize answer, 455 ms as a Score answer): 128k tokens keep
    // that near 100 ms. A 32k-token rolling score is ~25 ms.
    this.maxScoredTokens = options.maxScoredTokens ?? 2 ** 17;
    // An answer is built and serialised on the event loop in one piece: see
    // requests/answer-size.ts for what is counted, and docs/operations.md#limits for the cost.
    this.maxAnswerValues = options.maxAnswerValues ?? 2 ** 18;
    this.log = options.log ?? (() => {});
    this.weightsWatch = new WeightsWatch(this.log, (model, err) => this.refuse(model, err));
  }

  // ---- lifecycle -----------------------------------------------------------------------

  addModel(loaded: LoadedModel): ServedModel {
    const name = loaded.entry.name;
    const served = { ...loaded, batcher: new Batcher(name, loaded.scorer, this.options.batcher, this.metrics) };
    loaded.engine.tokenizer.useWorkers(this.options.tokenizerWorkers ?? 1);
    loaded.engine.onPass((pass) => {
      this.metrics.forwardPasses.inc({ model: name, kind: pass.kind });
      this.metrics.forwardPassTokens.inc({ model: name, kind: pass.kind }, pass.tokens);
      const b = pass.bytes;
      for (const [what, n] of [
        ['inputs', b.inputs],
        ['past_kv', b.pastKv],
        ['outputs', b.outputs],
        ['present_kv', b.presentKv],
      ] as const)
        this.metrics.forwardPassBytes.inc({ model: name, what }, n);
    });
    this.models.set(name, served);
    this.order.push(name);
    this.metrics.modelLoadSeconds.set({ model: name }, loaded.loadSeconds);
    this.weightsWatch.start(() => this.models.values());
    for (const listener of this.modelHealth) listener(name, 'SERVING');
    return served;
  }

  /** A model of the configuration that failed to load: not served, and a call naming it is
   * told why (NOT_FOUND). */
  addFailed(name: string, reason: string): void {
    this.refuse(name, new NotFoundError('model', `model ${JSON.stringify(name)} is not served: it failed to load (${reason})`));
  }

  /** From now on, calls naming `model` get `err`, and its health is NOT_SERVING. */
  private refuse(model: string, err: CtxprobeError): void {
    this.unserved.set(model, err);
    for (const listener of this.modelHealth) listener(model, 'NOT_SERVING');
  }

  /** `listener` hears each configured model's health as it changes: SERVING once loaded,
   * NOT_SERVING when it failed to load or can no longer answer. */
  onModelHealth(listener: (model: string, status: 'SERVING' | 'NOT_SERVING') => void): void {
    this.modelHealth.push(listener);
  }

  setServing(): void {
    this.loading = false;
  }

  /** Refuse new work, then resolve once queued and running work has finished. */
  async drain(): Promise<void> {
    this.draining = true;
    this.weightsWatch.stop();
    await Promise.all([...this.models.values()].map((m) => m.batcher.idle()));
    while (this.inFlight > 0) await new Promise((r) => setTimeout(r, 5));
  }

  /** A drain out of time: refuse all queued and running work (UNAVAILABLE: retry elsewhere). */
  abortAll(): void {
    this.draining = true;
    const reason = new UnavailableError('server is shutting down: the drain deadline passed; retry on another replica');
    for (const m of this.models.values()) m.batcher.abortAll(reason);
  }

  /** A model can no longer run (its session thread died): NOT_SERVING, and new work is
   * refused with UNAVAILABLE, for good. */
  markBroken(reason: string): void {
    this.broken ??= reason;
  }

  /** While a model loads: where its load is (serve's LoadLog), for /health. */
  loadState?: () => LoadState | undefined;

  /** What /health says besides SERVING: LOADING (and where the load is) while models load. */
  loadingNow(): LoadState | undefined {
    return this.loading && !this.draining ? this.loadState?.() : undefined;
  }

  /** What health checks report: SERVING once loaded while a model answers, until draining
   * starts or a model breaks. */
  health(): 'SERVING' | 'NOT_SERVING' {
    const answering = this.order.some((name) => !this.unserved.has(name));
    return this.loading || this.draining || this.broken || !answering ? 'NOT_SERVING' : 'SERVING';
  }

  get callsInFlight(): number {
    return this.inFlight;
  }

  /** Start answering a call: it counts as in flight until `end`, which records its
   * status code (the transport's own name for it), duration and, for failures, a log line. */
  begin(method: string): CallRecord {
    const started = performance.now();
    this.inFlight++;
    this.metrics.callsInFlight.inc();
    let ended = false;
    return {
      end: (code, err) => {
        if (ended) return;
        ended = true;
        this.inFlight--;
        this.metrics.callsInFlight.dec();
        const seconds = (performance.now() - started) / 1000;
        this.metrics.requests.inc({ method, code });
        this.metrics.requestSeconds.observe({ method }, seconds);
        const internal = err !== undefined && errorMessage(err).startsWith('internal error');
        this.log({
          level: internal ? 'error' : 'debug',
          method,
          code,
          ms: +(seconds * 1000).toFixed(2),
          ...(err !== undefined ? { message: errorMessage(err) } : {}),
        });
      },
    };
  }

  // ---- models --------------------------------------------------------------------------

  /** The model a request names (empty: the first configured). `forWork`: refuse while
   * draining, so callers go to another replica. */
  model(name: string | undefined, forWork = true): ServedModel {
    if (forWork && this.draining) throw new UnavailableError('server is draining: send to another replica');
    if (forWork && this.broken) throw new UnavailableError(`${this.broken}: send to another replica`);
    const m = name ? this.models.get(name) : this.models.get(this.order.find((n) => !this.unserved.has(n)) ?? '');
    if (m && forWork) this.weightsWatch.check(m);
    const refused = this.unserved.get(name || (m?.entry.name ?? ''));
    if (refused) throw refused;
    if (m) return m;
    if (this.loading) throw new UnavailableError('models are still loading: wait for health SERVING');
    throw new NotFoundError('model', `no model named ${JSON.stringify(name)} (serving: ${[...this.models.keys()].join(', ')})`);
  }

  /** The models served: loaded, and still answering. */
  listModels(): ModelInfo[] {
    return [...this.models.values()].filter((m) => !this.unserved.has(m.entry.name)).map((m) => this.info(m));
  }

  info({ entry, engine, scorer, prober }: ServedModel): ModelInfo {
    const { graphNodes: _nodes, sessionSeconds: _seconds, cpuNodes: _cpu, floatNodesOnCpu: _float, memory: _memory, weightPlan: _plan, weightsCache: _cache, ...facts } = engine.info;
    return { name: entry.name, ...facts, maxLength: scorer.maxLength, maxRawAttentionBytes: prober.maxRawBytes };
  }

  // ---- tokens --------------------------------------------------------------------------

  async tokenize(model: string | undefined, texts: string[], addSpecialTokens: boolean): Promise<{ ids: number[]; tokens: string[] }[]> {
    const tok = this.model(model, false).engine.tokenizer;
    this.checkItems(texts.length, 'texts');
    this.checkTextBytes(texts, 'texts');
    const all = await Promise.all(texts.map((text) => tok.encodeAsync(text, addSpecialTokens)));
    const tokens = all.reduce((n, ids) => n + ids.length, 0);
    if (tokens > this.maxScoredTokens)
      throw new TooLargeError(`texts: ${tokens} tokens, over the limit of ${this.maxScoredTokens} per answer (--max-scored-tokens)`);
    return all.map((ids) => ({ ids, tokens: ids.map((id) => tok.tokenString(id)) }));
  }

  detokenize(model: string | undefined, ids: number[]): string {
    const { engine } = this.model(model, false);
    checkTokenIds(ids, engine.config.vocabSize, 'tokens');
    return engine.tokenizer.decode(ids);
  }

  /** What a remote tokenizer needs (tokenizer-info.ts). */
  tokenizerInfo(model: string | undefined): Record<string, unknown> {
    const m = this.model(model, false);
    return tokenizerInfo(m.engine.tokenizer, { maxLength: m.scorer.maxLength, vocabSize: m.engine.config.vocabSize });
  }

  /** Text prompts, within the text limit, encoded as encodePrompt does. */
  encodePrompts(model: ServedModel, texts: string[], addSpecialTokens = true): Promise<{ ids: number[]; added: boolean[] }[]> {
    this.checkTextBytes(texts, 'prompt');
    return Promise.all(texts.map((t) => this.encodePrompt(model, t, addSpecialTokens)));
  }

  /** Encode a text prompt, with the tokenizer's special tokens unless told otherwise (as
   * reference servers do); `added` marks the tokens the encoding added (they have no text
   * in the prompt). */
  async encodePrompt(model: ServedModel, text: string, addSpecialTokens = true): Promise<{ ids: number[]; added: boolean[] }> {
    const tok = model.engine.tokenizer;
    const [ids, plain] = await Promise.all([
      tok.encodeAsync(text, addSpecialTokens),
      addSpecialTokens ? tok.encodeAsync(text, false) : undefined,
    ]);
    return { ids, added: addedTokens(ids, plain ?? ids) };
  }

  /** Each token's text as it reads in the text after `context` (OpenAI `logprobs.tokens`,
   * Probe's tokens): they join into the decoded text (text/token-pieces.ts). */
  tokenTexts(model: ServedModel, ids: number[], context: readonly number[] = []): string[] {
    return model.engine.tokenizer.pieces(ids, context);
  }

  // ---- scoring -------------------------------------------------------------------------

  /** Refuse a request whose text is over the limit, before any of it is tokenised. */
  checkTextBytes(request: unknown, field: string): void {
    const bytes = textBytes(request);
    if (bytes > this.maxTextBytes) {
      throw new InvalidArgumentError(field, `${bytes} bytes of text, over the limit of ${this.maxTextBytes} per call (--max-text-bytes)`);
    }
  }

  /** The per-call item limit (--max-items), for every kind of item: `field` names the
   * request field, `items` what it holds (plural). */
  checkItems(count: number, field = 'items', items = field): void {
    if (count === 0) throw new InvalidArgumentError(field, `at least one ${items.replace(/s$/, '')} is needed`);
    if (count > this.maxItemsPerRequest) {
      throw new InvalidArgumentError(field, `${count} ${items}, over the limit of ${this.maxItemsPerRequest} per call`);
    }
  }

  /** The per-answer limits, for every kind of request, before anything is queued: its
   * scored tokens (--max-scored-tokens) and its values (--max-answer-values: each scored
   * token and alternative, each attention statistic and heatmap cell). A request over
   * either is too large (413-class), never to be retried as it is. */
  private checkAnswer(counted: ScoredCounts, field = 'items'): void {
    if (counted.tokens > this.maxScoredTokens)
      throw new TooLargeError(`${field}: ${counted.tokens} scored tokens, over the limit of ${this.maxScoredTokens} per answer (--max-scored-tokens)`);
    if (counted.values > this.maxAnswerValues)
      throw new TooLargeError(
        `${field}: the answer would hold ${counted.values} values (${counted.what}), over the limit of ${this.maxAnswerValues} per answer (--max-answer-values): ask for fewer items, tokens or alternatives`,
      );
  }

  /** Continuation log-likelihoods (lm-evaluation-harness `loglikelihood`), items with a
   * chunked context with their attention. */
  async score(m: ServedModel, requests: LoglikelihoodRequest[], call: CallContext): Promise<ContinuationScore[][]> {
    this.checkTextBytes(requests, 'items');
    const job = await prepareScore(m.encoder, m.prober, requests);
    return this.scoreUnits(m, job, call, job.counted);
  }

  /** Rolling log-likelihoods (perplexity, mean loss, Min-K% Prob). */
  async scoreRolling(m: ServedModel, requests: RollingRequest[], call: CallContext): Promise<RollingScore[]> {
    this.checkTextBytes(requests, 'items');
    return this.scoreUnits(m, await m.encoder.prepareRolling(requests), call);
  }

  /** Every prompt token's log-prob and the greedy next token (OpenAI-style `echo`), with
   * `topK` alternatives per position, plus `spare` more when the model allows (a client
   * that keys alternatives by text needs them when tokens share a text). */
  echo(m: ServedModel, prompts: number[][], topK: number, call: CallContext, spare = 0): Promise<EchoScore[]> {
    this.checkItems(prompts.length, 'prompt', 'prompts');
    if (Number.isInteger(topK) && topK > m.scorer.maxTopK)
      throw new InvalidArgumentError('logprobs', `must be a whole number in [0, ${m.scorer.maxTopK}]`);
    const k = topK > 0 ? Math.min(topK + spare, m.scorer.maxTopK, m.engine.config.vocabSize) : topK;
    // Counted per prompt: an echo's units also hold shared prompt heads.
    const counted = {
      items: prompts.length,
      tokens: prompts.reduce((n, p) => n + p.length, 0),
      values: echoValues(prompts, topK),
      what: 'prompt tokens × (1 + logprobs)',
    };
    return this.scoreUnits(m, m.encoder.prepareEcho(prompts, k), call, counted);
  }

  /** Check the per-answer limit, queue the units, count what was scored, answer. */
  private async scoreUnits<T>(m: ServedModel, prepared: Prepared<T>, call: CallContext, counted = countUnits(prepared.units)): Promise<T> {
    this.checkAnswer(counted);
    const scores = await queued(m.batcher.submit(prepared.units), call);
    const model = m.entry.name;
    this.metrics.itemsScored.inc({ model }, counted.items);
    this.metrics.tokensScored.inc({ model }, counted.tokens);
    return prepared.finish(scores);
  }

  // ---- probing -------------------------------------------------------------------------

  async probe(m: ServedModel, samples: ProbeSample[], options: ProbeOptions, call: CallContext): Promise<ProbeAnswer> {
    this.checkItems(samples.length, 'samples');
    this.checkTextBytes(samples, 'samples');
    const { prepared, opts } = await m.prober.prepareAll(samples, options);
    const job = m.prober.units(prepared, opts);
    const model = { layers: m.engine.config.numLayers, heads: m.engine.config.numHeads };
    const values = prepared.reduce((n, p) => n + probeValues(probeSize(p), opts, model), 0);
    const what = 'per sample: layers × chunks of votes and mass (× heads), segments² heatmap cells, its tokens';
    this.checkAnswer({ items: prepared.length, tokens: 0, values, what }, 'samples');
    const answer = job.finish(await queued(m.batcher.submit(job.units), call));
    this.metrics.itemsScored.inc({ model: m.entry.name }, prepared.length);
    return answer;
  }

  /** Chunk attribution: every variant of every sample is a scoring unit of one queued job
   * (it shares the model's queue, limits and prefix cache with scoring). */
  async attribute(
    m: ServedModel,
    samples: AttributionSample[],
    options: AttributionOptions,
    call: CallContext,
  ): Promise<SampleAttribution[]> {
    this.checkItems(samples.length, 'samples');
    this.checkTextBytes(samples, 'samples');
    // Counted from the request (options checked first), before a variant is tokenised or built.
    const { total, field } = countVariants(samples, options);
    if (total > this.maxItemsPerRequest)
      throw new InvalidArgumentError(
        field,
        `${total} variants to score, over the limit of ${this.maxItemsPerRequest} per call (--max-items)`,
      );
    const prepared = await prepareAttribution(m.engine, samples, options, () => checkCall(call));
    return this.scoreUnits(m, prepared, call, { ...countUnits(prepared.units), items: samples.length });
  }

  async rawAttention(m: ServedModel, sample: ProbeSample, req: RawRequest, bytesPerValue: 2 | 4, call: CallContext): Promise<RawSlice[]> {
    this.checkTextBytes(sample, 'sample');
    const job = await m.prober.prepareRaw(sample, req, bytesPerValue);
    return job.finish(await queued(m.batcher.submit(job.units), call));
  }

  // ---- generation ----------------------------------------------------------------------

  /** Generate from each prompt: every step of every running choice (of this call and of
   * every other) is a unit of the model's one scheduler. `onTokens` hears each step's
   * tokens as they come (prompt index, events), for streaming. */
  async generate(
    m: ServedModel,
    prompts: number[][],
    params: SamplingParams,
    call: CallContext,
    onTokens?: (prompt: number, events: TokenEvent[]) => void,
    bins?: PromptBins[],
  ): Promise<ChoiceResult[][]> {
    this.checkGenerate(m, prompts, params, {}, bins?.[0]?.chunks);
    const generations = prompts.map((p, i) => new Generation(generationModel(m.engine, m.scorer), p, params, bins?.[i]));
    // Counted as each step makes them: a 50-stream run showed nothing until calls ended,
    // and a cancelled stream's tokens never.
    const counted = (prompt: number, events: TokenEvent[]) => {
      this.metrics.tokensGenerated.inc({ model: m.entry.name }, events.length);
      onTokens?.(prompt, events);
    };
    return runGenerations(
      generations,
      (units, continuing) => queued(m.batcher.submit(units, { continuing }), call),
      counted,
      () => checkCall(call),
    );
  }

  /** A generation prompt given as a sample (labelled chunks or chat messages). */
  async preparePrompt(m: ServedModel, sample: ProbeSample, field: string): Promise<PreparedPrompt> {
    this.checkTextBytes(sample, field);
    return preparePrompt(m.engine, sample, field);
  }

  /** Refuse a generation request before anything runs (a stream's status is still free);
   * `attentionChunks`: the prompt's chunks when each token reports its attention. */
  checkGenerate(m: ServedModel, prompts: number[][], params: SamplingParams, names: SamplingFieldNames = {}, attentionChunks?: number): void {
    this.checkItems(prompts.length * params.n, 'prompt', 'choices (prompts × n)');
    const attention = attentionChunks === undefined ? undefined : { chunks: attentionChunks, layers: m.engine.config.numLayers };
    const values = generationValues(prompts.length, params, attention);
    this.checkAnswer({ items: prompts.length, tokens: 0, values, what: 'prompts × n × max_tokens × (1 + logprobs)' }, names.max_tokens ?? 'max_tokens');
    const model = generationModel(m.engine, m.scorer);
    prompts.forEach((p, i) => {
      checkTokenIds(p, m.engine.config.vocabSize, prompts.length > 1 ? `prompt[${i}]` : 'prompt');
      checkSampling(params, p.length, model, m.scorer.maxTopK, names);
    });
  }
}

/** Which tokens of `ids` (an encoding with special tokens) the plain encoding lacks: it
 * sits inside, after the tokens added in front. */
function addedTokens(ids: number[], plain: number[]): boolean[] {
  let front = 0;
  while (front + plain.length <= ids.length && plain.some((id, k) => ids[front + k] !== id)) front++;
  if (front + plain.length > ids.length) front = 0;
  return ids.map((_, k) => k < front || k >= front + plain.length);
}

/** UTF-8 bytes of every string in a request. */
function textBytes(value: unknown): number {
  if (typeof value === 'string') return Buffer.byteLength(value, 'utf8');
  if (Array.isArray(value)) return value.reduce((n: number, v) => n + textBytes(v), 0);
  if (value !== null && typeof value === 'object') return Object.values(value).reduce((n: number, v) => n + textBytes(v), 0);
  return 0;
}
