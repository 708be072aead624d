// The gRPC server on a loopback port, driven by real grpc-js clients.
import * as grpc from '@grpc/grpc-js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadModel, type LoadedModel } from '../src/serving/repository.js';
import { CtxprobeServer } from '../src/server.js';
import { FAMILY_FIXTURES, makeFixture } from './fixtures.js';
import { healthClient, reflectionClient, scoringClient, scrape, unary } from './helpers.js';
import { loadPackage } from '../src/grpc/proto.js';
import { rng } from '../src/model/synthetic.js';
import { directScoring } from '../src/requests/scoring.js';

let llama: LoadedModel;
let gpt2: LoadedModel;
let server: CtxprobeServer;
let client: any;
const call = (method: string, req: unknown, options?: grpc.CallOptions) => unary(client, method, req, options);

beforeAll(async () => {
  llama = await loadModel({ name: 'llama', path: makeFixture(FAMILY_FIXTURES.llama!).dir, threads: 1 });
  gpt2 = await loadModel({ name: 'gpt2', path: makeFixture(FAMILY_FIXTURES.gpt2!).dir, threads: 1, maxLength: 16 });
  server = await CtxprobeServer.start({ port: 0, metricsPort: 0 });
  server.addModel(llama);
  server.addModel(gpt2);
  server.setServing();
  client = scoringClient(server.port);
});
afterAll(async () => {
  client?.close();
  await server?.close();
});

describe('gRPC Scoring service', () => {
  it('lists the models with their facts', async () => {
    const res = await call('ListModels', {});
    expect(res.models.map((m: any) => [m.name, m.family, m.layers, m.kvHeads, m.maxLength])).toEqual([
      ['llama', 'llama', 2, 2, 64],
      ['gpt2', 'gpt2', 2, 4, 16],
    ]);
    // The compute dtype and why it was chosen.
    expect(res.models.map((m: any) => [m.dtype, m.dtypeReason])).toEqual([
      ['float32', 'CPU default'],
      ['float32', 'CPU default'],
    ]);
  });

  it('tokenizes with the model tokenizer', async () => {
    const res = await call('Tokenize', { model: 'gpt2', texts: ['Hello world', ''] });
    expect(res.results[0].ids).toEqual(gpt2.engine.tokenizer.encode('Hello world'));
    expect(res.results[1].ids).toEqual([]);
  });

  it('scores text and token-id items as the library does', async () => {
    const items = [
      { id: 'a', contextText: 'User: Who designed it? Bot:', continuationsText: [' Gustave Eiffel.', ' The tower'], topK: 2 },
      { id: 'b', contextIds: { ids: [0, 50, 60] }, continuationsIds: [{ ids: [70, 80] }] },
      { id: 'c', continuationsText: ['Once upon a time'] },
    ];
    const res = await call('Score', { model: 'llama', items });
    const direct = await directScoring(llama.scorer).loglikelihood([
      { context: items[0]!.contextText!, continuations: items[0]!.continuationsText!, topK: 2 },
      { context: [0, 50, 60], continuations: [[70, 80]] },
      { context: '', continuations: ['Once upon a time'] },
    ]);
    expect(res.items.map((i: any) => i.id)).toEqual(['a', 'b', 'c']);
    res.items.forEach((item: any, i: number) =>
      item.continuations.forEach((c: any, j: number) => {
        const d = direct[i]![j]!;
        expect(c.tokenIds).toEqual(d.tokenIds);
        expect(Math.abs(c.logprob - d.logprob)).toBeLessThan(1e-5);
        c.tokenLogprobs.forEach((lp: number, k: number) => expect(Math.abs(lp - d.tokenLogprobs[k]!)).toBeLessThan(1e-5));
        expect(c.isGreedy).toBe(d.isGreedy);
        expect(c.numBytes).toBe(d.numBytes);
        if (d.topK) expect(c.topK.map((t: any) => t.tokens.map((x: any) => x.id))).toEqual(d.topK.map((t) => t.ids));
      }),
    );
  });

  it('scores rolling log-likelihood with windows of the served max length', async () => {
    const text = 'The weather today is sunny and warm, so we will walk to the river and have a picnic there.';
    const res = await call('ScoreRolling', { model: 'gpt2', items: [{ id: 'x', text, minKPercent: 10 }] });
    const [direct] = await directScoring(gpt2.scorer).rolling([{ text, minKPercent: 10 }]);
    expect(res.items[0].numWindows).toBeGreaterThan(1);
    expect(res.items[0].numTokens).toBe(direct!.numTokens);
    expect(Math.abs(res.items[0].meanLoss - direct!.meanLoss)).toBeLessThan(1e-6);
    expect(Math.abs(res.items[0].minKLogprob - direct!.minKLogprob)).toBeLessThan(1e-6);
  });

  it('paper-exact modes over gRPC: context log-probs, unconditional scores, KIEval loss and a Min-K sweep, as the library answers', async () => {
    const res = await call('Score', {
      model: 'llama',
      items: [{ id: 'q', contextText: 'Question: sky colour? Answer:', continuationsText: [' blue', ' red'], contextLogprobs: true, unconditionalText: 'Answer:' }],
    });
    const [lib] = await directScoring(llama.scorer).loglikelihood([
      { context: 'Question: sky colour? Answer:', continuations: [' blue', ' red'], contextLogprobs: true, unconditionalContext: 'Answer:' },
    ]);
    const item = res.items[0];
    expect(item.context.tokenIds).toEqual(lib![0]!.context!.tokenIds);
    expect(Math.abs(item.context.logprob - lib![0]!.context!.logprob)).toBeLessThan(1e-6);
    item.continuations.forEach((c: any, j: number) => {
      expect(Math.abs(c.meanLogprob - lib![j]!.meanLogprob)).toBeLessThan(1e-6);
      expect(Math.abs(c.unconditional.difference - lib![j]!.unconditional!.difference)).toBeLessThan(1e-6);
    });
    const rolling = await call('ScoreRolling', {
      model: 'llama',
      items: [{ id: 'r', text: 'a short text', skipFirstToken: true, minKPercent: 10, minKPercents: [50, 100], minKSkipShort: true }],
    });
    const [want] = await directScoring(llama.scorer).rolling([{ text: 'a short text', skipFirstToken: true, minKPercent: 10, minKPercents: [50, 100], minKRule: 'skip' }]);
    const r = rolling.items[0];
    expect(r.numTokens).toBe(want!.numTokens);
    expect(r.minK.map((m: any) => [m.kPercent, m.count, m.skipped])).toEqual(want!.minK.map((m) => [m.kPercent, m.count, m.skipped]));
    expect(r.minK[0].skipped).toBe(true);
    expect(r.minKLogprob).toBeNaN();
    expect(Math.abs(r.minK[2].logprob - want!.minK[2]!.logprob)).toBeLessThan(1e-6);
    const err = await call('Score', { model: 'llama', items: [{ contextText: 'x', continuationsText: [' y'], unconditionalIds: { ids: [5] } }] }).catch((e) => e);
    expect(err.details).toMatch(/items\[0\]\.unconditional: the neutral context must be of the same kind/);
  });

  it('answers bad input with a status naming the field, and keeps serving', async () => {
    const cases: [string, unknown, grpc.status, RegExp][] = [
      [
        'Score',
        { model: 'nope', items: [{ contextText: 'a', continuationsText: ['b'] }] },
        grpc.status.NOT_FOUND,
        /model: no model named "nope"/,
      ],
      ['Score', { items: [] }, grpc.status.INVALID_ARGUMENT, /^items: at least one item/],
      [
        'Score',
        { items: [{ contextText: 'a', continuationsText: [''] }] },
        grpc.status.INVALID_ARGUMENT,
        /items\[0\]\.continuations\[0\]: continuation is empty/,
      ],
      [
        'Score',
        { items: [{ contextIds: { ids: [1] }, continuationsIds: [{ ids: [99999] }] }] },
        grpc.status.INVALID_ARGUMENT,
        /items\[0\]\.continuations\[0\]\[0\]: token id 99999/,
      ],
      [
        'Score',
        { items: [{ contextText: 'a', continuationsText: ['b'], continuationsIds: [{ ids: [1] }] }] },
        grpc.status.INVALID_ARGUMENT,
        /items\[0\]: set continuations_text or continuations_ids/,
      ],
      [
        'Score',
        { items: [{ contextText: 'a', continuationsText: ['b'], truncation: 7 }] },
        grpc.status.INVALID_ARGUMENT,
        /items\[0\]\.truncation: unknown value 7/,
      ],
      ['Score', { items: [{ contextText: 'a', continuationsText: ['b'], topK: 1000 }] }, grpc.status.INVALID_ARGUMENT, /items\[0\]\.top_k/],
      [
        'Score',
        { model: 'gpt2', items: [{ contextText: 'a '.repeat(40), continuationsText: ['b'], truncation: 'TRUNCATION_ERROR' }] },
        grpc.status.INVALID_ARGUMENT,
        /items\[0\]\.continuations\[0\]: .*over the maximum length 16/,
      ],
      ['ScoreRolling', { items: [{ text: '' }] }, grpc.status.INVALID_ARGUMENT, /items\[0\]\.text: text is empty/],
      ['ScoreRolling', { items: [{ text: 'a', minKPercent: 150 }] }, grpc.status.INVALID_ARGUMENT, /items\[0\]\.min_k_percent/],
      ['ScoreRolling', { items: [{}] }, grpc.status.INVALID_ARGUMENT, /items\[0\]: set text or token_ids/],
    ];
    for (const [method, req, code, message] of cases) {
      const err = await call(method, req).catch((e) => e);
      expect(err.code, `${method} ${JSON.stringify(req)}`).toBe(code);
      expect(err.details).toMatch(message);
    }
    const ok = await call('Score', { items: [{ contextText: 'a', continuationsText: [' b'] }] });
    expect(ok.items[0].continuations[0].numTokens).toBeGreaterThan(0);
  });

  it('streams answers by item id, with per-item errors, and ends after the last', async () => {
    const stream = client.ScoreStream();
    const answers: any[] = [];
    const done = new Promise<void>((resolve, reject) => {
      stream.on('data', (m: any) => answers.push(m));
      stream.on('end', resolve);
      stream.on('error', reject);
    });
    stream.write({ item: { id: 's1', contextText: 'User: Hi', continuationsText: [' Bot: hello', ' Bot: bye'] } });
    stream.write({ model: 'gpt2', item: { id: 's2', contextIds: { ids: [5, 6] }, continuationsIds: [{ ids: [7] }] } });
    stream.write({ item: { id: 'bad', contextText: 'x', continuationsText: [''] } });
    stream.write({ model: 'nope', item: { id: 'lost', contextText: 'x', continuationsText: ['y'] } });
    stream.end();
    await done;
    const byId = new Map(answers.map((a) => [a.item.id, a]));
    expect([...byId.keys()].sort()).toEqual(['bad', 'lost', 's1', 's2']);
    expect(byId.get('bad').errorCode).toBe(grpc.status.INVALID_ARGUMENT);
    expect(byId.get('bad').errorMessage).toMatch(/message 2\.item\.continuations\[0\]: continuation is empty/);
    expect(byId.get('lost').errorCode).toBe(grpc.status.NOT_FOUND);
    const [s1] = await directScoring(llama.scorer).loglikelihood([{ context: 'User: Hi', continuations: [' Bot: hello', ' Bot: bye'] }]);
    byId.get('s1').item.continuations.forEach((c: any, j: number) => expect(Math.abs(c.logprob - s1![j]!.logprob)).toBeLessThan(1e-5));
    expect(byId.get('s2').model).toBe('gpt2');
    expect(byId.get('s2').item.continuations[0].tokenIds).toEqual([7]);
  });

  it('200 concurrent clients get the answers each item gets alone', async () => {
    const r = rng(99);
    const shared = [
      "Knowledge: The tower was built for the 1889 World's Fair. User: When was it built? Bot:",
      'Instruction: choose the best response.',
    ];
    const jobs = Array.from({ length: 200 }, (_, i) => {
      const kind = i % 4;
      const n = 1 + Math.floor(r() * 3);
      if (kind === 0)
        return {
          stream: false,
          item: { id: `t${i}`, contextText: shared[i % 2]!, continuationsText: Array.from({ length: n }, (_, k) => ` answer ${i} ${k}`) },
        };
      if (kind === 1)
        return {
          stream: false,
          item: { id: `d${i}`, contextText: `User: question number ${i}? Bot:`, continuationsText: [` reply ${i}`] },
        };
      const ctx = Array.from({ length: 3 + (i % 7) }, () => 3 + Math.floor(r() * 280));
      const conts = Array.from({ length: n }, () => ({
        ids: Array.from({ length: 1 + Math.floor(r() * 5) }, () => 3 + Math.floor(r() * 280)),
      }));
      return { stream: kind === 3, item: { id: `i${i}`, contextIds: { ids: kind === 2 ? [1, 2, 3] : ctx }, continuationsIds: conts } };
    });
    const clients = jobs.map(() => scoringClient(server.port));
    const before = await scrape(server.metricsPort!);
    const answers = await Promise.all(
      jobs.map(async (job, i) => {
        if (!job.stream) return (await unary(clients[i], 'Score', { items: [job.item] })).items[0];
        const stream = clients[i].ScoreStream();
        const got = new Promise<any>((resolve, reject) => {
          stream.on('data', (m: any) => resolve(m.item));
          stream.on('error', reject);
        });
        stream.write({ item: job.item });
        stream.end();
        return got;
      }),
    );
    clients.forEach((c) => c.close());
    const after = await scrape(server.metricsPort!);
    let items = 0;
    let tokens = 0;
    for (const [i, job] of jobs.entries()) {
      const got = answers[i];
      expect(got.id).toBe(job.item.id);
      const it: any = job.item;
      const [alone] = await directScoring(llama.scorer).loglikelihood([
        it.contextText !== undefined
          ? { context: it.contextText, continuations: it.continuationsText }
          : { context: it.contextIds.ids, continuations: it.continuationsIds.map((c: any) => c.ids) },
      ]);
      expect(got.continuations).toHaveLength(alone!.length);
      got.continuations.forEach((c: any, j: number) => {
        expect(c.tokenIds).toEqual(alone![j]!.tokenIds);
        c.tokenLogprobs.forEach((lp: number, k: number) => expect(Math.abs(lp - alone![j]!.tokenLogprobs[k]!)).toBeLessThan(1e-5));
        items++;
        tokens += c.numTokens;
      });
    }
    const delta = (name: string) => (after.get(name) ?? 0) - (before.get(name) ?? 0);
    expect(delta('ctxprobe_items_scored_total{model="llama"}')).toBe(items);
    expect(delta('ctxprobe_tokens_scored_total{model="llama"}')).toBe(tokens);
    expect(delta('ctxprobe_requests_total{method="Score",code="OK"}')).toBe(jobs.filter((j) => !j.stream).length);
    expect(delta('ctxprobe_requests_total{method="ScoreStream",code="OK"}')).toBe(jobs.filter((j) => j.stream).length);
    // Batching happened: fewer rounds than requests.
    expect(delta('ctxprobe_batch_size_count{model="llama"}')).toBeLessThan(jobs.length);
    expect(after.get('ctxprobe_queued_items{model="llama"}')).toBe(0);
    expect(after.get('process_resident_memory_bytes')).toBeGreaterThan(0);
  });

  it('serves health and reflection', async () => {
    const health = healthClient(server.port);
    const res = await unary(health, 'Check', { service: 'ctxprobe.v1.Scoring' });
    expect(res.status).toBe('SERVING');
    health.close();
    const reflection = reflectionClient(server.port);
    const stream = reflection.ServerReflectionInfo();
    const listed = new Promise<any>((resolve, reject) => {
      stream.on('data', resolve);
      stream.on('error', reject);
    });
    stream.write({ list_services: '' });
    const services = (await listed).list_services_response.service.map((s: any) => s.name);
    stream.end();
    reflection.close();
    expect(services).toContain('ctxprobe.v1.Scoring');
    expect(services).toContain('grpc.health.v1.Health');
  });
});

describe('bytes a client library would not send', () => {
  it('refuses invalid UTF-8 in a string field, naming it, where protobuf would decode U+FFFD', async () => {
    const { def } = loadPackage();
    const method = (def['ctxprobe.v1.Scoring'] as any).Score;
    const encoded: Buffer = method.requestSerialize({ items: [{ id: 'x', contextText: 'Hello QQQQ', continuationsText: [' world'] }] });
    const at = encoded.indexOf('QQQQ');
    encoded.fill(0xff, at, at + 4); // never valid UTF-8
    const raw = new grpc.Client(`127.0.0.1:${server.port}`, grpc.credentials.createInsecure());
    const err: any = await new Promise((resolve) =>
      raw.makeUnaryRequest(
        '/ctxprobe.v1.Scoring/Score',
        (b: Buffer) => b,
        method.responseDeserialize,
        encoded,
        (e) => resolve(e),
      ),
    );
    raw.close();
    expect(err.code).toBe(grpc.status.INVALID_ARGUMENT);
    expect(err.details).toMatch(/^items\[0\]\.context_text: is not valid UTF-8/);
  });

  it('refuses a NaN min_k_percent instead of using 20', async () => {
    const err = await unary(client, 'ScoreRolling', { items: [{ text: 'Once upon a time', minKPercent: NaN }] }).catch((e) => e);
    expect(err.code).toBe(grpc.status.INVALID_ARGUMENT);
    expect(err.details).toMatch(/^items\[0\]\.min_k_percent: must be in \(0, 100\]/);
  });
});
