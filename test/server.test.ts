// The gRPC server on a loopback port, driven by a real grpc-js client: answers equal the
// scoring library's, bad input gets INVALID_ARGUMENT naming the field, and the server
// keeps answering afterwards.
import * as grpc from '@grpc/grpc-js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadPackage } from '../src/grpc/proto.js';
import { loadModel, type LoadedModel } from '../src/repository.js';
import { startServer, type RunningServer } from '../src/server.js';
import { FAMILY_FIXTURES, makeFixture } from './fixtures.js';

let models: LoadedModel[];
let server: RunningServer;
let client: any;
const call = (method: string, req: unknown) =>
  new Promise<any>((resolve, reject) => client[method](req, (err: grpc.ServiceError | null, res: any) => (err ? reject(err) : resolve(res))));

beforeAll(async () => {
  models = [
    await loadModel({ name: 'llama', path: makeFixture(FAMILY_FIXTURES.llama!).dir, threads: 1 }),
    await loadModel({ name: 'gpt2', path: makeFixture(FAMILY_FIXTURES.gpt2!).dir, threads: 1, maxLength: 16 }),
  ];
  server = await startServer({ models, port: 0 });
  const { v1 } = loadPackage();
  client = new v1.Scoring(`127.0.0.1:${server.port}`, grpc.credentials.createInsecure());
});
afterAll(async () => {
  client?.close();
  await server?.shutdown();
  await Promise.all(models.map((m) => m.engine.release()));
});

describe('gRPC Scoring service', () => {
  it('lists the models with their facts', async () => {
    const res = await call('ListModels', {});
    expect(res.models.map((m: any) => [m.name, m.family, m.layers, m.kvHeads, m.maxLength])).toEqual([
      ['llama', 'llama', 2, 2, 64],
      ['gpt2', 'gpt2', 2, 4, 16],
    ]);
  });

  it('tokenizes with the model tokenizer', async () => {
    const res = await call('Tokenize', { model: 'gpt2', texts: ['Hello world', ''] });
    expect(res.results[0].ids).toEqual(models[1]!.engine.tokenizer.encode('Hello world'));
    expect(res.results[1].ids).toEqual([]);
  });

  it('scores text and token-id items as the library does', async () => {
    const items = [
      { id: 'a', contextText: 'User: Who designed it? Bot:', continuationsText: [' Gustave Eiffel.', ' The tower'], topK: 2 },
      { id: 'b', contextIds: { ids: [0, 50, 60] }, continuationsIds: [{ ids: [70, 80] }] },
      { id: 'c', continuationsText: ['Once upon a time'] },
    ];
    const res = await call('Score', { model: 'llama', items });
    const direct = await models[0]!.scorer.loglikelihood([
      { context: items[0]!.contextText!, continuations: items[0]!.continuationsText!, topK: 2 },
      { context: [0, 50, 60], continuations: [[70, 80]] },
      { context: '', continuations: ['Once upon a time'] },
    ]);
    expect(res.items.map((i: any) => i.id)).toEqual(['a', 'b', 'c']);
    res.items.forEach((item: any, i: number) =>
      item.continuations.forEach((c: any, j: number) => {
        const d = direct[i]![j]!;
        expect(c.tokenIds).toEqual(d.tokenIds);
        expect(Math.abs(c.logprob - d.logprob)).toBeLessThan(1e-6);
        c.tokenLogprobs.forEach((lp: number, k: number) => expect(Math.abs(lp - d.tokenLogprobs[k]!)).toBeLessThan(1e-6));
        expect(c.isGreedy).toBe(d.isGreedy);
        expect(c.numBytes).toBe(d.numBytes);
        if (d.topK) expect(c.topK.map((t: any) => t.tokens.map((x: any) => x.id))).toEqual(d.topK.map((t) => t.ids));
      }),
    );
  });

  it('scores rolling log-likelihood with windows of the served max length', async () => {
    const text = 'The weather today is sunny and warm, so we will walk to the river and have a picnic there.';
    const res = await call('ScoreRolling', { model: 'gpt2', items: [{ id: 'x', text, minKPercent: 10 }] });
    const [direct] = await models[1]!.scorer.rolling([{ text, minKPercent: 10 }]);
    expect(res.items[0].numWindows).toBeGreaterThan(1);
    expect(res.items[0].numTokens).toBe(direct!.numTokens);
    expect(Math.abs(res.items[0].meanLoss - direct!.meanLoss)).toBeLessThan(1e-9);
    expect(Math.abs(res.items[0].minKLogprob - direct!.minKLogprob)).toBeLessThan(1e-9);
  });

  it('answers bad input with a status naming the field, and keeps serving', async () => {
    const cases: [string, unknown, grpc.status, RegExp][] = [
      ['Score', { model: 'nope', items: [{ contextText: 'a', continuationsText: ['b'] }] }, grpc.status.NOT_FOUND, /model: no model named "nope"/],
      ['Score', { items: [] }, grpc.status.INVALID_ARGUMENT, /^items: at least one item/],
      ['Score', { items: [{ contextText: 'a', continuationsText: [''] }] }, grpc.status.INVALID_ARGUMENT, /items\[0\]\.continuations\[0\]: continuation is empty/],
      ['Score', { items: [{ contextIds: { ids: [1] }, continuationsIds: [{ ids: [99999] }] }] }, grpc.status.INVALID_ARGUMENT, /items\[0\]\.continuations\[0\]\[0\]: token id 99999/],
      ['Score', { items: [{ contextText: 'a', continuationsText: ['b'], continuationsIds: [{ ids: [1] }] }] }, grpc.status.INVALID_ARGUMENT, /items\[0\]: set continuations_text or continuations_ids/],
      ['Score', { model: 'gpt2', items: [{ contextText: 'a '.repeat(40), continuationsText: ['b'], truncation: 'TRUNCATION_ERROR' }] }, grpc.status.INVALID_ARGUMENT, /items\[0\]\.continuations\[0\]: .*over the maximum length 16/],
      ['ScoreRolling', { items: [{ text: '' }] }, grpc.status.INVALID_ARGUMENT, /items\[0\]\.text: text is empty/],
      ['ScoreRolling', { items: [{ text: 'a', minKPercent: 150 }] }, grpc.status.INVALID_ARGUMENT, /items\[0\]\.min_k_percent/],
    ];
    for (const [method, req, code, message] of cases) {
      const err = await call(method, req).catch((e) => e);
      expect(err.code, `${method} ${JSON.stringify(req)}`).toBe(code);
      expect(err.details).toMatch(message);
    }
    const ok = await call('Score', { items: [{ contextText: 'a', continuationsText: [' b'] }] });
    expect(ok.items[0].continuations[0].numTokens).toBeGreaterThan(0);
  });
});
