// What the OpenAI routes share in their answers: how tokens and their alternatives are
// keyed (by text, or as vLLM's `token_id:N`), and a call's cancellation by its client.
import type { FastifyReply } from 'fastify';
import type { ServedModel } from '../serving/service.js';
import { OrderedObject } from './json.js';

// Extra candidates fetched per position so that `top_logprobs` still has N entries when
// several tokens decode to the same text (the keys are texts). Eight are not always enough:
// on a byte-level vocabulary every byte token of a multi-byte character decodes to U+FFFD
// (seen: 8 of 286 positions short at logprobs 12). `return_tokens_as_token_ids` keys by id.
export const TOP_SPARE = 8;

type Alternatives = { ids: number[]; logprobs: number[] };

/** A sequence's token texts as they read in it after `context`, and in the same places the
 * texts of each position's alternatives (`alternatives[k]`: the distribution token k was
 * drawn from): text/token-pieces.ts, so that the tokens join into the text. Tokens an
 * encoding `added` (a text prompt's BOS) are not in the text: each reads as itself. */
export function sequenceTexts(
  m: ServedModel,
  ids: readonly number[],
  alternatives: readonly (Alternatives | null | undefined)[] = [],
  context: readonly number[] = [],
  added: readonly boolean[] = [],
): { texts: string[]; alternativeTexts: (string[] | undefined)[] } {
  const tok = m.engine.tokenizer;
  const reader = tok.pieceReader(context);
  const alternativeTexts: (string[] | undefined)[] = [];
  const texts = ids.map((id, k) => {
    alternativeTexts.push(alternatives[k]?.ids.map((a) => reader.peek(a)));
    return added[k] ? tok.decode([id]) : reader.push(id);
  });
  if (texts.length > 0) texts[texts.length - 1] += reader.rest();
  return { texts, alternativeTexts };
}

/** Tokens as clients see them: their texts, or (`byId`, as vLLM) `token_id:N`, so tokens
 * that decode to the same text stay apart. */
export function tokenKeys(ids: readonly number[], texts: readonly string[], byId: boolean): string[] {
  return byId ? ids.map((id) => `token_id:${id}`) : [...texts];
}

/** The N most likely distinct texts of a distribution (`texts`: its alternatives' texts in
 * place), most likely first (tokens that read alike count once). */
export function topTexts(top: Alternatives, texts: readonly string[], n: number): [string, number][] {
  const entries: [string, number][] = [];
  const seen = new Set<string>();
  texts.forEach((key, k) => {
    if (entries.length < n && !seen.has(key)) entries.push([key, top.logprobs[k]!]);
    seen.add(key);
  });
  return entries;
}

/** A completions `top_logprobs` entry: N alternatives keyed by text or by id, in order. */
export function topLogprobs(top: Alternatives, texts: readonly string[], n: number, byId: boolean): OrderedObject {
  return new OrderedObject(byId ? top.ids.slice(0, n).map((id, k) => [`token_id:${id}`, top.logprobs[k]!]) : topTexts(top, texts, n));
}

/** The completions `top_logprobs` entry of one position, on every path (scoring, echo,
 * generation): with logprobs N ≥ 1 the N most likely (topLogprobs); with 0, as vLLM (and
 * OpenAI's "the log-prob of the sampled token, always"), the position's own token alone
 * with its log-prob. */
export function positionTop(
  own: { id: number; logprob: number; text: string },
  top: Alternatives | undefined,
  texts: readonly string[] | undefined,
  n: number,
  byId: boolean,
): OrderedObject {
  if (n > 0) return topLogprobs(top!, texts!, n, byId);
  return new OrderedObject([[byId ? `token_id:${own.id}` : own.text, own.logprob]]);
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
