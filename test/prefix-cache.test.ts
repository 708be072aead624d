// The prefix cache: the trie on its own (insert, match, split, pin, evict), and the
// exactness contract through the scorer for every family — an item's answer is
// bit-identical whether its prefix was a hit or a miss, whatever shared its batch and in
// whatever order items came, against each item scored alone with no sharing at all.
import { describe, expect, it } from 'vitest';
import type { Engine } from '../src/engine/engine.js';
import { PrefixCache } from '../src/core/prefix-cache.js';
import { reusableKv, Scorer } from '../src/core/scorer.js';
import type { ContinuationScore, EchoScore } from '../src/requests/scoring.js';
import { rng } from '../src/model/synthetic.js';
import { FAMILY_FIXTURES, familyEngine } from './fixtures.js';
import { referenceTokenLogprobs } from './reference.js';
import { directScoring } from '../src/requests/scoring.js';

function trie(budget: number) {
  const dropped: number[] = [];
  const cache = new PrefixCache(10, budget, (h) => dropped.push(h));
  return { cache, dropped };
}
const entry = (logprob: number) => ({ logprob, greedy: false });

describe('PrefixCache', () => {
  it('matches the longest cached prefix, across a split, with each piece of KV in order', () => {
    const { cache } = trie(1e9);
    cache.release(cache.insert([1, 2, 3, 4, 5], 0, 5, 100, 0, [{ position: 4, target: 6, entry: entry(-1) }])!);
    // [1, 2, 9] splits the first node after two tokens.
    const m0 = cache.match([1, 2]);
    cache.release(cache.insert([1, 2, 9, 9], 2, 2, 101, 0, [])!);
    cache.release(m0);
    const m = cache.match([1, 2, 3, 4, 5, 6]);
    expect(m.depth).toBe(5);
    // The two halves of the split node continue each other in one segment: one piece.
    expect(m.nodes).toHaveLength(2);
    expect(cache.pieces(m, 5)).toEqual([{ handle: 100, offset: 0, count: 5 }]);
    expect(cache.pieces(m, 3)).toEqual([{ handle: 100, offset: 0, count: 3 }]);
    expect(cache.score(m, 4, 6, 0)).toEqual(entry(-1));
    expect(cache.score(m, 4, 7, 0)).toBeUndefined();
    cache.release(m);
    const other = cache.match([1, 2, 9, 9, 9]);
    expect(other.depth).toBe(4);
    expect(cache.pieces(other, 4)).toEqual([
      { handle: 100, offset: 0, count: 2 },
      { handle: 101, offset: 0, count: 2 },
    ]);
    cache.release(other);
    // Bytes count whole segments: 5 + 2 positions of 10 bytes; three nodes.
    expect(cache.stats()).toEqual({ bytes: 70, entries: 3, segments: 2, tokens: 5 + 2, evictions: 0 });
  });

  it('rebases a path grown a node at a time onto the whole copy its last node brings, freeing what it no longer uses', () => {
    const { cache, dropped } = trie(1e9);
    cache.release(cache.insert([1, 2, 3], 0, 3, 100, 0, [])!);
    cache.release(cache.insert([1, 2, 3, 4], 3, 1, 101, 0, [])!);
    // Another path shares [1, 2, 3]: the split keeps segment 100 in use.
    cache.release(cache.insert([1, 2, 7], 2, 1, 102, 0, [])!);
    // Position 4 arrives with a copy of the whole path [1 … 5] (offset 4 in segment 103).
    const m = cache.insert([1, 2, 3, 4, 5], 4, 1, 103, 4, [])!;
    cache.rebase(m);
    expect(cache.pieces(m, 5)).toEqual([{ handle: 103, offset: 0, count: 5 }]);
    cache.release(m);
    // Pieces of the old segments may still be in a running round's hands: freed on settle.
    expect(dropped).toEqual([]);
    cache.settle();
    // Every node of the path moved to 103, the shared [1, 2] too (the same values), so
    // 100 and 101 are unused and freed; 102 ([7], off the path) stays.
    expect(dropped.sort()).toEqual([100, 101]);
    const other = cache.match([1, 2, 7]);
    expect(cache.pieces(other, 3)).toEqual([
      { handle: 103, offset: 0, count: 2 },
      { handle: 102, offset: 0, count: 1 },
    ]);
    cache.release(other);
    expect(cache.stats()).toMatchObject({ bytes: (5 + 1) * 10, segments: 2 });
  });

  it('keeps KV it already holds and drops a segment nobody uses; refuses a path whose prefix is gone', () => {
    const { cache, dropped } = trie(1e9);
    cache.release(cache.insert([1, 2, 3], 0, 3, 100, 0, [])!);
    // The same positions again (a recomputed row): only its scores are new.
    cache.release(cache.insert([1, 2, 3], 1, 2, 101, 0, [{ position: 2, target: 4, entry: entry(-2) }])!);
    expect(dropped).toEqual([101]);
    const m = cache.match([1, 2, 3]);
    expect(cache.score(m, 2, 4, 0)).toEqual(entry(-2));
    cache.release(m);
    // Positions 5.. of a sequence whose [0, 5) is not cached cannot go in.
    expect(cache.insert([7, 7, 7, 7, 7, 7], 5, 1, 102, 0, [])).toBeUndefined();
    expect(dropped).toEqual([101, 102]);
  });

  it('keeps top-k only for as many alternatives as were computed', () => {
    const { cache } = trie(1e9);
    const topK = { ids: [5, 6], logprobs: [-0.1, -0.2] };
    cache.release(cache.insert([1, 2], 0, 2, 100, 0, [{ position: 1, target: 5, entry: entry(-0.1), topK }])!);
    const m = cache.match([1, 2]);
    expect(cache.score(m, 1, 5, 1)?.topK).toEqual({ ids: [5], logprobs: [-0.1] });
    expect(cache.score(m, 1, 5, 2)?.topK).toEqual(topK);
    expect(cache.score(m, 1, 5, 3)).toBeUndefined();
    cache.release(m);
  });

  it('evicts least recently used leaves, never pinned ones, until within the budget', () => {
    const { cache, dropped } = trie(50);
    cache.release(cache.insert([1, 2, 3], 0, 3, 100, 0, [])!); // 30 bytes
    const pinned = cache.insert([4, 5], 0, 2, 101, 0, [])!; // 20 bytes, pinned
    cache.release(cache.insert([6, 7], 0, 2, 102, 0, [])!); // 20 bytes
    // Touch [1, 2, 3]: [6, 7] is now the least recently used unpinned leaf.
    cache.release(cache.match([1, 2, 3]));
    cache.evict();
    expect(dropped).toEqual([102]);
    expect(cache.bytes).toBe(50);
    // Over budget with only [1, 2, 3] unpinned: it goes, the pinned one stays.
    const big = trie(0);
    big.cache.release(big.cache.insert([1, 2, 3], 0, 3, 100, 0, [])!);
    const keep = big.cache.insert([4, 5], 0, 2, 101, 0, [])!;
    big.cache.evict();
    expect(big.dropped).toEqual([100]);
    big.cache.release(keep);
    big.cache.evict();
    expect(big.dropped).toEqual([100, 101]);
    expect(big.cache.stats()).toEqual({ bytes: 0, entries: 0, segments: 0, tokens: 0, evictions: 2 });
    cache.release(pinned);
  });

  it('frees a split segment only when both halves are evicted, and a parent after its children', () => {
    const { cache, dropped } = trie(0);
    const a = cache.insert([1, 2, 3, 4], 0, 4, 100, 0, [])!;
    const at = cache.match([1, 2]);
    const b = cache.insert([1, 2, 8], 2, 1, 101, 0, [])!;
    cache.release(a);
    cache.release(at);
    cache.release(b);
    cache.evict();
    expect(dropped.sort()).toEqual([100, 101]);
    expect(cache.stats()).toEqual({ bytes: 0, entries: 0, segments: 0, tokens: 0, evictions: 3 });
  });
});

function randomTokens(r: () => number, n: number, vocab: number): number[] {
  return Array.from({ length: n }, () => 3 + Math.floor(r() * (vocab - 3)));
}

function shuffled<T>(items: T[], r: () => number): T[] {
  const out = [...items];
  for (let i = out.length - 1; i > 0; i--) {
    const j = Math.floor(r() * (i + 1));
    [out[i], out[j]] = [out[j]!, out[i]!];
  }
  return out;
}

describe('a model whose rotary values depend on the sequence length', () => {
  const ctx = familyEngine('llama');
  it('gets no cache and no sharing: every row runs whole, with the unshared answers', async () => {
    const config = { ...ctx.engine.config, rope: { ...ctx.engine.config.rope!, dependsOnLength: true } };
    const lengthDependent: Engine = Object.create(ctx.engine, { config: { value: config } });
    const scorer = new Scorer(lengthDependent);
    expect(scorer.cache).toBeUndefined();
    expect(() => new Scorer(lengthDependent, { prefixSharing: true })).toThrow(/positions depend on the sequence length/);
    const context = Array.from({ length: 12 }, (_, i) => 5 + i);
    const requests = [{ context, continuations: [[40, 41], [42]] }];
    const prepared = await directScoring(scorer).prepareLoglikelihood(requests);
    const { scores, work } = await scorer.scoreUnits(prepared.units);
    expect(work.tokensComputed).toBe(2 * context.length + 1);
    expect(prepared.finish(scores)).toEqual(await directScoring(new Scorer(ctx.engine, { prefixSharing: false })).loglikelihood(requests));
  });
});

describe('a failure while filling the cache', () => {
  const ctx = familyEngine('llama');

  it("frees the pass's KV: the session thread keeps no more KV than before", async () => {
    const vocab = ctx.engine.config.vocabSize;
    const r = rng(13);
    const scorer = new Scorer(ctx.engine);
    expect(scorer.cache).toBeDefined();
    const before = await ctx.engine.keptPasts();
    // Laying the pass's new KV out for the cache fails (one round trip for every row).
    const gather = ctx.engine.gatherPasts;
    ctx.engine.gatherPasts = async () => {
      throw new Error('gather failed');
    };
    try {
      await expect(directScoring(scorer).loglikelihood([{ context: randomTokens(r, 12, vocab), continuations: [randomTokens(r, 3, vocab)] }])).rejects.toThrow(
        /gather failed/,
      );
    } finally {
      ctx.engine.gatherPasts = gather;
    }
    expect(await ctx.engine.keptPasts()).toBe(before);
  });
});

describe.each(Object.keys(FAMILY_FIXTURES))('%s: exactness contract', (family) => {
  const ctx = familyEngine(family);

  it('answers are bit-identical hit or miss, alone or batched, in any order, at any budget', async () => {
    const vocab = ctx.engine.config.vocabSize;
    const r = rng(11);
    // Few-shot shape: shared demos, then samples, each with continuations; one sample
    // context is the prefix of another's; one item shares nothing. Lengths cross the
    // fixtures' sliding windows.
    const demos = randomTokens(r, 14, vocab);
    const samples = [randomTokens(r, 6, vocab), randomTokens(r, 9, vocab), randomTokens(r, 3, vocab)];
    const items: { context: number[]; continuations: number[][]; topK?: number }[] = [];
    for (const s of samples) for (let k = 0; k < 3; k++) items.push({ context: [...demos, ...s], continuations: [randomTokens(r, 1 + k * 2, vocab)], topK: k });
    items.push({ context: [...demos, ...samples[0]!, ...samples[2]!], continuations: [randomTokens(r, 4, vocab)] });
    items.push({ context: randomTokens(r, 7, vocab), continuations: [randomTokens(r, 5, vocab)] });
    // Whole context as a continuation of the demos: its scored positions are cached by others.
    items.push({ context: demos.slice(0, 5), continuations: [demos.slice(5)] });

    const alone = new Scorer(ctx.engine, { prefixSharing: false });
    const expected: ContinuationScore[] = [];
    for (const item of items) expected.push((await directScoring(alone).loglikelihood([item]))[0]![0]!);
    // The unshared answers are the reference's.
    items.forEach((item, i) => {
      const ref = referenceTokenLogprobs(ctx.fx, [...item.context, ...item.continuations[0]!], item.continuations[0]!.length);
      expected[i]!.tokenLogprobs.forEach((lp, k) => expect(Math.abs(lp - ref.logprobs[k]!)).toBeLessThan(1e-4));
    });

    // One cold round: stretches the items share (the demos, then each sample's context)
    // are computed once; each distinct input position once, at most one more per unit (a
    // row restarts where its own next token's log-prob was not computed).
    const cold = new Scorer(ctx.engine, { minSharedTokens: 2 });
    const prepared = await directScoring(cold).prepareLoglikelihood(items);
    const { work } = await cold.scoreUnits(prepared.units);
    const inputs = prepared.units.map((u) => u.prefix.concat(u.tail));
    const requested = inputs.reduce((n, seq) => n + seq.length, 0);
    const distinct = new Set(inputs.flatMap((seq) => seq.map((_, i) => seq.slice(0, i + 1).join(',')))).size;
    expect(work.tokensRequested).toBe(requested);
    if (cold.cache) {
      expect(work.tokensComputed).toBeGreaterThanOrEqual(distinct);
      expect(work.tokensComputed).toBeLessThanOrEqual(distinct + inputs.length);
    } else {
      // Positions that depend on the sequence length (longrope): nothing is shared.
      expect(reusableKv(ctx.engine.config)).toBe(false);
      expect(work.tokensComputed).toBe(requested);
    }

    for (const [budget, batchTokens] of [
      [2 ** 30, 64],
      [0, 64],
      [40 * ctx.engine.kvBytesPerToken, 16], // smaller than the working set: evictions
    ] as const) {
      const scorer = new Scorer(ctx.engine, { prefixCacheBytes: budget, maxBatchTokens: batchTokens, minSharedTokens: 2 });
      for (let round = 0; round < 3; round++) {
        // Random batches in a shuffled order; the same cache warms across rounds.
        const order = shuffled(
          items.map((_, i) => i),
          r,
        );
        while (order.length > 0) {
          const batch = order.splice(0, 1 + Math.floor(r() * 4));
          const got = await directScoring(scorer).loglikelihood(batch.map((i) => items[i]!));
          batch.forEach((i, n) => expect(got[n]![0], `budget ${budget}, round ${round}, item ${i}`).toEqual(expected[i]));
        }
        expect(scorer.cache?.bytes ?? 0).toBeLessThanOrEqual(budget);
      }
      // All at once, too.
      const all = await directScoring(scorer).loglikelihood(items);
      items.forEach((_, i) => expect(all[i]![0]).toEqual(expected[i]));
    }
  });

  it('echo: every position of a cached prompt without recomputing it; rolling likewise', async () => {
    const vocab = ctx.engine.config.vocabSize;
    const r = rng(12);
    const head = randomTokens(r, 20, vocab);
    const prompts = [head, [...head, ...randomTokens(r, 6, vocab)], [...head.slice(0, 12), ...randomTokens(r, 9, vocab)]];
    const alone = new Scorer(ctx.engine, { prefixSharing: false });
    const echo = async (s: Scorer, ps: number[][], k: number) => {
      const prepared = directScoring(s).prepareEcho(ps, k);
      const { scores, work } = await s.scoreUnits(prepared.units);
      return { answers: prepared.finish(scores), work };
    };
    const expected: EchoScore[] = [];
    for (const p of prompts) expected.push((await echo(alone, [p], 2)).answers[0]!);
    const scorer = new Scorer(ctx.engine, { minSharedTokens: 4 });
    if (!scorer.cache) {
      // No cache where positions depend on the sequence length: the same answers, all computed.
      const all = await echo(scorer, prompts, 2);
      expect(all.answers).toEqual(expected);
      expect(all.work.tokensComputed).toBe(prompts.reduce((n, p) => n + p.length, 0));
      return;
    }
    const first = await echo(scorer, [prompts[0]!], 2);
    expect(first.answers[0]).toEqual(expected[0]);
    expect(first.work.tokensComputed).toBe(20);
    // The same prompt again: nothing to compute. A longer one: its new tokens, and the
    // head's last position again (the cache holds its log-prob of the placeholder target
    // only, not the one of the new token).
    const again = await echo(scorer, [prompts[0]!, prompts[1]!], 2);
    expect(again.answers).toEqual([expected[0], expected[1]]);
    expect(again.work.tokensComputed).toBe(1 + 6);
    // More alternatives than the cache holds: recomputed, same log-probs.
    const wider = await echo(scorer, [prompts[0]!], 3);
    expect(wider.work.tokensComputed).toBe(20);
    expect(wider.answers[0]!.promptLogprobs).toEqual(expected[0]!.promptLogprobs);
    // A partial hit: the first 12 tokens (their scores at positions 0..10 cached; position
    // 11's target differs, so the row starts there).
    const partial = await echo(scorer, [prompts[2]!], 2);
    expect(partial.answers[0]).toEqual(expected[2]);
    expect(partial.work.tokensComputed).toBe(prompts[2]!.length - 11);

    const text = randomTokens(r, 30, vocab);
    const [rollingAlone] = await directScoring(alone).rolling([{ text }]);
    const [rollingCold] = await directScoring(scorer).rolling([{ text }]);
    const prepared = await directScoring(scorer).prepareRolling([{ text }]);
    const warm = await scorer.scoreUnits(prepared.units);
    expect(rollingCold).toEqual(rollingAlone);
    expect(prepared.finish(warm.scores)[0]).toEqual(rollingAlone);
    expect(warm.work.tokensComputed).toBe(0);
  });
});
