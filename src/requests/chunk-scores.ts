// Scores and attention from one pass, asked for from the Score side: an item whose
// context comes as labelled chunks gets, with each continuation's log-probs, where that
// continuation's tokens attend among the chunks (CHARPEval ranks responses by their
// likelihood and plots the same samples' chunk distribution, its Figure 2).
//
// Each continuation is a probe sample — the context's chunks, then the continuation as
// the query chunk — run with log-probs and no heatmap: the context is a cached prefix
// (shared by the item's continuations and kept for later requests), and one probe pass
// over the continuation's rows yields both its log-probs (the scoring head runs in the
// probe graph) and its votes and mass. The tokens are those `Score` uses for the item
// (`encodeChunked`), so the log-probs equal a plain `Score` of the same item.
import { InvalidArgumentError, checkTokenIds } from '../common/errors.js';
import type { PreparedSample, Prober, SampleProbe } from './probe.js';
import {
  CONTINUATION_LABEL,
  quiet,
  trailingWhitespace,
  type ChunkedPair,
  type ContinuationScore,
  type LoglikelihoodRequest,
  type RequestEncoder,
} from './scoring.js';
import { segmentIds, segmentText, type Segment } from './segments.js';

/** Encode an item whose context comes as labelled chunks. The continuations are encoded
 * as `prepareLoglikelihood` encodes them (the whole context, trailing whitespace moved to
 * the continuation); the chunks' spans come from tokenising the (stripped) chunk texts as
 * one text, which is that same context encoding. Refuses what the probe pass cannot
 * answer: top-k, the context's own or unconditional scores, and a context cut to fit. */
export async function encodeChunked(encoder: RequestEncoder, req: LoglikelihoodRequest, field: string): Promise<ChunkedPair> {
  const chunks = req.contextChunks!;
  const refuse = (name: string, what: string) => {
    throw new InvalidArgumentError(
      `${field}.${name}`,
      `${what} is not available with context_chunks (the attention pass scores the continuations only)`,
    );
  };
  if ((req.topK ?? 0) > 0) refuse('top_k', 'top-k');
  if (req.contextLogprobs) refuse('context_logprobs', "the context's own log-probs");
  if (req.unconditionalContext !== undefined) refuse('unconditional', 'unconditional scoring');
  if (req.continuations.length === 0) throw new InvalidArgumentError(`${field}.continuations`, 'at least one continuation is needed');
  if (req.continuations.length > encoder.maxContinuations)
    throw new InvalidArgumentError(
      `${field}.continuations`,
      `${req.continuations.length} continuations, over the limit of ${encoder.maxContinuations} per item`,
    );
  const text = chunks.every((c) => c.text !== undefined && c.ids === undefined);
  const ids = chunks.every((c) => c.ids !== undefined && c.text === undefined);
  if (!text && !ids) throw new InvalidArgumentError(`${field}.context_chunks`, 'chunks must all be text or all be token ids');
  chunks.forEach((c, k) => {
    if (c.label === CONTINUATION_LABEL)
      throw new InvalidArgumentError(
        `${field}.context_chunks[${k}].label`,
        `${JSON.stringify(CONTINUATION_LABEL)} is the continuation's own label`,
      );
    if (c.ids) checkTokenIds(c.ids, encoder.vocabSize, `${field}.context_chunks[${k}].ids`);
  });
  const conts = req.continuations.map((cont, j) => {
    const cfield = `${field}.continuations[${j}]`;
    if (cont.length === 0) throw new InvalidArgumentError(cfield, 'continuation is empty');
    if ((typeof cont === 'string') !== text)
      throw new InvalidArgumentError(cfield, 'context chunks and continuations must both be text or both be token ids');
    if (typeof cont !== 'string') checkTokenIds(cont, encoder.vocabSize, cfield);
    return { cfield, cont };
  });
  let context: number[];
  let segments: Segment[];
  let encoded: number[][];
  const addBos = req.addBos ?? false;
  if (text) {
    // The whitespace _encode_pair moves to the continuation comes off the last chunks.
    const joined = chunks.map((c) => c.text!).join('');
    let strip = trailingWhitespace(joined).length;
    const stripped = chunks.map((c) => ({ label: c.label, text: c.text! })).reverse();
    for (const c of stripped) {
      const cut = Math.min(strip, c.text.length);
      c.text = c.text.slice(0, c.text.length - cut);
      strip -= cut;
    }
    stripped.reverse();
    const shared = quiet(encoder.tokenizer.encodeAsync(stripped.map((c) => c.text).join(''), addBos));
    const [seg, pairs] = await Promise.all([
      segmentText(encoder.tokenizer, stripped, addBos, `${field}.context_chunks`),
      Promise.all(conts.map(({ cont }) => encoder.encodePair(joined, cont as string, addBos, shared))),
    ]);
    ({ ids: context, segments } = seg);
    if (pairs.some((p) => p.context.length !== context.length || p.context.some((t, i) => t !== context[i])))
      throw new InvalidArgumentError(`${field}.context_chunks`, 'the chunks do not tokenise as the context does');
    encoded = pairs.map((p) => p.continuation);
  } else {
    ({ ids: context, segments } = segmentIds(
      chunks.map((c) => ({ label: c.label, ids: c.ids! })),
      `${field}.context_chunks`,
    ));
    encoded = conts.map(({ cont }) => cont as number[]);
  }
  const continuations = conts.map(({ cfield, cont }, j) => {
    const ids = encoded[j]!;
    if (ids.length === 0) throw new InvalidArgumentError(cfield, 'continuation adds no tokens after the context');
    const total = context.length + ids.length - 1;
    if (total > encoder.maxLength)
      throw new InvalidArgumentError(
        cfield,
        `context + continuation is ${total} tokens, over the maximum length ${encoder.maxLength}: attention statistics need the whole context, so it is not truncated`,
      );
    const shown = typeof cont === 'string' ? cont : encoder.tokenizer.decode(cont);
    return { field: cfield, ids, numChars: [...shown].length, numBytes: Buffer.byteLength(shown, 'utf8') };
  });
  return { field, context, segments, continuations };
}

/** Validate and prepare an item's probe samples, one per continuation (throws
 * InvalidArgumentError naming the item's fields before any work is queued). */
export async function prepareChunkScores(prober: Prober, req: LoglikelihoodRequest, pair: ChunkedPair): Promise<PreparedSample[]> {
  const exclude = req.excludePositions ?? [];
  exclude.forEach((p, k) => {
    if (!Number.isInteger(p) || p < 0 || p >= pair.context.length)
      throw new InvalidArgumentError(
        `${pair.field}.exclude_positions[${k}]`,
        `position ${p} is outside the context's ${pair.context.length} tokens`,
      );
  });
  return Promise.all(
    pair.continuations.map((c) =>
      prober.prepare(
        {
          chunkIds: [
            ...pair.segments.map((s) => ({ label: s.label, ids: pair.context.slice(s.start, s.end) })),
            { label: CONTINUATION_LABEL, ids: c.ids },
          ],
          queryLabels: [CONTINUATION_LABEL],
          excludePositions: exclude,
        },
        c.field,
      ),
    ),
  );
}

/** A continuation's score and attention from its probe. */
export function continuationScore(pair: ChunkedPair, j: number, probe: SampleProbe): ContinuationScore {
  const c = pair.continuations[j]!;
  const lps = probe.queryLogprobs!;
  const greedy = probe.queryGreedy!;
  if (lps.length !== c.ids.length) throw new Error(`chunk scores: ${lps.length} log-probs for ${c.ids.length} continuation tokens`);
  const logprob = lps.reduce((a, v) => a + v, 0);
  return {
    logprob,
    isGreedy: greedy.every(Boolean),
    tokenIds: c.ids,
    tokenLogprobs: lps,
    tokenGreedy: greedy,
    numTokens: c.ids.length,
    numChars: c.numChars,
    numBytes: c.numBytes,
    truncatedTokens: 0,
    meanLogprob: logprob / c.ids.length,
    attention: {
      labels: probe.labels,
      segments: probe.segments,
      votes: probe.votes,
      votesExcluded: probe.votesExcluded,
      mass: probe.mass,
      massExcluded: probe.massExcluded,
    },
  };
}
