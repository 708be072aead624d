// Prefix-cache scaling benchmark: does a small request's round cost depend on how many
// entries the cache holds? The default model in-process behind a Batcher (as the server
// runs it, metrics included), its cache filled with N entries shaped as cancelled
// generations leave them — a 32-token prompt node and a chain of 31 one-token nodes per
// generation — at a budget the entries fill exactly, so every round's insert evicts.
// Each N twice: the entries unpinned (a cache that is simply full), and pinned (as
// cancelled generations left them before their pins were released). Prints the median and
// p90 of a round that echoes 12 new tokens, and the nodes evictions examined per round;
// asserts nothing.
//
//   npx tsx bench/prefix-cache-entries.ts            (N = 0, 1k, 17k, 60k, 140k)
//   BENCH_ENTRIES=1000,140000 npx tsx bench/prefix-cache-entries.ts
import { Engine } from '../src/engine/engine.js';
import { Batcher } from '../src/core/batcher.js';
import { Scorer } from '../src/core/scorer.js';
import { PrefixCache } from '../src/core/prefix-cache.js';
import { Metrics } from '../src/serving/metrics.js';
import { ensureCheckpoint, readRepository } from '../src/serving/repository.js';
import { encoderFor } from '../src/requests/scoring.js';
import { rng } from '../src/model/synthetic.js';

const sizes = (process.env.BENCH_ENTRIES ?? '0,1000,17000,60000,140000').split(',').map(Number);
const rounds = Number(process.env.BENCH_ROUNDS ?? 40);
const GENERATION_NODES = 32;

const entry = readRepository()[0]!;
ensureCheckpoint(entry);
const engine = await Engine.load(entry.path, { threads: 1 });
const vocab = engine.config.vocabSize;
/** Fill tokens come from the top half of the vocabulary, requests start in the bottom
 * half: a request never meets a filled node (whose KV handles are not real). */
/** `n` entries as cancelled generations leave them (the same ones for the same `n`);
 * pinned ones stay pinned. */
function fill(cache: PrefixCache, n: number, pinned: boolean): void {
  const random = rng(17);
  const fillToken = () => Math.floor(vocab / 2) + Math.floor(random() * Math.floor(vocab / 2));
  let handle = 1e9;
  while (cache.entries < n) {
    // Random prompts share a first token or a few (their nodes split), as real ones do.
    let path = Array.from({ length: 32 }, fillToken);
    let match = cache.insert(path, 0, path.length, handle++, 0, [])!;
    for (let s = 1; s < GENERATION_NODES && cache.entries < n; s++) {
      path = [...path, fillToken()];
      const next = cache.insert(path, path.length - 1, 1, handle++, 0, [])!;
      cache.release(match);
      match = next;
    }
    if (!pinned) cache.release(match);
  }
}

/** Nodes the cache's evictions and splits have examined so far (NaN before it counted). */
const examinedOf = (cache: PrefixCache) => (cache as { examined?: number }).examined ?? NaN;
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const p90 = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length * 0.9)]!;

console.log(`ctxprobe prefix-cache entries benchmark — default model, 1 thread, ${rounds} rounds of a 12-token echo per case`);
console.log('entries   fill       round median   p90      nodes examined / round');
for (const n of sizes) {
  for (const pinned of [false, true]) {
    if (n === 0 && pinned) continue;
    // The budget the entries fill (measured on a scratch copy): each round's own entries go over it.
    const scratch = new PrefixCache(engine.kvBytesPerToken, Infinity, () => {});
    fill(scratch, n, pinned);
    const scorer = new Scorer(engine, { prefixCacheBytes: Math.max(1, scratch.bytes) });
    const cache = scorer.cache!;
    fill(cache, n, pinned);
    const filled = cache.entries;
    const batcher = new Batcher('bench', scorer, { maxQueueDelayMs: 0 }, new Metrics());
    const encoder = encoderFor(scorer);
    const times: number[] = [];
    const examinedBefore = examinedOf(cache);
    for (let r = 0; r < rounds; r++) {
      const prompt = Array.from({ length: 12 }, (_, k) => 3 + ((r * 13 + k * 7) % Math.floor(vocab / 2 - 3)));
      const units = encoder.prepareEcho([prompt], 1).units;
      const t = performance.now();
      await batcher.submit(units).result;
      times.push(performance.now() - t);
    }
    const examined = (examinedOf(cache) - examinedBefore) / rounds;
    console.log(
      `${String(filled).padStart(7)}   ${(pinned ? 'pinned' : 'unpinned').padEnd(9)}  ${median(times).toFixed(2).padStart(8)} ms  ${p90(times).toFixed(2).padStart(6)} ms  ${examined.toFixed(0).padStart(8)}`,
    );
  }
}
await engine.release();
process.exit(0);
