// gRPC Probing handlers: translate samples to the prober, queue on the model's batcher
// (probes share the scoring queue and its limits), translate answers back.
import * as grpc from '@grpc/grpc-js';
import { toFloat16Bytes } from '../dtypes.js';
import type { ProbeAnswer, ProbeSample, Reducer, SampleProbe } from '../probe.js';
import { StatusError, callHelpers, toStatus, type ServiceContext, type Unary } from './calls.js';

type ServerStream = (call: grpc.ServerWritableStream<any, any>) => void;

const REDUCERS: Record<string, Reducer | undefined> = {
  REDUCE_DEFAULT: undefined,
  REDUCE_MEAN: 'mean',
  REDUCE_MAX: 'max',
  REDUCE_SUM: 'sum',
};

export function probingService(ctx: ServiceContext): Record<string, Unary | ServerStream> {
  const { model, queued, unary, finishCall } = callHelpers(ctx);

  return {
    Probe: unary('Probe', async (req, call) => {
      const m = model(req.model);
      if (req.samples.length > ctx.maxItemsPerRequest) {
        throw new StatusError(
          grpc.status.INVALID_ARGUMENT,
          `samples: ${req.samples.length} samples, over the limit of ${ctx.maxItemsPerRequest} per call`,
        );
      }
      const reducer = (name: string, field: string) => {
        if (!(name in REDUCERS)) throw new StatusError(grpc.status.INVALID_ARGUMENT, `${field}: unknown value ${JSON.stringify(name)}`);
        return REDUCERS[name];
      };
      if (req.pool !== 'POOL_MAX' && req.pool !== 'POOL_MEAN')
        throw new StatusError(grpc.status.INVALID_ARGUMENT, `pool: unknown value ${JSON.stringify(req.pool)}`);
      const { prepared, opts } = m.prober.prepareAll(
        (req.samples as any[]).map((s, i) => toSample(s, `samples[${i}]`)),
        {
          pool: req.pool === 'POOL_MEAN' ? 'mean' : 'max',
          queryReduce: reducer(req.queryReduce, 'query_reduce'),
          keyReduce: reducer(req.keyReduce, 'key_reduce'),
          perHead: req.perHead,
        },
      );
      const tokens = prepared.reduce((n, p) => n + p.row.tokens.length, 0);
      const answer: ProbeAnswer = await queued(
        m.batcher.submitTask(tokens, () => m.prober.run(prepared, opts)),
        call,
      );
      ctx.metrics.itemsScored.inc({ model: m.entry.name }, prepared.length);
      return {
        model: m.entry.name,
        layers: m.engine.config.numLayers,
        heads: m.engine.config.numHeads,
        samples: answer.samples.map((s, i) => toSampleMessage(req.samples[i].id, s)),
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

    RawAttention: ((call: grpc.ServerWritableStream<any, any>) => {
      const started = performance.now();
      ctx.inFlight.count++;
      const req = call.request;
      Promise.resolve()
        .then(async () => {
          const m = model(req.model);
          if (!req.sample) throw new StatusError(grpc.status.INVALID_ARGUMENT, 'sample: required');
          const half = req.dtype === 'ATTENTION_FLOAT16';
          if (!half && req.dtype !== 'ATTENTION_FLOAT32')
            throw new StatusError(grpc.status.INVALID_ARGUMENT, `dtype: unknown value ${JSON.stringify(req.dtype)}`);
          const prepared = m.prober.prepareRaw(
            toSample(req.sample, 'sample'),
            { layers: req.layers, heads: req.heads, queryStart: req.queryStart, queryEnd: req.queryEnd },
            half ? 2 : 4,
          );
          const slices = await queued(
            m.batcher.submitTask(prepared.prepared.row.tokens.length, () => m.prober.runRaw(prepared)),
            call,
          );
          for (const s of slices) {
            if (call.cancelled) break;
            call.write({
              layer: s.layer,
              head: s.head,
              queryStart: s.queryStart,
              queries: s.values.length / s.keys,
              keys: s.keys,
              dtype: req.dtype,
              data: half ? toFloat16Bytes(s.values) : Buffer.from(s.values.buffer, s.values.byteOffset, s.values.byteLength),
            });
          }
        })
        .then(
          () => finishCall('RawAttention', started, { code: grpc.status.OK }, () => call.end()),
          (err: unknown) => {
            const status = toStatus(err);
            finishCall('RawAttention', started, status, () => call.emit('error', status)); // grpc-js ends the stream with this status
          },
        );
    }) as ServerStream,
  };
}

function toSample(s: any, field: string): ProbeSample {
  const chunks: any[] = s.chunks ?? [];
  const kinds = new Set(chunks.map((c) => c.content));
  if (kinds.size > 1 || kinds.has(undefined)) {
    throw new StatusError(grpc.status.INVALID_ARGUMENT, `${field}.chunks: every chunk needs text, or every chunk ids, not a mix`);
  }
  const byIds = kinds.has('ids');
  return {
    chunks: byIds ? undefined : chunks.map((c) => ({ label: c.label, text: c.text })),
    chunkIds: byIds ? chunks.map((c) => ({ label: c.label, ids: c.ids.ids })) : undefined,
    messages: s.messages?.length ? s.messages.map((m: any) => ({ role: m.role, content: m.content })) : undefined,
    addSpecialTokens: s.addSpecialTokens,
    queryLabels: s.queryLabels,
    excludePositions: s.excludePositions,
  };
}

function matrix(rows: number[][]) {
  return { rows: rows.length, cols: rows[0]?.length ?? 0, values: rows.flat() };
}

function toSampleMessage(id: string, s: SampleProbe) {
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
  };
}
