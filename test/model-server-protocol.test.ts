// The model server protocol of the Gateway API Inference Extension (what an endpoint picker
// scores pods by): requests waiting, requests running, KV-cache use from 0 to 1, and the
// cache_config_info block size and count — each read from /metrics of a real server while
// real load runs through it, over HTTP (OpenAI completions with string prompts, as the
// harness sends them with tokenized_requests=False) and gRPC alike. Waiting means what
// vLLM's num_requests_waiting means: requests the scheduler has no room for in its next
// round (its token budget is spent before their turn), not every request between rounds.
import fs from 'node:fs';
import * as grpc from '@grpc/grpc-js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadPackage } from '../src/grpc/proto.js';
import { Batcher } from '../src/core/batcher.js';
import type { Scorer } from '../src/core/scorer.js';
import type { Unit, UnitScore } from '../src/core/units.js';
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
    // A small pass and round (32 tokens: one link of one prompt), so that a burst of
    // requests fills the scheduler: each round takes one request, the rest wait.
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
    // Full: 24 prompts of more than a round's tokens each queue at once; a round takes one
    // request's link, so the running round's request and the next round's run, the rest wait.
    expect(Math.max(...samples.map((s) => s.waiting))).toBeGreaterThan(10);
    expect(Math.max(...samples.map((s) => s.running))).toBeGreaterThan(0);
    for (const s of samples) expect(s.running).toBeLessThanOrEqual(2);
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
      expect(Math.max(...samples.map((s) => s.waiting))).toBeGreaterThan(10);
      expect(Math.max(...samples.map((s) => s.running))).toBeGreaterThan(0);
      for (const s of samples) expect(s.running).toBeLessThanOrEqual(2);
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

describe('requests that fit one round wait for nothing', () => {
  // A round of 4096 tokens, and a delay long enough that the requests sit in the queue
  // (between rounds, and while one runs) when scraped: the next round takes all of them,
  // so they run, and none waits — the scheduler is not full.
  let server: CtxprobeServer;
  beforeAll(async () => {
    const model = await loadModel({ name: MODEL, path: makeFixture(FAMILY_FIXTURES.llama!).dir, threads: 1 });
    server = await CtxprobeServer.start({ port: 0, metricsPort: 0, httpPort: 0, batcher: { maxRoundTokens: 4096, maxQueueDelayMs: 50 } });
    server.addModel(model);
    server.setServing();
  });
  afterAll(async () => server?.close());

  it('a few concurrent requests over HTTP and gRPC: running, never waiting', async () => {
    const base = `http://127.0.0.1:${server.httpPort}`;
    const samples: Gauges[] = [];
    let done = false;
    const client = scoringClient(server.port);
    try {
      const work = Promise.all([
        ...Array.from({ length: 3 }, (_, i) =>
          postJson(base, '/v1/completions', {
            model: MODEL,
            prompt: `User ${i}: a short one.\nBot: yes`,
            max_tokens: 0,
            logprobs: 1,
            echo: true,
          }),
        ),
        unary(client, 'Score', {
          model: MODEL,
          items: [{ contextText: 'User: and one more.\nBot:', continuationsText: [' sure.', ' no.'] }],
        }),
      ]).finally(() => (done = true));
      while (!done) {
        const m = await scrape(server.metricsPort!);
        samples.push({
          waiting: m.get(at('ctxprobe_requests_waiting'))!,
          running: m.get(at('ctxprobe_requests_running'))!,
          kv: m.get(at('ctxprobe_kv_cache_usage_ratio'))!,
        });
      }
      const answers = await work;
      for (const r of answers.slice(0, 3) as Awaited<ReturnType<typeof postJson>>[]) expect(r.status, r.text).toBe(200);
    } finally {
      client.close();
    }
    expect(Math.max(...samples.map((s) => s.running))).toBeGreaterThan(0);
    for (const s of samples) expect(s.waiting).toBe(0);
    for (const s of samples) expect(s.running).toBeLessThanOrEqual(4);
  });
});

describe('the rule: running = the running round and what the next one takes, waiting = the rest', () => {
  /** A scorer that holds each round until let go, and records the units it was given. */
  function heldScorer() {
    const rounds: Unit[][] = [];
    const holds: (() => void)[] = [];
    const scorer = {
      maxBatchTokens: 1000,
      cache: undefined,
      kvUse: () => ({ bytes: 0, budgetBytes: 1, bytesPerToken: 1 }),
      scoreUnits: async (units: readonly Unit[]) => {
        rounds.push([...units]);
        await new Promise<void>((resolve) => holds.push(resolve));
        const work = { tokensComputed: 0, tokensRequested: 0, tokensReused: 0 };
        return { scores: units.map(() => ({ logprobs: [], greedy: [] }) as UnitScore), work };
      },
    };
    const release = async () => {
      while (holds.length === 0) await new Promise((r) => setTimeout(r, 1));
      holds.shift()!();
    };
    return { scorer: scorer as unknown as Scorer, rounds, release };
  }
  /** A unit of `n` tokens, tagged by its first token. */
  const unit = (tag: number, n: number): Unit => ({ prefix: [tag], tail: Array(n - 1).fill(0), targets: Array(n - 1).fill(0), topK: 0 });
  const tags = (units: Unit[]) => units.map((u) => u.prefix[0]);
  const state = (b: Batcher) => ({ waiting: b.requestsWaiting, running: b.requestsRunning });

  it('counts as running exactly the requests the next round then takes (shares of maxRoundTokens)', async () => {
    const { scorer, rounds, release } = heldScorer();
    // A round of 100 tokens; below that, a round starts once the oldest request waited 20 ms.
    const b = new Batcher('m', scorer, { maxRoundTokens: 100, maxQueueDelayMs: 20 });
    const nextRound = async (n: number) => {
      await release();
      while (rounds.length < n) await new Promise((r) => setTimeout(r, 1));
      return tags(rounds[n - 1]!);
    };
    // 90 tokens queued, under a round's worth: no round yet, and the next takes all three.
    const results = [1, 2, 3].map((t) => b.submit([unit(t, 30)]).result);
    expect(rounds).toHaveLength(0);
    expect(state(b)).toEqual({ waiting: 0, running: 3 });
    // A fourth makes a round's worth: the round starts at once with 1–3 (the fourth would
    // take it past 100). The fourth waits for nothing: the next round takes it.
    results.push(b.submit([unit(4, 30)]).result);
    expect(rounds.map(tags)).toEqual([[1, 2, 3]]);
    expect(state(b)).toEqual({ waiting: 0, running: 4 });
    // Five more while it runs: the next round's 100 tokens hold 4, 5 and 6; 7–9 wait.
    for (const t of [5, 6, 7, 8, 9]) results.push(b.submit([unit(t, 30)]).result);
    expect(state(b)).toEqual({ waiting: 3, running: 6 });
    expect(await nextRound(2)).toEqual([4, 5, 6]);
    expect(state(b)).toEqual({ waiting: 0, running: 6 }); // 4–6 run, the next takes 7–9
    // A request of six units of 20: its first would take the next round past 100: it waits.
    results.push(b.submit([10, 11, 12, 13, 14, 15].map((t) => unit(t, 20))).result);
    expect(state(b)).toEqual({ waiting: 1, running: 6 });
    expect(await nextRound(3)).toEqual([7, 8, 9]);
    expect(state(b)).toEqual({ waiting: 0, running: 4 }); // 7–9 run, the next takes 10–14
    // Two small ones join it: the next round's share is 100 / 3 = 34 each, one unit of the
    // large one (a second would pass its share) and both small ones; a third small one is
    // past the round's tokens and waits.
    for (const t of [21, 22]) results.push(b.submit([unit(t, 30)]).result);
    expect(state(b)).toEqual({ waiting: 0, running: 6 });
    results.push(b.submit([unit(23, 30)]).result);
    expect(state(b)).toEqual({ waiting: 1, running: 6 });
    expect(await nextRound(4)).toEqual([10, 21, 22]);
    // Served requests go to the back: the next round is 23, then two units of the large one
    // (its share of 100 / 2).
    expect(state(b)).toEqual({ waiting: 0, running: 4 });
    expect(await nextRound(5)).toEqual([23, 11, 12]);
    expect(await nextRound(6)).toEqual([13, 14, 15]);
    await release();
    await Promise.all(results);
    await b.idle();
    expect(state(b)).toEqual({ waiting: 0, running: 0 });
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
