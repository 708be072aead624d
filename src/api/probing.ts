// The API's Probing handlers: translate samples (generated types) to the serving layer's
// probe calls (probes share the model's queue and its limits), and answers back.
import { toFloat16Bytes } from '../common/dtypes.js';
import { InvalidArgumentError } from '../common/errors.js';
import type { Service } from '../serving/service.js';
import type { ProbeSample, Reducer, SampleProbe } from '../requests/probe.js';
import type { Effect, Intervention, SampleAttribution } from '../requests/attribution.js';
import type { Effect as EffectMessage } from './generated/ctxprobe/v1/Effect.js';
import type { SampleAttribution as SampleAttributionMessage } from './generated/ctxprobe/v1/SampleAttribution.js';
import type { ProbingHandlers } from './generated/ctxprobe/v1/Probing.js';
import type { ProbeSample__Output } from './generated/ctxprobe/v1/ProbeSample.js';
import type { SampleProbe as SampleProbeMessage } from './generated/ctxprobe/v1/SampleProbe.js';
import { matrix, serverStream, unary, type Methods } from './method-kinds.js';

const REDUCERS: Record<string, Reducer | undefined> = {
  REDUCE_DEFAULT: undefined,
  REDUCE_MEAN: 'mean',
  REDUCE_MAX: 'max',
  REDUCE_SUM: 'sum',
};

function reducer(name: string, field: string): Reducer | undefined {
  if (!(name in REDUCERS)) throw new InvalidArgumentError(field, `unknown value ${JSON.stringify(name)}`);
  return REDUCERS[name];
}

export function probingMethods(service: Service): Methods<ProbingHandlers> {
  return {
    Probe: unary(async (req, call) => {
      const m = service.model(req.model);
      if (req.pool !== 'POOL_MAX' && req.pool !== 'POOL_MEAN')
        throw new InvalidArgumentError('pool', `unknown value ${JSON.stringify(req.pool)}`);
      const answer = await service.probe(
        m,
        req.samples.map((s, i) => toSample(s, `samples[${i}]`)),
        {
          pool: req.pool === 'POOL_MEAN' ? 'mean' : 'max',
          queryReduce: reducer(req.queryReduce, 'query_reduce'),
          keyReduce: reducer(req.keyReduce, 'key_reduce'),
          perHead: req.perHead,
          heatmap: !req.skipHeatmap,
          logprobs: req.withLogprobs,
        },
        call,
      );
      return {
        model: m.entry.name,
        layers: m.engine.info.layers,
        heads: m.engine.info.heads,
        samples: answer.samples.map((s, i) => ({
          ...toSampleMessage(req.samples[i]!.id, s),
          ...(req.withTokens ? { tokenIds: s.ids, tokens: service.tokenTexts(m, s.ids) } : {}),
        })),
        hasMean: answer.mean !== undefined,
        mean: answer.mean && {
          labels: answer.mean.labels,
          votes: matrix(answer.mean.votes),
          votesExcluded: answer.mean.votesExcluded,
          mass: matrix(answer.mean.mass),
          massExcluded: answer.mean.massExcluded,
          heatmap: matrix(answer.mean.heatmap ?? []),
        },
        pool: answer.options.pool,
        queryReduce: answer.options.queryReduce,
        keyReduce: answer.options.keyReduce,
      };
    }),

    Attribute: unary(async (req, call) => {
      const m = service.model(req.model);
      const samples = req.samples.map((s, i) => ({
        ...toSample(s, `samples[${i}]`),
        target: s.targetLabel || undefined,
        ablate: s.ablateLabels,
      }));
      const answers = await service.attribute(
        m,
        samples,
        {
          interventions: req.interventions.map((v, k) => intervention(v, `interventions[${k}]`)),
          keepOnly: req.keepOnly,
          historySweep: req.historySweep,
          historyLabels: req.historyLabels,
          subsets: req.randomSubsets,
          seed: req.seed,
          subsetIntervention:
            req.subsetIntervention === 'INTERVENTION_UNSPECIFIED' ? 'mask' : intervention(req.subsetIntervention, 'subset_intervention'),
        },
        call,
      );
      return { model: m.entry.name, samples: answers.map((a, i) => toAttributionMessage(req.samples[i]!.id, a)) };
    }),

    RawAttention: serverStream(async (req, context, write) => {
      const m = service.model(req.model);
      if (!req.sample) throw new InvalidArgumentError('sample', 'required');
      const half = req.dtype === 'ATTENTION_FLOAT16';
      if (!half && req.dtype !== 'ATTENTION_FLOAT32') throw new InvalidArgumentError('dtype', `unknown value ${JSON.stringify(req.dtype)}`);
      const slices = await service.rawAttention(
        m,
        toSample(req.sample, 'sample'),
        { layers: req.layers, heads: req.heads, queryStart: req.queryStart, queryEnd: req.queryEnd },
        half ? 2 : 4,
        context,
      );
      for (const s of slices) {
        write({
          layer: s.layer,
          head: s.head,
          queryStart: s.queryStart,
          queries: s.values.length / s.keys,
          keys: s.keys,
          dtype: req.dtype,
          data: half ? toFloat16Bytes(s.values) : Buffer.from(s.values.buffer, s.values.byteOffset, s.values.byteLength),
        });
      }
    }),
  };
}

const INTERVENTIONS: Record<string, Intervention | undefined> = { INTERVENTION_REMOVE: 'remove', INTERVENTION_MASK: 'mask' };

function intervention(name: string, field: string): Intervention {
  const v = INTERVENTIONS[name];
  if (!v) throw new InvalidArgumentError(field, `must be INTERVENTION_REMOVE or INTERVENTION_MASK (got ${JSON.stringify(name)})`);
  return v;
}

function effect(e: Effect | undefined): EffectMessage | undefined {
  return e && { logprob: e.logprob, numTokens: e.numTokens, delta: e.delta, meanDelta: e.meanDelta, tokenDeltas: e.tokenDeltas };
}

function toAttributionMessage(id: string, a: SampleAttribution): SampleAttributionMessage {
  return {
    id,
    spans: a.spans.map((g) => ({ label: g.label, start: g.start, end: g.end })),
    numTokens: a.numTokens,
    target: a.target,
    logprob: a.base.logprob,
    targetTokens: a.base.numTokens,
    tokenLogprobs: a.base.tokenLogprobs,
    chunks: a.chunks.map((c) => ({
      index: c.index,
      label: c.label,
      start: c.start,
      end: c.end,
      remove: effect(c.remove),
      mask: effect(c.mask),
    })),
    keepOnly: a.keepOnly && { kept: a.keepOnly.kept, remove: effect(a.keepOnly.remove), mask: effect(a.keepOnly.mask) },
    sweep: (a.sweep ?? []).map((p) => ({ keep: p.keep, dropped: p.dropped, remove: effect(p.remove), mask: effect(p.mask) })),
    subsets: a.subsets && {
      intervention: a.subsets.intervention === 'remove' ? 'INTERVENTION_REMOVE' : 'INTERVENTION_MASK',
      chunks: a.subsets.chunks,
      patterns: matrix(a.subsets.patterns.map((p) => p.map(Number))),
      logprobs: a.subsets.logprobs,
      intercept: a.subsets.intercept,
      weights: a.subsets.weights,
      r2: a.subsets.r2,
    },
  };
}

/** The sample fields Probe and Attribute share. */
type SampleFields = Pick<
  ProbeSample__Output,
  'chunks' | 'messages' | 'addSpecialTokens' | 'addGenerationPrompt' | 'chatTemplateKwargsJson'
> &
  Partial<Pick<ProbeSample__Output, 'queryLabels' | 'excludePositions'>>;

export function toSample(s: SampleFields, field: string): ProbeSample {
  const chunks = s.chunks;
  const kinds = new Set(chunks.map((c) => c.content));
  if (kinds.size > 1 || kinds.has(undefined)) {
    throw new InvalidArgumentError(`${field}.chunks`, 'every chunk needs text, or every chunk ids, not a mix');
  }
  const byIds = kinds.has('ids');
  return {
    chunks: byIds ? undefined : chunks.map((c) => ({ label: c.label, text: c.text! })),
    chunkIds: byIds ? chunks.map((c) => ({ label: c.label, ids: c.ids!.ids })) : undefined,
    messages: s.messages.length
      ? s.messages.map((m, k) => ({
          role: m.role,
          content: m.content,
          ...(m.chunks.length
            ? {
                chunks: m.chunks.map((c, j) => {
                  if (c.content !== 'text')
                    throw new InvalidArgumentError(`${field}.messages[${k}].chunks[${j}]`, 'chunks inside a message are text');
                  return { label: c.label, text: c.text! };
                }),
              }
            : {}),
        }))
      : undefined,
    addGenerationPrompt: s.addGenerationPrompt,
    templateKwargs: templateKwargs(s.chatTemplateKwargsJson, `${field}.chat_template_kwargs_json`),
    addSpecialTokens: s.addSpecialTokens,
    queryLabels: s.queryLabels,
    excludePositions: s.excludePositions,
  };
}

function templateKwargs(json: string, field: string): Record<string, unknown> | undefined {
  if (!json) return undefined;
  let value: unknown;
  try {
    value = JSON.parse(json);
  } catch (e) {
    throw new InvalidArgumentError(field, `not JSON: ${(e as Error).message}`);
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) throw new InvalidArgumentError(field, 'must be a JSON object');
  return value as Record<string, unknown>;
}

function toSampleMessage(id: string, s: SampleProbe): SampleProbeMessage {
  return {
    id,
    spans: s.segments.map((g) => ({ label: g.label, start: g.start, end: g.end })),
    numTokens: s.numTokens,
    queryLabels: s.queryLabels,
    votes: matrix(s.votes),
    votesExcluded: s.votesExcluded,
    mass: matrix(s.mass),
    massExcluded: s.massExcluded,
    votesPerHead: s.votesPerHead ? matrix(s.votesPerHead.flat()) : undefined,
    massPerHead: s.massPerHead ? matrix(s.massPerHead.flat()) : undefined,
    heatmap: matrix(s.heatmap),
    heatmapExcluded: s.heatmapExcluded,
    prefixTokensComputed: s.prefix?.computed ?? 0,
    prefixTokensReused: s.prefix?.reused ?? 0,
    queryLogprobs: s.queryLogprobs ?? [],
    queryLogprob: s.queryLogprob ?? 0,
  };
}
