// The API's Scoring handlers: validate and translate messages (generated types) into the
// serving layer's calls and its answers back. They hold no model logic.
import { InvalidArgumentError, errorMessage } from '../common/errors.js';
import type { Service } from '../serving/service.js';
import type { ContinuationScore, LoglikelihoodRequest, RollingRequest } from '../requests/scoring.js';
import type { ScoringHandlers } from './generated/ctxprobe/v1/Scoring.js';
import type { ScoreItem__Output } from './generated/ctxprobe/v1/ScoreItem.js';
import type { ContinuationScore as ContinuationScoreMessage } from './generated/ctxprobe/v1/ContinuationScore.js';
import { checkedText, eachMessage, matrix, unary, type Methods } from './method-kinds.js';
import { codeNameOf, codeOf } from './status.js';

export function scoringMethods(service: Service): Methods<ScoringHandlers> {
  return {
    ListModels: unary(() => ({ models: service.listModels() })),

    Tokenize: unary(async (req) => ({
      results: await service.tokenize(req.model, req.texts, req.addSpecialTokens),
    })),

    Score: unary(async (req, call) => {
      const m = service.model(req.model);
      service.checkItems(req.items.length);
      const results = await service.score(
        m,
        req.items.map((item, i) => toLoglikelihoodRequest(item, `items[${i}]`)),
        call,
      );
      return {
        model: m.entry.name,
        items: results.map((conts, i) => ({
          id: req.items[i]!.id,
          continuations: conts.map(toContinuationMessage),
          context: conts[0]?.context,
        })),
      };
    }),

    ScoreRolling: unary(async (req, call) => {
      const m = service.model(req.model);
      service.checkItems(req.items.length);
      const requests: RollingRequest[] = req.items.map((item, i) => {
        // 0 is proto3's "unset"; anything else (NaN included) is checked as given.
        const minKPercent = item.minKPercent === 0 ? undefined : item.minKPercent;
        const options = {
          minKPercent,
          minKPercents: item.minKPercents,
          minKRule: item.minKSkipShort ? ('skip' as const) : ('at-least-one' as const),
          skipFirstToken: item.skipFirstToken,
        };
        if (item.input === 'text') return { text: item.text!, ...options };
        if (item.input === 'tokenIds') return { text: item.tokenIds!.ids, ...options };
        throw new InvalidArgumentError(`items[${i}]`, 'set text or token_ids');
      });
      const results = await service.scoreRolling(m, requests, call);
      return {
        model: m.entry.name,
        items: results.map((r, i) => ({
          id: req.items[i]!.id,
          logprob: r.logprob,
          numTokens: r.numTokens,
          meanLoss: r.meanLoss,
          perplexity: r.perplexity,
          minKPercent: r.minKPercent,
          minKLogprob: r.minKLogprob,
          tokenLogprobs: r.tokenLogprobs,
          numWindows: r.numWindows,
          minK: r.minK,
        })),
      };
    }),

    // One call for the whole stream; each item is answered (or refused) on its own.
    ScoreStream: eachMessage(async (msg, index, call) => {
      const id = msg.item?.id ?? '';
      let model = msg.model;
      try {
        checkedText(msg, `message ${index}.`);
        const m = service.model(msg.model);
        model = m.entry.name;
        if (!msg.item) throw new InvalidArgumentError(`message ${index}.item`, 'required');
        const [conts] = await service.score(m, [toLoglikelihoodRequest(msg.item, `message ${index}.item`)], call);
        return {
          model,
          item: { id, continuations: conts!.map(toContinuationMessage), context: conts![0]?.context },
          errorCode: 0,
          errorMessage: '',
        };
      } catch (err) {
        service.metrics.requests.inc({ method: 'ScoreStream.item', code: codeNameOf(err) });
        return { model, item: { id, continuations: [] }, errorCode: codeOf(err), errorMessage: errorMessage(err) };
      }
    }),
  };
}

function toLoglikelihoodRequest(item: ScoreItem__Output, field: string): LoglikelihoodRequest {
  const texts = item.continuationsText;
  const ids = item.continuationsIds;
  if (texts.length > 0 && ids.length > 0) {
    throw new InvalidArgumentError(field, 'set continuations_text or continuations_ids, not both');
  }
  if (item.truncation !== 'TRUNCATION_LEFT' && item.truncation !== 'TRUNCATION_ERROR') {
    throw new InvalidArgumentError(`${field}.truncation`, `unknown value ${JSON.stringify(item.truncation)}`);
  }
  if (item.contextChunks.length > 0) return withChunkedContext(item, field, texts, ids);
  if (item.excludePositions.length > 0) throw new InvalidArgumentError(`${field}.exclude_positions`, 'only with context_chunks');
  // No context at all: the harness's empty context (scored after BOS).
  const context =
    item.context === 'contextText' ? item.contextText! : item.context === 'contextIds' ? item.contextIds!.ids : texts.length > 0 ? '' : [];
  const byText = texts.length > 0 || item.context === 'contextText';
  if (item.unconditionalText && item.unconditionalIds)
    throw new InvalidArgumentError(`${field}.unconditional_text`, 'set unconditional_text or unconditional_ids, not both');
  if ((byText && item.unconditionalIds) || (!byText && item.unconditionalText))
    throw new InvalidArgumentError(
      `${field}.unconditional`,
      'the neutral context must be of the same kind as the context (text or token ids)',
    );
  const unconditionalContext = item.unconditionalText
    ? item.unconditionalText
    : item.unconditionalIds
      ? item.unconditionalIds.ids
      : undefined;
  return {
    context,
    ...(unconditionalContext !== undefined ? { unconditionalContext } : {}),
    contextLogprobs: item.contextLogprobs,
    continuations: texts.length > 0 ? texts : ids.map((t) => t.ids),
    addBos: item.addBos,
    topK: item.topK,
    truncation: item.truncation === 'TRUNCATION_ERROR' ? 'error' : 'left',
    field,
  };
}

/** An item whose context comes as labelled chunks (scores and attention from one pass). */
function withChunkedContext(item: ScoreItem__Output, field: string, texts: string[], ids: { ids: number[] }[]): LoglikelihoodRequest {
  if (item.context !== undefined)
    throw new InvalidArgumentError(
      `${field}.context_chunks`,
      `set context_chunks or ${item.context === 'contextText' ? 'context_text' : 'context_ids'}, not both`,
    );
  const kinds = new Set(item.contextChunks.map((c) => c.content));
  if (kinds.size > 1 || kinds.has(undefined))
    throw new InvalidArgumentError(`${field}.context_chunks`, 'every chunk needs text, or every chunk ids, not a mix');
  const byText = kinds.has('text');
  const contextChunks = item.contextChunks.map((c) => (byText ? { label: c.label, text: c.text! } : { label: c.label, ids: c.ids!.ids }));
  return {
    context: byText ? contextChunks.map((c) => c.text!).join('') : contextChunks.flatMap((c) => c.ids!),
    contextChunks,
    excludePositions: item.excludePositions,
    ...(item.unconditionalText || item.unconditionalIds
      ? { unconditionalContext: item.unconditionalText || item.unconditionalIds!.ids }
      : {}),
    contextLogprobs: item.contextLogprobs,
    continuations: texts.length > 0 ? texts : ids.map((t) => t.ids),
    addBos: item.addBos,
    topK: item.topK,
    truncation: item.truncation === 'TRUNCATION_ERROR' ? 'error' : 'left',
    field,
  };
}

function toContinuationMessage(c: ContinuationScore): ContinuationScoreMessage {
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
    meanLogprob: c.meanLogprob,
    unconditional: c.unconditional,
    ...(c.attention
      ? {
          attention: {
            spans: c.attention.segments.map((g) => ({ label: g.label, start: g.start, end: g.end })),
            votes: matrix(c.attention.votes),
            votesExcluded: c.attention.votesExcluded,
            mass: matrix(c.attention.mass),
            massExcluded: c.attention.massExcluded,
          },
        }
      : {}),
  };
}
