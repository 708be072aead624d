// Health across start and drain; deadlines, cancellation and a full queue free the queue.
import * as grpc from '@grpc/grpc-js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadModel, type LoadedModel } from '../src/serving/repository.js';
import { CtxprobeServer } from '../src/server.js';
import { FAMILY_FIXTURES, makeFixture } from './fixtures.js';
import { healthClient, scoringClient, scrape, unary } from './helpers.js';

let model: LoadedModel;
beforeAll(async () => {
  model = await loadModel({ name: 'm', path: makeFixture(FAMILY_FIXTURES.mistral!).dir, threads: 1 });
});
afterAll(async () => model?.engine.release());

const item = (id: string) => ({ id, contextText: 'User: Who designed it? Bot:', continuationsText: [' Gustave Eiffel.'] });
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
/** Wait until `cond` holds (polled; at most 10 s, so a busy machine only slows it down). */
async function until(cond: () => boolean): Promise<void> {
  for (let t = 0; t < 1000 && !cond(); t++) await sleep(10);
}

describe('health', () => {
  it('goes NOT_SERVING → SERVING → NOT_SERVING across loading and draining, finishing queued work', async () => {
    // A long queue delay holds requests in the queue while the drain starts.
    const server = await CtxprobeServer.start({ port: 0, metricsPort: -1, batcher: { maxQueueDelayMs: 300, maxRoundTokens: 1 << 20 } });
    const health = healthClient(server.port);
    const client = scoringClient(server.port);
    const status = async () => (await unary(health, 'Check', { service: '' })).status;
    expect(await status()).toBe('NOT_SERVING');
    const early = await unary(client, 'Score', { items: [item('early')] }).catch((e) => e);
    expect(early.code).toBe(grpc.status.UNAVAILABLE);
    expect(early.details).toMatch(/still loading/);

    server.addModel({ ...model, entry: { ...model.entry } });
    server.setServing();
    expect(await status()).toBe('SERVING');

    const queued = unary(client, 'Score', { items: [item('queued')] });
    await until(() => server.models.get('m')!.batcher.queuedItems === 1);
    expect(server.models.get('m')!.batcher.queuedItems).toBe(1);
    const draining = server.drain();
    expect(await status()).toBe('NOT_SERVING');
    const refused = await unary(client, 'Score', { items: [item('late')] }).catch((e) => e);
    expect(refused.code).toBe(grpc.status.UNAVAILABLE);
    const answer = await queued;
    expect(answer.items[0].id).toBe('queued');
    expect(answer.items[0].continuations[0].numTokens).toBeGreaterThan(0);
    await draining;
    client.close();
    health.close();
  });
});

describe('dropping work', () => {
  let server: CtxprobeServer;
  let client: any;
  beforeAll(async () => {
    server = await CtxprobeServer.start({
      port: 0,
      metricsPort: 0,
      batcher: { maxQueueDelayMs: 200, maxRoundTokens: 1 << 20, maxQueuedTokens: 200 },
    });
    server.addModel(model);
    server.setServing();
    client = scoringClient(server.port);
  });
  afterAll(async () => {
    client?.close();
    await server?.drain();
  });
  const queued = () => server.models.get('m')!.batcher.queuedItems;

  it('an expired deadline answers DEADLINE_EXCEEDED and leaves the queue', async () => {
    const err = await unary(client, 'Score', { items: [item('slow')] }, { deadline: Date.now() + 50 }).catch((e) => e);
    expect(err.code).toBe(grpc.status.DEADLINE_EXCEEDED);
    await until(() => queued() === 0);
    expect(queued()).toBe(0);
    // (Never set if the call expired before it reached the queue.)
    const metrics = await scrape(server.metricsPort!);
    expect(metrics.get('ctxprobe_queued_items{model="m"}') ?? 0).toBe(0);
  });

  it('a cancelled call leaves the queue before its round', async () => {
    const call = client.Score({ items: [item('cancel-me')] }, () => {});
    await until(() => queued() === 1);
    expect(queued()).toBe(1);
    call.cancel();
    await until(() => queued() === 0);
    expect(queued()).toBe(0);
    const ok = await unary(client, 'Score', { items: [item('after')] });
    expect(ok.items[0].id).toBe('after');
  });

  it('a request larger than the queue can hold answers RESOURCE_EXHAUSTED, saying it never fits (not that the queue is full)', async () => {
    const big = { id: 'big', contextText: 'word '.repeat(60), continuationsText: [' x', ' y', ' z', ' w'] };
    const err = await unary(client, 'Score', { items: [big] }).catch((e) => e);
    expect(err.code).toBe(grpc.status.RESOURCE_EXHAUSTED);
    expect(err.details).toMatch(/^items: \d+ tokens to compute, more than the queue of model m holds \(\d+, --max-queued-tokens\): send it in parts/);
    expect(queued()).toBe(0);
  });
});

describe('a session thread that dies', () => {
  it('turns health NOT_SERVING on both health services and refuses work with UNAVAILABLE, and the server is told', async () => {
    const own = await loadModel({ name: 'lost', path: makeFixture(FAMILY_FIXTURES.llama!).dir, threads: 1 });
    let lost: [string, string] | undefined;
    const server = await CtxprobeServer.start({ port: 0, metricsPort: -1, healthPort: 0, onModelLost: (m, err) => (lost = [m, err.message]) });
    server.addModel(own);
    server.setServing();
    const client = scoringClient(server.port);
    const status = async (port: number) => (await unary(healthClient(port), 'Check', { service: 'ctxprobe.v1.Scoring' })).status;
    expect((await unary(client, 'Score', { items: [item('before')] })).items[0].continuations).toHaveLength(1);
    expect([await status(server.port), await status(server.healthPort!)]).toEqual(['SERVING', 'SERVING']);
    own.engine.exitHostForTest();
    while (!lost) await sleep(10);
    expect(lost).toEqual(['lost', expect.stringMatching(/session host stopped \(exit code 3\)/)]);
    // The health port hears of it through a message to its thread.
    for (let i = 0; i < 500 && (await status(server.healthPort!)) !== 'NOT_SERVING'; i++) await sleep(10);
    expect([await status(server.port), await status(server.healthPort!)]).toEqual(['NOT_SERVING', 'NOT_SERVING']);
    const after = await unary(client, 'Score', { items: [item('after')] }).catch((e) => e);
    expect(after.code).toBe(grpc.status.UNAVAILABLE);
    expect(after.details).toMatch(/model lost cannot run: the session host stopped/);
    client.close();
    server.forceClose();
  });
});
