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
// (scoring.ts `encodeChunked`), so the log-probs equal a plain `Score` of the same item.
import { InvalidArgumentError } from '../common/errors.js';
import type { PreparedSample, Prober, SampleProbe } from './probe.js';
import { CONTINUATION_LABEL, type ChunkedPair, type ContinuationScore, type LoglikelihoodRequest } from './scoring.js';

/** Validate and prepare an item's probe samples, one per continuation (throws
 * InvalidArgumentError naming the item's fields before any work is queued). */
export async function prepareChunkScores(prober: Prober, req: LoglikelihoodRequest, pair: ChunkedPair): Promise<PreparedSample[]> {
  const exclude = req.excludePositions ?? [];
  exclude.forEach((p, k) => {
    if (!Number.isInteger(p) || p < 0 || p >= pair.context.length)
      throw new InvalidArgumentError(`${pair.field}.exclude_positions[${k}]`, `position ${p} is outside the context's ${pair.context.length} tokens`);
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
