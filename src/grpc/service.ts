// gRPC handlers: validate, translate to the scoring library, translate back. They hold
// no model logic; every bad request becomes a status that names the offending field.
import * as grpc from '@grpc/grpc-js';
import type { LoadedModel } from '../repository.js';
import { ScoringError, type ContinuationScore, type LoglikelihoodRequest, type RollingRequest } from '../scoring.js';

export class StatusError extends Error {
  constructor(
    readonly code: grpc.status,
    message: string,
  ) {
    super(message);
  }
}

export interface ServiceOptions {
  models: LoadedModel[];
  /** Items per Score / ScoreRolling call. */
  maxItemsPerRequest?: number;
  log?: (line: Record<string, unknown>) => void;
}

type Unary = (call: grpc.ServerUnaryCall<any, any>, callback: grpc.sendUnaryData<any>) => void;

export function scoringService(options: ServiceOptions): Record<string, Unary> {
  const byName = new Map(options.models.map((m) => [m.entry.name, m]));
  const fallback = options.models[0];
  const maxItems = options.maxItemsPerRequest ?? 4096;
  const log = options.log ?? (() => {});

  const model = (name: string): LoadedModel => {
    const m = name ? byName.get(name) : fallback;
    if (!m) throw new StatusError(grpc.status.NOT_FOUND, `model: no model named ${JSON.stringify(name)} (serving: ${[...byName.keys()].join(', ')})`);
    return m;
  };
  const checkItems = (items: unknown[]) => {
    if (items.length === 0) throw new StatusError(grpc.status.INVALID_ARGUMENT, 'items: at least one item is needed');
    if (items.length > maxItems) throw new StatusError(grpc.status.INVALID_ARGUMENT, `items: ${items.length} items, over the limit of ${maxItems} per call`);
  };

  // Run a handler body; map library errors to statuses; never let one escape.
  const unary =
    (method: string, body: (req: any) => Promise<unknown> | unknown): Unary =>
    (call, callback) => {
      const started = performance.now();
      Promise.resolve()
        .then(() => body(call.request))
        .then(
          (response) => {
            log({ level: 'debug', method, code: 'OK', ms: performance.now() - started });
            callback(null, response);
          },
          (err: unknown) => {
            const status = toStatus(err);
            log({ level: status.code === grpc.status.INTERNAL ? 'error' : 'info', method, code: grpc.status[status.code], message: status.details });
            callback(status);
          },
        );
    };

  return {
    ListModels: unary('ListModels', () => ({
      models: options.models.map(({ entry, engine, scorer }) => ({
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
      const { engine } = model(req.model);
      return {
        results: (req.texts as string[]).map((text) => {
          const ids = engine.tokenizer.encode(text, req.addSpecialTokens);
          return { ids, tokens: ids.map((id) => engine.tokenizer.tokenString(id)) };
        }),
      };
    }),

    Score: unary('Score', async (req) => {
      const m = model(req.model);
      checkItems(req.items);
      const requests = (req.items as any[]).map((item, i) => toLoglikelihoodRequest(item, i));
      const results = await m.scorer.loglikelihood(requests);
      return {
        model: m.entry.name,
        items: results.map((conts, i) => ({ id: req.items[i].id, continuations: conts.map(toContinuationMessage) })),
      };
    }),

    ScoreRolling: unary('ScoreRolling', async (req) => {
      const m = model(req.model);
      checkItems(req.items);
      const requests: RollingRequest[] = (req.items as any[]).map((item, i) => {
        if (item.input === 'text') return { text: item.text, minKPercent: item.minKPercent || undefined };
        if (item.input === 'tokenIds') return { text: item.tokenIds.ids, minKPercent: item.minKPercent || undefined };
        throw new StatusError(grpc.status.INVALID_ARGUMENT, `items[${i}]: set text or token_ids`);
      });
      const results = await m.scorer.rolling(requests);
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
  };
}

function toLoglikelihoodRequest(item: any, i: number): LoglikelihoodRequest {
  const texts: string[] = item.continuationsText;
  const ids: { ids: number[] }[] = item.continuationsIds;
  if (texts.length > 0 && ids.length > 0) {
    throw new StatusError(grpc.status.INVALID_ARGUMENT, `items[${i}]: set continuations_text or continuations_ids, not both`);
  }
  // No context at all: the harness's empty context (scored after BOS).
  const context = item.context === 'contextText' ? item.contextText : item.context === 'contextIds' ? item.contextIds.ids : texts.length > 0 ? '' : [];
  return {
    context,
    continuations: texts.length > 0 ? texts : ids.map((t) => t.ids),
    addBos: item.addBos,
    topK: item.topK,
    truncation: item.truncation === 'TRUNCATION_ERROR' ? 'error' : 'left',
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
  return { code: grpc.status.INTERNAL, details: `internal error: ${(err as Error)?.message ?? String(err)}`, metadata };
}
