// A Score call as one job: items with a plain context are the request encoder's units
// (scoring.ts); items whose context comes as labelled chunks are probe units answered as
// scores (chunk-scores.ts). Both kinds share the round's passes and the prefix cache like
// any other units, and one answer counts the scored tokens of both.
import type { Prepared, Unit, UnitScore } from '../core/units.js';
import { scoredValues } from './answer-size.js';
import { continuationScore, encodeChunked, prepareChunkScores } from './chunk-scores.js';
import type { Prober } from './probe.js';
import type { ContinuationScore, LoglikelihoodRequest, RequestEncoder } from './scoring.js';

/** How a Score item with a chunked context is probed: its continuation's log-probs, votes
 * and mass; no heatmap, so the context is a cached prefix. */
const PROBE_FOR_SCORES = { pool: 'max', queryReduce: 'mean', keyReduce: 'max', perHead: false, heatmap: false, logprobs: true } as const;

/** What a job scores, as the serving layer limits and counts it. */
export interface ScoredCounts {
  /** Items scored (the metrics' count). */
  items: number;
  /** Tokens scored: the per-answer limit is checked on them before anything is queued. */
  tokens: number;
  /** Values the answer holds (answer-size.ts), checked likewise, and what they count. */
  values: number;
  what: string;
}

/** Prepared Score items and what they score. */
export interface ScoreJob extends Prepared<ContinuationScore[][]> {
  counted: ScoredCounts;
}

/** Units counted as themselves: one item each, their targets as the scored tokens. */
export function countUnits(units: readonly Unit[]): ScoredCounts {
  return { items: units.length, tokens: units.reduce((n, u) => n + u.targets.length, 0), values: scoredValues(units), what: 'scored tokens × (1 + top-k)' };
}

/** Validate and prepare a Score call's items (throws InvalidArgumentError naming the field
 * before any work is queued); `finish` answers them in request order. */
export async function prepareScore(encoder: RequestEncoder, prober: Prober, requests: LoglikelihoodRequest[]): Promise<ScoreJob> {
  if (!requests.some((r) => r.contextChunks)) {
    const prepared = await encoder.prepareLoglikelihood(requests);
    return { ...prepared, counted: countUnits(prepared.units) };
  }
  // Items keep the field their index in the request gives them; everything is validated
  // before anything is queued.
  const named = requests.map((r, i) => ({ ...r, field: r.field ?? `items[${i}]` }));
  const chunked = named.flatMap((r, i) => (r.contextChunks ? [i] : []));
  const plain = named.flatMap((r, i) => (r.contextChunks ? [] : [i]));
  const pairs = await Promise.all(chunked.map((i) => encodeChunked(encoder, named[i]!, named[i]!.field)));
  const samples = await Promise.all(chunked.map((i, k) => prepareChunkScores(prober, named[i]!, pairs[k]!)));
  const preparedPlain = plain.length > 0 ? await encoder.prepareLoglikelihood(plain.map((i) => named[i]!)) : undefined;
  const plainUnits = preparedPlain?.units ?? [];
  const flat = samples.flat();
  const probes = prober.units(flat, { ...PROBE_FOR_SCORES });
  // One answer, one limit: the chunked items' continuation tokens count with the plain ones,
  // each chunked continuation with its attention per layer over the chunks and itself.
  const chunkedTokens = pairs.reduce((n, p) => n + p.continuations.reduce((a, c) => a + c.ids.length, 0), 0);
  const layers = prober.engine.config.numLayers;
  const attention = pairs.reduce((n, p) => n + p.continuations.length * layers * (p.segments.length + 2) * 2, 0);
  const finish = (outputs: UnitScore[]) => {
    const plainScores = preparedPlain ? preparedPlain.finish(outputs.slice(0, plainUnits.length)) : [];
    const probed = probes.finish(outputs.slice(plainUnits.length));
    const answers: ContinuationScore[][] = new Array(requests.length);
    plain.forEach((i, k) => (answers[i] = plainScores[k]!));
    let next = 0;
    chunked.forEach(
      (i, k) => (answers[i] = pairs[k]!.continuations.map((_, j) => continuationScore(pairs[k]!, j, probed.samples[next++]!))),
    );
    return answers;
  };
  return {
    units: [...plainUnits, ...probes.units],
    finish,
    counted: {
      items: flat.length + plainUnits.length,
      tokens: chunkedTokens + countUnits(plainUnits).tokens,
      values: chunkedTokens + attention + scoredValues(plainUnits),
      what: 'scored tokens × (1 + top-k), and each chunked continuation\'s votes and mass per layer',
    },
  };
}
