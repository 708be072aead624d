// Fair scheduling: a large request shares every round with the small ones behind it (it
// cannot hold them for more than a round of a few passes), a unit longer than a pass runs
// in links across rounds and gives the same bits as in one piece, and a request that can
// never fit the queue is told so instead of being told to retry.
import { describe, expect, it } from 'vitest';
import { Batcher, type SchedulerMetrics } from '../src/core/batcher.js';
import { Scorer } from '../src/core/scorer.js';
import { linksOf } from '../src/core/links.js';
import { TooLargeError, OverloadedError } from '../src/common/errors.js';
import type { Unit, UnitScore } from '../src/core/units.js';
import { familyEngine } from './fixtures.js';

/** Tokens of a deterministic text of `n` tokens under a vocabulary of `vocab`. */
const tokens = (n: number, seed: number, vocab: number) =>
  Array.from({ length: n }, (_, i) => (seed * 31 + i * 7 + ((i * i) % 13)) % vocab);

/** A unit scoring every token after the first of `seq`, with `topK` alternatives. */
const rolling = (seq: number[], topK = 0): Unit => ({ prefix: seq.slice(0, 1), tail: seq.slice(1, -1), targets: seq.slice(2), topK });

/** A unit scoring a continuation after a context. */
const continuation = (context: number[], cont: number[], topK = 0): Unit => ({
  prefix: context.slice(0, -1),
  tail: [context.at(-1)!, ...cont.slice(0, -1)],
  targets: cont,
  topK,
});

/** Rounds as the scheduler reports them: the units each took. */
function roundLog(): { rounds: number[]; metrics: SchedulerMetrics } {
  const rounds: number[] = [];
  const none = { inc: () => {}, dec: () => {}, observe: () => {} };
  const metrics: SchedulerMetrics = {
    unitsQueued: none,
    unitsInFlight: none,
    queueWaitSeconds: none,
    batchUnits: { observe: (_l, v) => rounds.push(v) },
    batchTokens: none,
    forwardSeconds: none,
    tokensComputed: none,
    tokensRequested: none,
    cacheTokensReused: none,
    cacheEvictions: none,
    watchCache: () => {},
  };
  return { rounds, metrics };
}

/** What a unit answers (numbers compare exactly: the same bits). */
const bits = (s: UnitScore) => ({ logprobs: s.logprobs, greedy: s.greedy, topK: s.topK });

describe('fair scheduling', () => {
  const ctx = familyEngine('llama');

  it('a unit longer than a pass runs in links across rounds and answers with the bits of one piece', async () => {
    const { engine } = ctx;
    const vocab = engine.config.vocabSize;
    const seq = tokens(60, 3, vocab);
    const units = [rolling(seq, 3), continuation(seq.slice(0, 50), seq.slice(50), 2)];
    // One piece: no cache, no links, one round.
    const whole = await new Scorer(engine, { prefixSharing: false }).scoreUnits(units);
    const { rounds, metrics } = roundLog();
    const linked = new Batcher('m', new Scorer(engine, { maxBatchTokens: 8 }), {}, metrics);
    expect(linksOf(units[0]!, linked.linkTokens)).toHaveLength(8); // 59 positions in links of 8
    const scores = await linked.submit(units).result;
    expect(scores.map(bits)).toEqual(whole.scores.map(bits));
    expect(rounds.length).toBeGreaterThanOrEqual(8); // a link a round, each after the last
  });

  it('a small request answers within a round or two of a large one that was queued first', async () => {
    const { engine } = ctx;
    const vocab = engine.config.vocabSize;
    const { rounds, metrics } = roundLog();
    const batcher = new Batcher('m', new Scorer(engine, { maxBatchTokens: 32 }), {}, metrics);
    // 120 variants of 24 tokens: 2880 tokens, 23 rounds of 128.
    const large = Array.from({ length: 120 }, (_, i) => rolling(tokens(24, 100 + i, vocab)));
    const order: string[] = [];
    const bigDone = batcher.submit(large).result.then(() => order.push('large'));
    const smallRound = new Promise<number>((resolve) =>
      setTimeout(() => {
        const at = rounds.length;
        void batcher.submit([rolling(tokens(10, 7, vocab))]).result.then(() => (order.push('small'), resolve(rounds.length - at)));
      }, 0),
    );
    const waited = await smallRound;
    await bigDone;
    expect(order).toEqual(['small', 'large']);
    // The round running when it came, and the one that took it.
    expect(waited).toBeLessThanOrEqual(2);
    expect(rounds.length).toBeGreaterThan(10);
  });

  it('a small request answers while a long unit runs in links', async () => {
    const { engine } = ctx;
    const vocab = engine.config.vocabSize;
    const batcher = new Batcher('m', new Scorer(engine, { maxBatchTokens: 8 }));
    const order: string[] = [];
    const long = batcher.submit([rolling(tokens(63, 9, vocab))]).result.then(() => order.push('long'));
    await new Promise((r) => setTimeout(r, 0));
    await batcher.submit([rolling(tokens(6, 5, vocab))]).result.then(() => order.push('small'));
    await long;
    expect(order).toEqual(['small', 'long']);
  });

  it('a cancelled chain lets go of its pinned links', async () => {
    const { engine } = ctx;
    const vocab = engine.config.vocabSize;
    const before = await engine.keptPasts(); // other tests' caches hold theirs
    const scorer = new Scorer(engine, { maxBatchTokens: 8, prefixCacheBytes: 0 });
    const batcher = new Batcher('m', scorer);
    const job = batcher.submit([rolling(tokens(63, 11, vocab))]);
    const refused = job.result.catch((e) => e);
    await new Promise((r) => setTimeout(r, 20));
    job.cancel();
    expect(await refused).toMatchObject({ kind: 'cancelled' });
    await batcher.idle();
    // With a budget of 0 the cache holds only pinned KV: none once the chain let go.
    expect(scorer.cache!.stats().bytes).toBe(0);
    expect((await engine.keptPasts()) - before).toBe(0);
  });

  it('a request larger than the queue can ever hold is too large (413), a full queue overloaded (429)', async () => {
    const { engine } = ctx;
    const vocab = engine.config.vocabSize;
    const batcher = new Batcher('m', new Scorer(engine), { maxQueuedTokens: 100, maxQueueDelayMs: 50 });
    const never = await batcher.submit([rolling(tokens(102, 1, vocab))]).result.catch((e) => e);
    expect(never).toBeInstanceOf(TooLargeError);
    expect(never.message).toMatch(/101 tokens to compute, more than the queue of model m holds \(100, --max-queued-tokens\)/);
    const first = batcher.submit([rolling(tokens(60, 2, vocab))]).result;
    const full = await batcher.submit([rolling(tokens(60, 3, vocab))]).result.catch((e) => e);
    expect(full).toBeInstanceOf(OverloadedError);
    await first;
  });
});
