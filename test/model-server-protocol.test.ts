// The model server protocol of the Gateway API Inference Extension (what an endpoint picker
// scores pods by): requests waiting, requests running, KV-cache use from 0 to 1, and the
// cache_config_info block size and count — each read from /metrics of a real server while
// real load runs through it, over HTTP (OpenAI completions with string prompts, as the
// harness sends them with tokenized_requests=False) and gRPC alike.
import fs from 'node:fs';
import * as grpc from '@grpc/grpc-js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadPackage } from '../src/grpc/proto.js';
import { loadModel, type LoadedModel } from '../src/serving/repository.js';
import { CtxprobeServer } from '../src/server.js';
import { KV_BLOCK_TOKENS } from '../src/serving/metrics.js';
import { FAMILY_FIXTURES, makeFixture, tempDir } from './fixtures.js';
import { makeCertificates } from './certs.js';
import { postJson, scoringClient, scrape, unary } from './helpers.js';

const MODEL = 'm';
const at = (name: string, labels = `model="${MODEL}"`) => `${name}{${labels}}`;

interface Gauges {
  waiting: number;
  running: number;
  kv: number;
}

describe('model server protocol gauges', () => {
  let model: LoadedModel;
  let server: CtxprobeServer;
  let base: string;
  beforeAll(async () => {
    // A small pass and round, so that a burst of requests fills the scheduler and waits.
    model = await loadModel({ name: MODEL, path: makeFixture(FAMILY_FIXTURES.llama!).dir, threads: 1, maxBatchTokens: 32 });
    server = await CtxprobeServer.start({ port: 0, metricsPort: 0, httpPort: 0, batcher: { maxRoundTokens: 32, maxQueueDelayMs: 1 } });
    server.addModel(model);
    server.setServing();
    base = `http://127.0.0.1:${server.httpPort}`;
  });
  afterAll(async () => server?.close());

  const gauges = async (): Promise<Gauges> => {
    const m = await scrape(server.metricsPort!);
    return {
      waiting: m.get(at('ctxprobe_requests_waiting'))!,
      running: m.get(at('ctxprobe_requests_running'))!,
      kv: m.get(at('ctxprobe_kv_cache_usage_ratio'))!,
    };
  };

  /** Scrape while `load` runs: every sample, then the gauges once it has finished. */
  async function watch(load: () => Promise<unknown>): Promise<{ samples: Gauges[]; after: Gauges }> {
    const samples: Gauges[] = [];
    let done = false;
    const work = load().finally(() => (done = true));
    while (!done) samples.push(await gauges());
    await work;
    return { samples, after: await gauges() };
  }

  // Distinct texts of a few dozen tokens: each request its own prefix in the cache.
  const prompt = (i: number, turn = 0) =>
    `User ${i}: tell me about tower number ${i * 7 + turn}.\nBot: It was built in ${1800 + i} for the fair`;

  it('start idle: nothing waits or runs, no KV is held; the info gauge gives the block size and the budget in blocks', async () => {
    expect(await gauges()).toEqual({ waiting: 0, running: 0, kv: 0 });
    const m = await scrape(server.metricsPort!);
    const scorer = model.scorer;
    const perToken = model.engine.kvBytesPerToken;
    // The budget: the prefix cache's, plus one pass's past bound and new positions.
    const budget = scorer.cache!.budget + scorer.maxPastBytes + scorer.maxBatchTokens * perToken;
    const blocks = Math.floor(budget / (KV_BLOCK_TOKENS * perToken));
    expect(m.get(at('ctxprobe_cache_config_info', `model="${MODEL}",block_size="${KV_BLOCK_TOKENS}",num_gpu_blocks="${blocks}"`))).toBe(1);
    expect([...m.keys()].filter((k) => k.startsWith('ctxprobe_cache_config_info{'))).toHaveLength(1);
  });

  it('HTTP string prompts: requests wait while the scheduler is full, run, fill the KV cache (at most 1), and leave it idle', async () => {
    const before = await gauges();
    const requests = Array.from({ length: 24 }, (_, i) =>
      postJson(base, '/v1/completions', { model: MODEL, prompt: prompt(i), max_tokens: 0, logprobs: 1, echo: true, temperature: 0 }),
    );
    const { samples, after } = await watch(async () => {
      for (const r of await Promise.all(requests)) expect(r.status, r.text).toBe(200);
    });
    expect(Math.max(...samples.map((s) => s.waiting))).toBeGreaterThan(0);
    expect(Math.max(...samples.map((s) => s.running))).toBeGreaterThan(0);
    // One round at a time: never more running than the burst, never more waiting either.
    for (const s of samples) expect(s.waiting + s.running).toBeLessThanOrEqual(24);
    for (const s of [...samples, after]) expect(s.kv >= 0 && s.kv <= 1, `kv ${s.kv}`).toBe(true);
    expect(after.waiting).toBe(0);
    expect(after.running).toBe(0);
    // The prompts' KV stays in the prefix cache: use rose, and is what the cache holds.
    expect(after.kv).toBeGreaterThan(before.kv);
    const { bytes, budgetBytes } = model.scorer.kvUse();
    expect(bytes).toBe(model.scorer.cache!.bytes); // no pass runs now
    expect(after.kv).toBeCloseTo(bytes / budgetBytes, 12);
  });

  it('gRPC Score: the same gauges move the same way, and more cached prefixes hold more KV', async () => {
    const before = await gauges();
    const client = scoringClient(server.port);
    try {
      const calls = Array.from({ length: 24 }, (_, i) =>
        unary(client, 'Score', {
          model: MODEL,
          items: [{ contextText: prompt(100 + i), continuationsText: [' and it still stands.', ' by a bot.'] }],
        }),
      );
      const { samples, after } = await watch(() => Promise.all(calls));
      expect(Math.max(...samples.map((s) => s.waiting))).toBeGreaterThan(0);
      expect(Math.max(...samples.map((s) => s.running))).toBeGreaterThan(0);
      for (const s of [...samples, after]) expect(s.kv).toBeLessThanOrEqual(1);
      expect(after).toMatchObject({ waiting: 0, running: 0 });
      expect(after.kv).toBeGreaterThan(before.kv);
    } finally {
      client.close();
    }
  });

  it('a cancelled request leaves neither gauge counting it', async () => {
    const controller = new AbortController();
    const requests = Array.from({ length: 12 }, (_, i) =>
      fetch(`${base}/v1/completions`, {
        method: 'POST',
        headers: { 'Content-Type': 'application/json' },
        body: JSON.stringify({ model: MODEL, prompt: prompt(200 + i), max_tokens: 0, logprobs: 1, echo: true }),
        signal: controller.signal,
      }).catch(() => undefined),
    );
    await new Promise((r) => setTimeout(r, 5));
    controller.abort();
    await Promise.all(requests);
    // The server may have admitted some before the clients went: they leave (cancelled or
    // answered to no one) and the gauges go back to idle.
    const deadline = Date.now() + 10_000;
    let now = await gauges();
    while ((now.waiting > 0 || now.running > 0) && Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, 10));
      now = await gauges();
    }
    expect(now).toMatchObject({ waiting: 0, running: 0 });
  });
});

describe('KV-cache use under a small prefix cache budget', () => {
  let server: CtxprobeServer;
  beforeAll(async () => {
    const path = makeFixture(FAMILY_FIXTURES.llama!).dir;
    // Room for about two prompts' KV: the cache evicts, and passes run over its budget.
    const probe = await loadModel({ name: MODEL, path, threads: 1 });
    const prefixCacheBytes = 64 * probe.engine.kvBytesPerToken;
    await probe.engine.release();
    const model = await loadModel({ name: MODEL, path, threads: 1, maxBatchTokens: 32, prefixCacheBytes });
    server = await CtxprobeServer.start({ port: 0, metricsPort: 0, httpPort: 0, batcher: { maxRoundTokens: 64, maxQueueDelayMs: 1 } });
    server.addModel(model);
    server.setServing();
  });
  afterAll(async () => server?.close());

  it('stays within 0 and 1 while the cache evicts', async () => {
    const base = `http://127.0.0.1:${server.httpPort}`;
    const seen: number[] = [];
    let done = false;
    const work = Promise.all(
      Array.from({ length: 16 }, (_, i) =>
        postJson(base, '/v1/completions', { model: MODEL, prompt: `Dialogue ${i}: `.repeat(3), max_tokens: 0, logprobs: 1, echo: true }),
      ),
    ).finally(() => (done = true));
    while (!done) seen.push((await scrape(server.metricsPort!)).get(at('ctxprobe_kv_cache_usage_ratio'))!);
    for (const r of await work) expect(r.status, r.text).toBe(200);
    const evictions = (await scrape(server.metricsPort!)).get(at('ctxprobe_prefix_cache_evictions_total'))!;
    expect(evictions).toBeGreaterThan(0);
    expect(seen.length).toBeGreaterThan(0);
    for (const kv of seen) expect(kv >= 0 && kv <= 1, `kv ${kv}`).toBe(true);
  });
});

describe('--http-plaintext: behind a gateway that routes to an InferencePool', () => {
  // The InferencePool API reaches its endpoints over plaintext HTTP/1.1 (or h2c); the
  // Gateway carries TLS to the clients. gRPC keeps its TLS, and tokens still apply.
  const TOKEN = 'gateway-test-token-0123456789';
  let server: CtxprobeServer;
  let certs: ReturnType<typeof makeCertificates>;
  beforeAll(async () => {
    certs = makeCertificates(tempDir('certs'));
    const model = await loadModel({ name: MODEL, path: makeFixture(FAMILY_FIXTURES.llama!).dir, threads: 1 });
    server = await CtxprobeServer.start({
      port: 0,
      metricsPort: 0,
      httpPort: 0,
      tls: { cert: certs.serverCert, key: certs.serverKey },
      httpPlaintext: true,
      authTokens: [TOKEN],
    });
    server.addModel(model);
    server.setServing();
  });
  afterAll(async () => server?.close());

  it('answers plaintext HTTP with a token, refuses it without one; gRPC still needs TLS', async () => {
    const body = JSON.stringify({ model: MODEL, prompt: 'User: hi\nBot: hello', max_tokens: 0, logprobs: 1, echo: true });
    const url = `http://127.0.0.1:${server.httpPort}/v1/completions`;
    const headers = { 'Content-Type': 'application/json' };
    expect((await fetch(url, { method: 'POST', headers, body })).status).toBe(401);
    const ok = await fetch(url, { method: 'POST', headers: { ...headers, authorization: `Bearer ${TOKEN}` }, body });
    expect(ok.status).toBe(200);
    const { v1 } = loadPackage();
    const call = (creds: grpc.ChannelCredentials) =>
      new Promise<unknown>((resolve, reject) => {
        const client: any = new v1.Scoring(`localhost:${server.port}`, creds);
        const md = new grpc.Metadata();
        md.set('authorization', `Bearer ${TOKEN}`);
        client.ListModels({}, md, { deadline: Date.now() + 3000 }, (err: Error | null, res: unknown) => {
          client.close();
          if (err) reject(err);
          else resolve(res);
        });
      });
    await expect(call(grpc.credentials.createInsecure())).rejects.toThrow();
    await expect(call(grpc.credentials.createSsl(fs.readFileSync(certs.ca)))).resolves.toBeTruthy();
  });
});
