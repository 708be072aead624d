// Every answer is bounded before any work starts: the requests that made a served model
// abort its process or answer hundreds of megabytes (measured on the landed main) are
// refused at once with RESOURCE_EXHAUSTED / 413, naming the limit and the count, and the
// server answers the next request as before.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import * as grpc from '@grpc/grpc-js';
import type { CtxprobeServer } from '../src/server.js';
import { FAMILY_FIXTURES, makeFixture } from './fixtures.js';
import { postJson, scoringClient, serveModel, unary } from './helpers.js';

let server: CtxprobeServer;
let base: string;
let vocab: number;

beforeAll(async () => {
  const fx = makeFixture({ ...FAMILY_FIXTURES.llama!, maxPositions: 4096, ropeScaling: undefined });
  vocab = fx.config.vocab_size;
  ({ server, base } = await serveModel('m', fx.dir));
});
afterAll(async () => server?.close());

const ids = (n: number, seed: number) => Array.from({ length: n }, (_, i) => (seed * 17 + i * 7) % vocab);
const post = (route: string, body: unknown) => postJson(base, route, body);

/** The server still answers a small score, with log-probs. */
async function stillServes(): Promise<void> {
  const ok = await post('/v1/score', { items: [{ contextIds: { ids: ids(4, 1) }, continuationsIds: [{ ids: ids(3, 2) }] }] });
  expect(ok.status).toBe(200);
  expect(ok.body.items[0].continuations[0].tokenLogprobs).toHaveLength(3);
}

describe('answers bounded before any work', () => {
  it('Score: 125 items of 1,040-token continuations with 100 alternatives each (13.1M values; it aborted the process) is 413', async () => {
    const items = Array.from({ length: 125 }, (_, i) => ({
      contextIds: { ids: ids(8, i) },
      continuationsIds: [{ ids: ids(1040, i + 1) }],
      topK: 100,
    }));
    const res = await post('/v1/score', { items });
    expect(res.status).toBe(413);
    expect(res.body.code).toBe(grpc.status.RESOURCE_EXHAUSTED);
    expect(res.body.message).toMatch(
      /^items: the answer would hold 13130000 values \(scored tokens × \(1 \+ top-k\)\), over the limit of 262144 per answer \(--max-answer-values\)/,
    );
    // gRPC: the same refusal.
    const err = await unary(scoringClient(server.port), 'Score', { items }).catch((e) => e);
    expect(err.code).toBe(grpc.status.RESOURCE_EXHAUSTED);
    expect(err.details).toMatch(/13130000 values/);
    await stillServes();
  });

  it('Score over --max-scored-tokens is 413 too (was 400: a limit, not a bad field)', async () => {
    const items = Array.from({ length: 130 }, (_, i) => ({ contextIds: { ids: ids(4, i) }, continuationsIds: [{ ids: ids(1024, i) }] }));
    const res = await post('/v1/score', { items });
    expect(res.status).toBe(413);
    expect(res.body.message).toMatch(/^items: 133120 scored tokens, over the limit of 131072 per answer \(--max-scored-tokens\)/);
  });

  it('Probe: 2,048 one-token chunks with the heatmap (61–64 MB answered before) is 413', async () => {
    const chunks = Array.from({ length: 2048 }, (_, i) => ({ label: `c${i}`, ids: { ids: [i % vocab] } }));
    const res = await post('/v1/probe', { samples: [{ chunks }] });
    expect(res.status).toBe(413);
    expect(res.body.message).toMatch(
      /^samples: the answer would hold \d+ values \(per sample: .*segments² heatmap cells.*\), over the limit of 262144/,
    );
    // Without the heatmap the same sample's statistics fit.
    const votes = await post('/v1/probe', { samples: [{ chunks: chunks.slice(0, 64) }], skipHeatmap: true });
    expect(votes.status).toBe(200);
    await stillServes();
  });

  it('echo: 64 prompts of 2,040 tokens with logprobs 100 (224 MB in 48.5 s before) is 413', async () => {
    const prompt = Array.from({ length: 64 }, (_, i) => ids(2040, i));
    const res = await post('/v1/completions', { prompt, echo: true, logprobs: 100, max_tokens: 0 });
    expect(res.status).toBe(413);
    expect(res.body.error.message).toMatch(/the answer would hold 13186560 values \(prompt tokens × \(1 \+ logprobs\)\)/);
    await stillServes();
  });

  it('generation: prompts × n × max_tokens × (1 + logprobs) over the limit is 413, before a token is generated', async () => {
    const res = await post('/v1/completions', { prompt: [ids(8, 1), ids(8, 2)], n: 64, max_tokens: 1000, logprobs: 20, temperature: 1 });
    expect(res.status).toBe(413);
    expect(res.body.error.message).toMatch(
      /^max_tokens: the answer would hold 2688000 values \(prompts × n × max_tokens × \(1 \+ logprobs\)\)/,
    );
    await stillServes();
  });
});
