// gRPC handlers: validate, translate to the scoring library, queue on the model's
// batcher, translate back. They hold no model logic; every failure becomes a status
// that names the offending field.
import * as grpc from '@grpc/grpc-js';
import type { LoadedModel } from '../repository.js';
import type { Metrics } from '../metrics.js';
import { Batcher, CancelledError, QueueFullError } from '../batcher.js';
import {
  ScoringError,
  type ContinuationScore,
  type LoglikelihoodRequest,
  type Prepared,
  type RollingRequest,
  type RollingScore,
} from '../scoring.js';

export class StatusError extends Error {
  constructor(
    readonly code: grpc.status,
    message: string,
  ) {
    super(message);
  }
}

export interface ServedModel extends LoadedModel {
  batcher: Batcher;
}

export interface ServiceContext {
  models: Map<string, ServedModel>;
  /** Served when a request names no model: the first configured. */
  defaultModel(): ServedModel | undefined;
  loading(): boolean;
  draining(): boolean;
  metrics: Metrics;
  maxItemsPerRequest: number;
  log(line: Record<string, unknown>): void;
  /** Calls being answered, for draining. */
  inFlight: { count: number };
}

type Unary = (call: grpc.ServerUnaryCall<any, any>, callback: grpc.sendUnaryData<any>) => void;
type Bidi = (call: grpc.ServerDuplexStream<any, any>) => void;

export function scoringService(ctx: ServiceContext): Record<string, Unary | Bidi> {
  const model = (name: string, forWork = true): ServedModel => {
    if (forWork && ctx.draining()) throw new StatusError(grpc.status.UNAVAILABLE, 'server is draining: send to another replica');
    const m = name ? ctx.models.get(name) : ctx.defaultModel();
    if (m) return m;
    if (ctx.loading()) throw new StatusError(grpc.status.UNAVAILABLE, 'models are still loading: wait for health SERVING');
    throw new StatusError(
      grpc.status.NOT_FOUND,
      `model: no model named ${JSON.stringify(name)} (serving: ${[...ctx.models.keys()].join(', ')})`,
    );
  };
  const checkItems = (items: unknown[]) => {
    if (items.length === 0) throw new StatusError(grpc.status.INVALID_ARGUMENT, 'items: at least one item is needed');
    if (items.length > ctx.maxItemsPerRequest) {
      throw new StatusError(
        grpc.status.INVALID_ARGUMENT,
        `items: ${items.length} items, over the limit of ${ctx.maxItemsPerRequest} per call`,
      );
    }
  };

  /** Queue prepared units on the model's batcher; cancel them with the call. */
  async function run<T>(
    m: ServedModel,
    prepared: Prepared<T>,
    call: grpc.ServerUnaryCall<any, any> | grpc.ServerDuplexStream<any, any>,
  ): Promise<T> {
    const submitted = m.batcher.submit(prepared.units);
    const onCancel = () => submitted.cancel();
    call.on('cancelled', onCancel);
    const deadline = call.getDeadline();
    const deadlineMs = deadline instanceof Date ? deadline.getTime() : Number(deadline);
    const timer = Number.isFinite(deadlineMs) ? setTimeout(onCancel, Math.max(0, deadlineMs - Date.now())) : undefined;
    try {
      const scores = await submitted.result;
      const name = m.entry.name;
      ctx.metrics.itemsScored.inc({ model: name }, prepared.units.length);
      ctx.metrics.tokensScored.inc(
        { model: name },
        prepared.units.reduce((n, u) => n + u.targets.length, 0),
      );
      return prepared.finish(scores);
    } catch (err) {
      if (err instanceof CancelledError && Date.now() >= deadlineMs) {
        throw new StatusError(grpc.status.DEADLINE_EXCEEDED, 'deadline exceeded before the items were scored');
      }
      throw err;
    } finally {
      clearTimeout(timer);
      call.removeListener('cancelled', onCancel);
    }
  }

  // Run a unary body; count it, log it, map errors to statuses; never let one escape.
  const unary =
    (method: string, body: (req: any, call: grpc.ServerUnaryCall<any, any>) => Promise<unknown> | unknown): Unary =>
    (call, callback) => {
      const started = performance.now();
      ctx.inFlight.count++;
      Promise.resolve()
        .then(() => body(call.request, call))
        .then(
          (response) => finishCall(method, started, { code: grpc.status.OK }, () => callback(null, response)),
          (err: unknown) => {
            const status = toStatus(err);
            finishCall(method, started, status, () => callback(status));
          },
        );
    };

  const finishCall = (method: string, started: number, status: { code: grpc.status; details?: string }, send: () => void) => {
    ctx.inFlight.count--;
    const code = grpc.status[status.code];
    ctx.metrics.requests.inc({ method, code });
    ctx.metrics.requestSeconds.observe({ method }, (performance.now() - started) / 1000);
    const level = status.code === grpc.status.INTERNAL || status.code === grpc.status.UNKNOWN ? 'error' : 'debug';
    ctx.log({ level, method, code, ms: +(performance.now() - started).toFixed(2), ...(status.details ? { message: status.details } : {}) });
    send();
  };

  const prepareScore = (m: ServedModel, items: any[], fieldBase = 'items') => {
    const requests = items.map((item, i) => toLoglikelihoodRequest(item, i, fieldBase));
    return m.scorer.prepareLoglikelihood(requests);
  };

  return {
    ListModels: unary('ListModels', () => ({
      models: [...ctx.models.values()].map(({ entry, engine, scorer }) => ({
        name: entry.name,
        family: engine.info.family,
        modelType: engine.info.modelType,
        layers: engine.info.layers,
        heads: engine.info.heads,
        kvHeads: engine.info.kvHeads,
        headDim: engine.info.headDim,
        hidden: engine.info.hidden,
        vocab: engine.info.vocab,
        maxLength: scorer.maxLength,
        device: engine.info.device,
        dtype: engine.info.dtype,
      })),
    })),

    Tokenize: unary('Tokenize', (req) => {
      const { engine } = model(req.model, false);
      return {
        results: (req.texts as string[]).map((text) => {
          const ids = engine.tokenizer.encode(text, req.addSpecialTokens);
          return { ids, tokens: ids.map((id) => engine.tokenizer.tokenString(id)) };
        }),
      };
    }),

    Score: unary('Score', async (req, call) => {
      const m = model(req.model);
      checkItems(req.items);
      const results = await run(m, prepareScore(m, req.items), call);
      return {
        model: m.entry.name,
        items: results.map((conts, i) => ({ id: req.items[i].id, continuations: conts.map(toContinuationMessage) })),
      };
    }),

    ScoreRolling: unary('ScoreRolling', async (req, call) => {
      const m = model(req.model);
      checkItems(req.items);
      const requests: RollingRequest[] = (req.items as any[]).map((item, i) => {
        if (item.input === 'text') return { text: item.text, minKPercent: item.minKPercent || undefined };
        if (item.input === 'tokenIds') return { text: item.tokenIds.ids, minKPercent: item.minKPercent || undefined };
        throw new StatusError(grpc.status.INVALID_ARGUMENT, `items[${i}]: set text or token_ids`);
      });
      const results: RollingScore[] = await run(m, m.scorer.prepareRolling(requests), call);
      return {
        model: m.entry.name,
        items: results.map((r, i) => ({
          id: req.items[i].id,
          logprob: r.logprob,
          numTokens: r.numTokens,
          meanLoss: r.meanLoss,
          perplexity: r.perplexity,
          minKPercent: r.minKPercent,
          minKLogprob: r.minKLogprob,
          tokenLogprobs: r.tokenLogprobs,
          numWindows: r.numWindows,
        })),
      };
    }),

    ScoreStream: ((call: grpc.ServerDuplexStream<any, any>) => {
      const started = performance.now();
      let pending = 0;
      let halfClosed = false;
      let count = 0;
      ctx.inFlight.count++;
      const maybeEnd = () => {
        if (!halfClosed || pending > 0) return;
        finishCall('ScoreStream', started, { code: grpc.status.OK }, () => call.end());
      };
      call.on('data', (msg: any) => {
        const index = count++;
        pending++;
        const id = msg.item?.id ?? '';
        let modelName = msg.model ?? '';
        Promise.resolve()
          .then(async () => {
            const m = model(msg.model);
            modelName = m.entry.name;
            if (!msg.item) throw new StatusError(grpc.status.INVALID_ARGUMENT, `message ${index}: item is required`);
            const [conts] = await run(m, prepareScore(m, [msg.item], `message ${index}: item`), call);
            return { model: modelName, item: { id, continuations: conts!.map(toContinuationMessage) }, errorCode: 0, errorMessage: '' };
          })
          .catch((err: unknown) => {
            const status = toStatus(err);
            ctx.metrics.requests.inc({ method: 'ScoreStream.item', code: grpc.status[status.code] });
            return { model: modelName, item: { id, continuations: [] }, errorCode: status.code, errorMessage: status.details };
          })
          .then((response) => {
            if (!call.cancelled && call.writable) call.write(response);
            pending--;
            maybeEnd();
          });
      });
      call.on('end', () => {
        halfClosed = true;
        maybeEnd();
      });
      call.on('error', () => {});
      call.on('cancelled', () => {
        if (halfClosed && pending === 0) return;
        halfClosed = true;
        pending = 0;
        finishCall('ScoreStream', started, { code: grpc.status.CANCELLED }, () => {});
      });
    }) as Bidi,
  };
}

function toLoglikelihoodRequest(item: any, i: number, fieldBase: string): LoglikelihoodRequest {
  const texts: string[] = item.continuationsText ?? [];
  const ids: { ids: number[] }[] = item.continuationsIds ?? [];
  const field = fieldBase === 'items' ? `items[${i}]` : fieldBase;
  if (texts.length > 0 && ids.length > 0) {
    throw new StatusError(grpc.status.INVALID_ARGUMENT, `${field}: set continuations_text or continuations_ids, not both`);
  }
  if (item.truncation !== 'TRUNCATION_LEFT' && item.truncation !== 'TRUNCATION_ERROR') {
    throw new StatusError(grpc.status.INVALID_ARGUMENT, `${field}.truncation: unknown value ${JSON.stringify(item.truncation)}`);
  }
  // No context at all: the harness's empty context (scored after BOS).
  const context =
    item.context === 'contextText' ? item.contextText : item.context === 'contextIds' ? item.contextIds.ids : texts.length > 0 ? '' : [];
  return {
    context,
    continuations: texts.length > 0 ? texts : ids.map((t) => t.ids),
    addBos: item.addBos,
    topK: item.topK,
    truncation: item.truncation === 'TRUNCATION_ERROR' ? 'error' : 'left',
    field,
  };
}

function toContinuationMessage(c: ContinuationScore) {
  return {
    logprob: c.logprob,
    isGreedy: c.isGreedy,
    tokenIds: c.tokenIds,
    tokenLogprobs: c.tokenLogprobs,
    tokenGreedy: c.tokenGreedy,
    numTokens: c.numTokens,
    numChars: c.numChars,
    numBytes: c.numBytes,
    topK: (c.topK ?? []).map((t) => ({ tokens: t.ids.map((id, k) => ({ id, logprob: t.logprobs[k] })) })),
    truncatedTokens: c.truncatedTokens,
  };
}

function toStatus(err: unknown): grpc.StatusObject {
  const metadata = new grpc.Metadata();
  if (err instanceof StatusError) return { code: err.code, details: err.message, metadata };
  if (err instanceof ScoringError) return { code: grpc.status.INVALID_ARGUMENT, details: err.message, metadata };
  if (err instanceof QueueFullError) return { code: grpc.status.RESOURCE_EXHAUSTED, details: err.message, metadata };
  if (err instanceof CancelledError) return { code: grpc.status.CANCELLED, details: 'the call was cancelled', metadata };
  return { code: grpc.status.INTERNAL, details: `internal error: ${(err as Error)?.message ?? String(err)}`, metadata };
}
