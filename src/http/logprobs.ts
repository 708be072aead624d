// What the OpenAI routes share in their answers: how tokens and their alternatives are
// keyed (by text, or as vLLM's `token_id:N`), and a call's cancellation by its client.
import type { FastifyReply } from 'fastify';
import type { ServedModel, Service } from '../serving/service.js';
import { OrderedObject } from './json.js';

// Extra candidates fetched per position so that `top_logprobs` still has N entries when
// several tokens decode to the same text (the keys are texts). Eight are not always enough:
// on a byte-level vocabulary every byte token of a multi-byte character decodes to U+FFFD
// (seen: 8 of 286 positions short at logprobs 12). `return_tokens_as_token_ids` keys by id.
export const TOP_SPARE = 8;

type Alternatives = { ids: number[]; logprobs: number[] };

/** Tokens as clients see them: their texts, or (`byId`, as vLLM) `token_id:N`, so tokens
 * that decode to the same text stay apart. */
export function tokenKeys(service: Service, m: ServedModel, ids: number[], byId: boolean): string[] {
  return byId ? ids.map((id) => `token_id:${id}`) : service.tokenTexts(m, ids);
}

/** The N most likely distinct texts of a distribution, most likely first (tokens that
 * decode alike count once). */
export function topTexts(service: Service, m: ServedModel, top: Alternatives, n: number): [string, number][] {
  const entries: [string, number][] = [];
  const seen = new Set<string>();
  service.tokenTexts(m, top.ids).forEach((key, k) => {
    if (entries.length < n && !seen.has(key)) entries.push([key, top.logprobs[k]!]);
    seen.add(key);
  });
  return entries;
}

/** A completions `top_logprobs` entry: N alternatives keyed by text or by id, in order. */
export function topLogprobs(service: Service, m: ServedModel, top: Alternatives, n: number, byId: boolean): OrderedObject {
  return new OrderedObject(byId ? top.ids.slice(0, n).map((id, k) => [`token_id:${id}`, top.logprobs[k]!]) : topTexts(service, m, top, n));
}

/** The completions `top_logprobs` entry of one position, on every path (scoring, echo,
 * generation): with logprobs N ≥ 1 the N most likely (topLogprobs); with 0, as vLLM (and
 * OpenAI's "the log-prob of the sampled token, always"), the position's own token alone
 * with its log-prob. */
export function positionTop(
  service: Service,
  m: ServedModel,
  own: { id: number; logprob: number },
  top: Alternatives | undefined,
  n: number,
  byId: boolean,
): OrderedObject {
  if (n > 0) return topLogprobs(service, m, top!, n, byId);
  return new OrderedObject([[tokenKeys(service, m, [own.id], byId)[0]!, own.logprob]]);
}

/** Alternatives to draw for N keyed by text: N and the spare, within the server's limit. */
export function withSpare(m: ServedModel, n: number, byId: boolean): number {
  return n > 0 && !byId ? Math.min(n + TOP_SPARE, m.scorer.maxTopK, m.engine.config.vocabSize) : n;
}

/** Aborted when the client goes away before its answer is complete: its work leaves the
 * queue (a generation stops at its next step). */
export function clientGone(reply: FastifyReply): AbortSignal {
  const gone = new AbortController();
  reply.raw.once('close', () => reply.raw.writableFinished || gone.abort());
  return gone.signal;
}
