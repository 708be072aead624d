// Counterfactual chunk attribution: what each chunk of a sample contributes to the
// log-likelihood of a target chunk (default: the last), measured by changing the sample
// and scoring the target again — CHARP's history truncation (§3.5), mtRAG's reference vs
// noise passages, RefuteBench's "does round 2 still matter in round 10".
//
// Two interventions:
//   remove — the chunk's text is deleted and the rest re-tokenised (the model never saw it);
//   mask   — the chunk's keys are masked out of attention for every query after the chunk
//            (positions and tokens unchanged; a knockout in the graph, through the same
//            key-position mask as padding). The chunk's own queries still see it, so a
//            target right after a masked chunk has its first token predicted from the
//            chunk's last token as before. A BOS at position 0 (the attention sink) is
//            never masked.
//
// Every variant of every sample is a scoring unit of one job: variants share the tokens
// before their first change through the prefix cache (a masked variant is the plain
// sequence up to its mask's end), so the unchanged prefix is computed once.
//
//   sample ─► base unit ──────────────────────────────┐
//          ├► per chunk: remove (re-tokenise), mask ──┤
//          ├► keep-only, the last-h-turns sweep ──────┼─► one scoring job ─► Δ log-likelihoods
//          └► n random keep/drop patterns ────────────┘                  └─► least-squares fit
import type { Engine } from '../engine/engine.js';
import { InvalidArgumentError } from '../common/errors.js';
import type { ProbeSample } from './probe.js';
import { segmentSample, type ChatMessage, type Segment, type Segmented } from './segments.js';
import type { KeyRange, Prepared, Unit, UnitScore } from '../core/units.js';
import { rng, streamSeed } from '../common/random.js';
import { messageLabels } from '../common/labels.js';
import { leastSquares } from '../common/matrix.js';

export type Intervention = 'remove' | 'mask';
export const INTERVENTIONS: readonly Intervention[] = ['remove', 'mask'];

export interface AttributionSample extends Omit<ProbeSample, 'queryLabels' | 'excludePositions'> {
  /** Label of the target chunk (the last chunk with it); default: the last chunk. */
  target?: string;
  /** Labels of the chunks to ablate, each chunk on its own; default: every chunk before
   * the target. */
  ablate?: string[];
}

export interface AttributionOptions {
  /** Default both. */
  interventions?: Intervention[];
  /** Also one variant with everything before the target but the ablated chunks gone. */
  keepOnly?: boolean;
  /** CHARP's truncation: variants keeping only the last h history turns, for each h. */
  historySweep?: number[];
  /** Which chunks are history turns: labels; default `history` for chunks, and every
   * message before the target but the system prompt for chat messages. */
  historyLabels?: string[];
  /** Random keep/drop patterns over the ablated chunks (each kept with probability ½),
   * scored and fitted with a linear surrogate (ContextCite's method). */
  subsets?: number;
  seed?: number;
  /** The intervention that drops a chunk in a pattern; default mask. */
  subsetIntervention?: Intervention;
}

/** The target under one intervention, against the unchanged sample. */
export interface Effect {
  logprob: number;
  numTokens: number;
  /** logprob − the base's. */
  delta: number;
  /** Mean log-prob per target token − the base's. */
  meanDelta: number;
  /** Per target token, when the target's tokens are unchanged (always for mask). */
  tokenDeltas: number[];
}

export interface ChunkEffect {
  index: number;
  label: string;
  start: number;
  end: number;
  remove?: Effect;
  mask?: Effect;
}

export interface SweepPoint {
  /** History turns to keep (the last ones), as asked: all of them when there are fewer. */
  keep: number;
  /** Chunk indices dropped. */
  dropped: number[];
  remove?: Effect;
  mask?: Effect;
}

export interface SubsetFit {
  intervention: Intervention;
  /** The ablated chunks, in pattern column order. */
  chunks: number[];
  /** [patterns × chunks]: true where the chunk was kept. */
  patterns: boolean[][];
  /** The target's log-likelihood under each pattern. */
  logprobs: number[];
  /** Least squares of logprob ~ intercept + Σ weight·kept (a ridge of 1e-6 on the
   * weights keeps it defined with fewer patterns than chunks). */
  intercept: number;
  weights: number[];
  r2: number;
}

export interface SampleAttribution {
  spans: Segment[];
  numTokens: number;
  target: number;
  base: { logprob: number; numTokens: number; tokenLogprobs: number[] };
  chunks: ChunkEffect[];
  keepOnly?: { kept: number[]; remove?: Effect; mask?: Effect };
  sweep?: SweepPoint[];
  subsets?: SubsetFit;
}

/** Most random patterns per sample. */
export const MAX_SUBSETS = 4096;
/** Most points of a history sweep: a dialogue has fewer turns than this, and each point is
 * one variant per intervention of every sample. */
export const MAX_HISTORY_SWEEP = 256;

/** How many variants (scoring units) a request makes, counted from the request alone —
 * its chunks' labels — before anything is tokenised or built, and which field brings the
 * most of them (to name it in a refusal). A sample whose labels do not resolve counts its
 * base only: preparing it is refused anyway. */
export function countVariants(samples: AttributionSample[], options: AttributionOptions = {}): { total: number; field: string } {
  const interventions = resolveAttributionOptions(options).interventions.length;
  const by = { samples: 0, keep_only: 0, history_sweep: 0, random_subsets: 0 };
  for (const sample of samples) {
    by.samples++; // the unchanged sample
    const labels = requestLabels(sample);
    const target = sample.target === undefined || sample.target === '' ? labels.length - 1 : labels.lastIndexOf(sample.target);
    if (target <= 0) continue;
    const before = labels.slice(0, target);
    const ablate = sample.ablate?.length ? before.filter((l) => sample.ablate!.includes(l)).length : before.length;
    by.samples += ablate * interventions;
    if (options.keepOnly) by.keep_only += interventions;
    by.history_sweep += (options.historySweep?.length ?? 0) * interventions;
    by.random_subsets += options.subsets ?? 0;
  }
  const total = by.samples + by.keep_only + by.history_sweep + by.random_subsets;
  const field = (Object.entries(by) as [string, number][]).reduce((a, b) => (b[1] > a[1] ? b : a))[0];
  return { total, field };
}

/** A sample's chunk labels as segmentation will give them, one per segment: its chunks,
 * or one per message (per labelled chunk inside a message). */
function requestLabels(sample: AttributionSample): string[] {
  if (sample.chunks?.length) return sample.chunks.map((c) => c.label);
  if (sample.chunkIds?.length) return sample.chunkIds.map((c) => c.label);
  const messages = sample.messages ?? [];
  const labels = messageLabels(messages);
  return messages.flatMap((m, k) => (m.chunks?.length ? m.chunks.map((c) => c.label) : [labels[k]!]));
}

interface Variant {
  unit: Unit;
  /** The target's tokens, to tell whether per-token deltas make sense. */
  targets: number[];
}

/** Samples (and their options) turned into scoring units; `finish` turns the units'
 * scores into answers. Throws InvalidArgumentError naming the field. `checkStop` is called
 * before each tokenisation and variant, and throws to abandon the work (a cancelled or
 * expired call). */
export async function prepareAttribution(
  engine: Engine,
  samples: AttributionSample[],
  options: AttributionOptions = {},
  checkStop: () => void = () => {},
): Promise<Prepared<SampleAttribution[]>> {
  const resolved = resolveAttributionOptions(options);
  const units: Unit[] = [];
  const add = (v: Variant) => units.push(v.unit) - 1;
  const finishers: ((scores: UnitScore[]) => SampleAttribution)[] = [];
  for (const [i, sample] of samples.entries()) {
    checkStop();
    finishers.push(await prepareSample(engine, sample, i, resolved, add, checkStop));
  }
  return { units, finish: (scores) => finishers.map((f) => f(scores)) };
}

type Resolved = AttributionOptions & { interventions: Intervention[]; subsets: number; subsetIntervention: Intervention };

/** The options checked (each field named by its proto name) and their defaults filled in:
 * nothing here depends on a sample, so it comes before counting variants. */
export function resolveAttributionOptions(options: AttributionOptions): Resolved {
  const interventions = options.interventions?.length ? [...new Set(options.interventions)] : [...INTERVENTIONS];
  interventions.forEach((v, k) => {
    if (!INTERVENTIONS.includes(v))
      throw new InvalidArgumentError(`interventions[${k}]`, `must be remove or mask (got ${JSON.stringify(v)})`);
  });
  const subsets = options.subsets ?? 0;
  if (!Number.isInteger(subsets) || subsets < 0 || subsets > MAX_SUBSETS)
    throw new InvalidArgumentError('random_subsets', `must be a whole number in [0, ${MAX_SUBSETS}]`);
  const subsetIntervention = options.subsetIntervention ?? 'mask';
  if (!INTERVENTIONS.includes(subsetIntervention)) throw new InvalidArgumentError('subset_intervention', 'must be remove or mask');
  if ((options.historySweep?.length ?? 0) > MAX_HISTORY_SWEEP)
    throw new InvalidArgumentError('history_sweep', `${options.historySweep!.length} points, over the limit of ${MAX_HISTORY_SWEEP}`);
  (options.historySweep ?? []).forEach((h, k) => {
    if (!Number.isInteger(h) || h < 0) throw new InvalidArgumentError(`history_sweep[${k}]`, 'must be a whole number ≥ 0');
  });
  return { ...options, interventions, subsets, subsetIntervention };
}

/** One sample's variants, each a unit added to the job (`add`), and how its answer comes
 * from their scores. */
async function prepareSample(
  engine: Engine,
  sample: AttributionSample,
  index: number,
  options: Resolved,
  add: (v: Variant) => number,
  checkStop: () => void,
): Promise<(scores: UnitScore[]) => SampleAttribution> {
  const field = `samples[${index}]`;
  const seg = await segmentSample(engine, sample, field);
  if (seg.ids.length > engine.config.maxPositions)
    throw new InvalidArgumentError(field, `${seg.ids.length} tokens, over the model's ${engine.config.maxPositions} positions`);
  const { labels, target, before, ablate } = chosenChunks(seg, sample, field);
  const lead = { bos: engine.tokenizer.bosId, eos: engine.tokenizer.eosId };
  const baseVariant = variantOf(seg, target, `${field}`, lead);
  const base = { index: add(baseVariant), targets: baseVariant.targets };
  const plan = variantPlanner({ engine, sample, seg, labels, target, field, lead, add, checkStop }, baseVariant, options.interventions);

  const perChunk: PlannedSample['perChunk'] = [];
  for (const k of ablate) perChunk.push({ k, planned: await plan([k]) });
  const keepOnly = options.keepOnly ? { kept: ablate, planned: await plan(before.filter((k) => !ablate.includes(k))) } : undefined;
  const history = historyTurns(sample, labels, target, options.historyLabels);
  const sweep: PlannedSample['sweep'] = [];
  for (const h of options.historySweep ?? []) {
    const dropped = history.slice(0, Math.max(0, history.length - h));
    sweep.push({ keep: h, dropped, planned: await plan(dropped) });
  }
  const patterns: boolean[][] = [];
  const patternUnits: number[] = [];
  if (options.subsets > 0) {
    // Each sample draws from its own stream: samples with as many chunks get other patterns.
    const rand = rng(streamSeed(options.seed ?? 0, index));
    for (let n = 0; n < options.subsets; n++) {
      const kept = ablate.map(() => rand() < 0.5);
      patterns.push(kept);
      const planned = await plan(
        ablate.filter((_, j) => !kept[j]),
        [options.subsetIntervention],
      );
      patternUnits.push(planned[options.subsetIntervention]!.index);
    }
  }
  const planned: PlannedSample = { seg, target, ablate, base, perChunk, keepOnly, sweep, patterns, patternUnits };
  return (scores) => sampleAttribution(planned, options, scores);
}

/** The target chunk (default: the last) and the chunks to ablate (default: every one before
 * it), by index among the sample's segments; refused with the field that names them. */
function chosenChunks(seg: Segmented, sample: AttributionSample, field: string) {
  const labels = seg.segments.map((s) => s.label);
  const target = sample.target === undefined || sample.target === '' ? labels.length - 1 : labels.lastIndexOf(sample.target);
  if (target < 0)
    throw new InvalidArgumentError(
      `${field}.target`,
      `no chunk is labelled ${JSON.stringify(sample.target)} (labels: ${labels.join(', ')})`,
    );
  if (target === 0)
    throw new InvalidArgumentError(`${field}.target`, 'the target is the first chunk: nothing comes before it to attribute');
  const before = labels.slice(0, target).map((_, k) => k);
  let ablate = before;
  if (sample.ablate?.length) {
    sample.ablate.forEach((label, k) => {
      if (!labels.slice(0, target).includes(label))
        throw new InvalidArgumentError(`${field}.ablate[${k}]`, `no chunk before the target is labelled ${JSON.stringify(label)}`);
    });
    ablate = before.filter((k) => sample.ablate!.includes(labels[k]!));
  }
  return { labels, target, before, ablate };
}

/** What making a sample's variants needs to know of it. */
interface SampleContext {
  engine: Engine;
  sample: AttributionSample;
  seg: Segmented;
  labels: string[];
  target: number;
  field: string;
  lead: { bos?: number; eos?: number };
  add: (v: Variant) => number;
  checkStop: () => void;
}

/** Where a variant's unit is in the job, and its target's tokens. */
interface PlannedVariant {
  index: number;
  targets: number[];
}

/** A variant under each intervention asked for. */
type Planned = Partial<Record<Intervention, PlannedVariant>>;

/** Every variant of a sample, planned: the base, per ablated chunk, keep-only, each point
 * of the history sweep, each random pattern. */
interface PlannedSample {
  seg: Segmented;
  target: number;
  ablate: number[];
  base: PlannedVariant;
  perChunk: { k: number; planned: Planned }[];
  keepOnly?: { kept: number[]; planned: Planned };
  sweep: { keep: number; dropped: number[]; planned: Planned }[];
  patterns: boolean[][];
  patternUnits: number[];
}

/** How the chunks `dropped` are taken out of a sample, under each intervention asked for
 * (default `interventions`): each variant's unit is added to the job as it is made. */
function variantPlanner(ctx: SampleContext, base: Variant, interventions: Intervention[]) {
  const { engine, sample, seg, labels, target, field, lead } = ctx;
  const sink = seg.ids[0] === lead.bos ? 1 : 0; // a BOS at 0 stays visible
  const masked = (dropped: number[]): Variant => {
    const hidden: KeyRange[] = dropped
      .map((k) => ({ start: Math.max(sink, seg.segments[k]!.start), end: seg.segments[k]!.end }))
      .filter((r) => r.end > r.start);
    return { unit: { ...base.unit, hidden }, targets: base.targets };
  };
  const removed = async (dropped: number[]): Promise<Variant> => {
    const { variant, target: t } = withoutChunks(sample, target, dropped);
    let vseg: Segmented;
    try {
      vseg = await segmentSample(engine, variant, field);
    } catch (e) {
      const what = dropped.map((k) => `${k} (${labels[k]})`).join(', ');
      throw new InvalidArgumentError(field, `without chunk ${what}: ${e instanceof InvalidArgumentError ? e.message : String(e)}`);
    }
    return variantOf(vseg, t, `${field} without chunk ${dropped.join(', ')}`, lead);
  };
  return async (dropped: number[], which: Intervention[] = interventions): Promise<Planned> => {
    const out: Planned = {};
    for (const v of which) {
      ctx.checkStop();
      const variant = v === 'mask' ? masked(dropped) : await removed(dropped);
      out[v] = { index: ctx.add(variant), targets: variant.targets };
    }
    return out;
  };
}

/** A sample's answer from its variants' scores: each variant's effect against the base,
 * and the random patterns' least-squares fit. */
function sampleAttribution(p: PlannedSample, options: Resolved, scores: UnitScore[]): SampleAttribution {
  const { seg, base } = p;
  const sum = (i: number) => scores[i]!.logprobs.reduce((a, b) => a + b, 0);
  const baseLogprobs = scores[base.index]!.logprobs;
  const baseSum = sum(base.index);
  const n = baseLogprobs.length;
  const effect = (variant: PlannedVariant): Effect => {
    const lp = scores[variant.index]!.logprobs;
    const same = variant.targets.length === base.targets.length && variant.targets.every((t, j) => t === base.targets[j]);
    const s = sum(variant.index);
    return {
      logprob: s,
      numTokens: lp.length,
      delta: s - baseSum,
      meanDelta: s / lp.length - baseSum / n,
      tokenDeltas: same ? lp.map((v, j) => v - baseLogprobs[j]!) : [],
    };
  };
  const effects = (planned: Planned) =>
    Object.fromEntries(Object.entries(planned).map(([v, variant]) => [v, effect(variant!)])) as Partial<Record<Intervention, Effect>>;
  const answer: SampleAttribution = {
    spans: seg.segments,
    numTokens: seg.ids.length,
    target: p.target,
    base: { logprob: baseSum, numTokens: n, tokenLogprobs: baseLogprobs },
    chunks: p.perChunk.map(({ k, planned }) => ({ index: k, ...seg.segments[k]!, ...effects(planned) })),
  };
  if (p.keepOnly) answer.keepOnly = { kept: p.keepOnly.kept, ...effects(p.keepOnly.planned) };
  if (options.historySweep?.length) answer.sweep = p.sweep.map((s) => ({ keep: s.keep, dropped: s.dropped, ...effects(s.planned) }));
  if (options.subsets > 0) {
    const y = p.patternUnits.map(sum);
    const fit = leastSquares(
      p.patterns.map((kept) => kept.map((k) => (k ? 1 : 0))),
      y,
      1e-6,
    );
    answer.subsets = { intervention: options.subsetIntervention, chunks: p.ablate, patterns: p.patterns, logprobs: y, ...fit };
  }
  return answer;
}

/** The target chunk's tokens as a unit: each predicted from everything before it. */
function variantOf(seg: Segmented, target: number, what: string, lead: { bos?: number; eos?: number }): Variant {
  let ids = seg.ids;
  let { start, end } = seg.segments[target]!;
  // A target that starts the sequence (everything before it removed: a dialogue's history
  // swept to none when it has no system message) is predicted as a continuation of an
  // empty context is: from [BOS], or EOS where the model has none (SPEC). Its own BOS, if
  // it begins with one, already does.
  if (start === 0 && !(ids[0] === lead.bos && end >= 2)) {
    const first = lead.bos ?? lead.eos;
    if (first === undefined)
      throw new InvalidArgumentError(
        what,
        'the target starts the sequence and the model has neither BOS nor EOS to predict its first token from',
      );
    ids = [first, ...ids];
    start = 1;
    end += 1;
  }
  const from = Math.max(1, start);
  return {
    unit: { prefix: ids.slice(0, from - 1), tail: ids.slice(from - 1, end - 1), targets: ids.slice(from, end), topK: 0 },
    targets: ids.slice(from, end),
  };
}

/** The sample with chunks `dropped` (indices of its segments) taken out, and where the
 * target chunk is then. Chat messages: a message's segment drops the message, a chunk
 * inside a message drops that chunk's text from it. */
function withoutChunks(sample: AttributionSample, target: number, dropped: number[]): { variant: AttributionSample; target: number } {
  const gone = new Set(dropped);
  // Chunks are segments one to one: the target moves back by the chunks dropped before it.
  const kept = <T>(list: T[]) => list.filter((_, k) => !gone.has(k));
  const shifted = target - dropped.filter((k) => k < target).length;
  if (sample.chunks?.length) return { variant: { ...sample, chunks: kept(sample.chunks) }, target: shifted };
  if (sample.chunkIds?.length) return { variant: { ...sample, chunkIds: kept(sample.chunkIds) }, target: shifted };
  const messages: ChatMessage[] = [];
  let index = 0; // segment index in the sample
  let newIndex = 0; // segment index in the variant
  let newTarget = -1;
  for (const m of sample.messages!) {
    if (m.chunks?.length) {
      const kept = m.chunks.filter((_, j) => !gone.has(index + j));
      const holdsTarget = target >= index && target < index + m.chunks.length;
      if (holdsTarget) {
        newTarget = newIndex + kept.indexOf(m.chunks[target - index]!);
        messages.push({ ...m, content: '', chunks: kept });
        newIndex += kept.length;
      } else {
        // Only the target needs a span of its own: other messages go as plain content, which
        // a template may trim where a removal left whitespace at the edge (Llama 3 does).
        messages.push({ role: m.role, content: kept.map((c) => c.text).join('') });
        newIndex++;
      }
      index += m.chunks.length;
    } else {
      if (index === target) newTarget = newIndex;
      if (!gone.has(index)) {
        messages.push(m);
        newIndex++;
      }
      index++;
    }
  }
  return { variant: { ...sample, messages }, target: newTarget };
}

/** The history turns, in order: chunks before the target with a history label; for chat
 * messages by default every user and assistant message before the target (not the
 * system prompt, nor labelled chunks inside a message). */
function historyTurns(sample: AttributionSample, labels: string[], target: number, historyLabels?: string[]): number[] {
  const before = labels.slice(0, target).map((_, k) => k);
  if (historyLabels?.length) return before.filter((k) => historyLabels.includes(labels[k]!));
  if (sample.messages?.length) return before.filter((k) => /^(user|assistant)#\d+$/.test(labels[k]!));
  return before.filter((k) => labels[k] === 'history');
}
