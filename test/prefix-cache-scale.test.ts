// The prefix cache at scale: what a round costs the cache does not grow with the entries
// it holds (counted in nodes examined, not timed), and a generation step cancelled while
// its round runs leaves no pin behind (such pins kept whole generations out of reach of
// eviction, and every eviction walked past them). bench/prefix-cache-entries.ts times it.
import { describe, expect, it } from 'vitest';
import { Batcher } from '../src/core/batcher.js';
import { PrefixCache } from '../src/core/prefix-cache.js';
import { Scorer } from '../src/core/scorer.js';
import type { Unit } from '../src/core/units.js';
import { rng } from '../src/model/synthetic.js';
import { familyEngine } from './fixtures.js';

/** A cache of 10 bytes a token holding `n` entries shaped as generations leave them: a
 * 32-token prompt node and a chain of one-token nodes; its budget is what they take. */
function filled(n: number, pinned: boolean): PrefixCache {
  const scratch = new PrefixCache(10, Infinity, () => {});
  const fill = (cache: PrefixCache) => {
    const r = rng(5);
    const token = () => 1000 + Math.floor(r() * 200);
    let handle = 0;
    while (cache.entries < n) {
      let path = Array.from({ length: 32 }, token);
      let match = cache.insert(path, 0, path.length, handle++, 0, [])!;
      for (let s = 1; s < 32 && cache.entries < n; s++) {
        path = [...path, token()];
        const next = cache.insert(path, path.length - 1, 1, handle++, 0, [])!;
        cache.release(match);
        match = next;
      }
      if (!pinned) cache.release(match);
    }
  };
  fill(scratch);
  const cache = new PrefixCache(10, scratch.bytes, () => {});
  fill(cache);
  return cache;
}

/** Nodes examined per round of `rounds` small rows (match, insert, release, evict) into a
 * full cache: the most any round took. */
function examinedPerRound(cache: PrefixCache, rounds: number): number {
  let most = 0;
  for (let i = 0; i < rounds; i++) {
    const before = cache.examined;
    const row = Array.from({ length: 12 }, (_, k) => 1 + ((i * 13 + k) % 500));
    const m = cache.match(row);
    cache.release(cache.insert(row, m.depth, row.length - m.depth, 1e6 + i, 0, [])!);
    cache.release(m);
    cache.evict();
    most = Math.max(most, cache.examined - before);
  }
  return most;
}

describe('the prefix cache at scale', () => {
  it("a round's lookups, inserts and evictions examine as many nodes at 30,000 entries as at 300", () => {
    for (const pinned of [false, true]) {
      const small = filled(300, pinned);
      const large = filled(30_000, pinned);
      expect(large.entries).toBeGreaterThanOrEqual(30_000);
      const a = examinedPerRound(small, 50);
      const b = examinedPerRound(large, 50);
      // A round evicts what its 12 new positions need (one-token leaves, their stale heap
      // entries): a few dozen nodes, whatever the entries (a scan examined all 30,000).
      expect(b, `pinned: ${pinned}`).toBeLessThanOrEqual(40);
      expect(b, `pinned: ${pinned}`).toBeLessThanOrEqual(a + 16);
      expect(large.bytes).toBeLessThanOrEqual(large.budget);
    }
  });

  it('counts kept up as it changes: stats() agrees with the trie', () => {
    const cache = filled(2000, false);
    const stats = cache.stats();
    expect(stats.entries).toBe(cache.entries);
    expect(stats.bytes).toBe(cache.bytes);
    // Every node a prompt of 32 or a chain link of 1: the tokens of 2000+ entries.
    expect(stats.tokens).toBeGreaterThanOrEqual(2000);
    cache.clear();
    expect(cache.stats()).toMatchObject({ bytes: 0, entries: 0, tokens: 0, segments: 0 });
  });
});

describe('a generation step cancelled while its round runs', () => {
  const ctx = familyEngine('llama');

  it('leaves no pin in the prefix cache: its kept sequence is released and evicted', async () => {
    // Budget 0: a running generation's sequence stays pinned whatever the budget, and goes
    // as soon as it is released.
    const scorer = new Scorer(ctx.engine, { prefixCacheBytes: 0 });
    const batcher = new Batcher('m', scorer, { maxQueueDelayMs: 0 });
    const step: Unit = { prefix: [], tail: [5, 6, 7, 8, 9, 10], targets: [], scored: [], topK: 0, next: true, nextTop: 1, keep: true };
    const engine = ctx.engine;
    const forward = engine.forward;
    let submitted: ReturnType<Batcher['submit']> | undefined;
    let passes = 0;
    // The caller goes away while the step's only pass runs: the round completes.
    engine.forward = async (req) => {
      passes++;
      submitted?.cancel();
      return forward.call(engine, req);
    };
    try {
      submitted = batcher.submit([step]);
      await expect(submitted.result).rejects.toThrow(/cancelled/);
      await batcher.idle();
    } finally {
      engine.forward = forward;
    }
    expect(passes).toBe(1);
    expect(scorer.cache!.stats().evictions).toBe(1); // it was in, and went
    // Before: the step's sequence stayed pinned for good (6 positions of KV, 1 entry).
    expect(scorer.cache!.stats()).toMatchObject({ bytes: 0, entries: 0 });
    expect(await engine.keptPasts()).toBe(0);
  });
});
