// gRPC Scoring handlers: validate, translate to the scoring library, queue on the
// model's batcher, translate back. They hold no model logic.
import * as grpc from '@grpc/grpc-js';
import type { ContinuationScore, LoglikelihoodRequest, RollingRequest, RollingScore } from '../scoring.js';
import { StatusError, callHelpers, toStatus, type ServedModel, type ServiceContext, type Unary } from './calls.js';

type Bidi = (call: grpc.ServerDuplexStream<any, any>) => void;

export function scoringService(ctx: ServiceContext): Record<string, Unary | Bidi> {
  const { model, checkItems, run, unary, finishCall } = callHelpers(ctx);

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
