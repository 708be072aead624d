// The prefix cache as the harness meets it: `ctxprobe serve` started the documented way,
// few-shot items sent as lm-evaluation-harness's local-completions sends them (one
// /v1/completions request per continuation, echo + logprobs, token ids, longest first),
// answers bit-identical to a server with the cache off, the work read from /metrics.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { rng } from '../src/model/synthetic.js';
import { FAMILY_FIXTURES, makeFixture } from './fixtures.js';
import { serveCli, type Served } from './cli-serve.js';
import { scrape } from './helpers.js';

const MODEL = 'm';
let cached: Served;
let uncached: Served;

beforeAll(async () => {
  const dir = makeFixture({ ...FAMILY_FIXTURES.llama!, maxPositions: 256 }).dir;
  [cached, uncached] = await Promise.all([
    serveCli(dir, ['--name', MODEL]),
    serveCli(dir, ['--name', MODEL, '--max-queue-delay-ms', '0'], { CTXPROBE_PREFIX_CACHE_BYTES: '0' }),
  ]);
}, 60_000);
afterAll(async () => {
  await cached?.stop();
  await uncached?.stop();
});

/** Few-shot items: shared demos, then per sample a context and four continuations. */
function harnessPrompts(): number[][] {
  const r = rng(5);
  const ids = (n: number) => Array.from({ length: n }, () => 3 + Math.floor(r() * 290));
  const demos = ids(60);
  const prompts: number[][] = [];
  for (let s = 0; s < 4; s++) {
    const context = [...demos, ...ids(20 + 5 * s)];
    for (let c = 0; c < 4; c++) prompts.push([...context, ...ids(1 + c)]);
  }
  // The harness sends the longest first (its Collator sorts by -len(context + continuation)).
  return prompts.sort((a, b) => b.length - a.length);
}

async function complete(s: Served, prompt: number[]): Promise<any> {
  const res = await fetch(`http://127.0.0.1:${s.httpPort}/v1/completions`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ model: MODEL, prompt, max_tokens: 0, logprobs: 1, echo: true, temperature: 0 }),
  });
  expect(res.status).toBe(200);
  return ((await res.json()) as any).choices[0].logprobs;
}

/** Positions of a token trie holding every prompt: what must be computed at least once. */
function distinctPositions(prompts: number[][]): number {
  const seen = new Set<string>();
  for (const p of prompts) for (let i = 1; i <= p.length; i++) seen.add(p.slice(0, i).join(','));
  return seen.size;
}

describe('prefix cache through `ctxprobe serve`', () => {
  it('is on by default and off with CTXPROBE_PREFIX_CACHE_BYTES=0, as logged and exported', async () => {
    expect(cached.lines.find((l) => l.event === 'model_loaded')!.prefixCacheBytes).toBe(2 ** 30);
    expect(uncached.lines.find((l) => l.event === 'model_loaded')!.prefixCacheBytes).toBe(0);
    expect((await scrape(uncached.metricsPort)).get(`ctxprobe_prefix_cache_budget_bytes{model="${MODEL}"}`) ?? 0).toBe(0);
  });

  it('takes --prefix-cache-bytes, and prefixCacheBytes from a model repository file', async () => {
    const dir = makeFixture({ ...FAMILY_FIXTURES.llama!, maxPositions: 64 }).dir;
    const flag = await serveCli(dir, ['--name', MODEL, '--prefix-cache-bytes', '4096']);
    try {
      expect(flag.lines.find((l) => l.event === 'model_loaded')!.prefixCacheBytes).toBe(4096);
      await complete(flag, [5, 6, 7, 8]);
      expect((await scrape(flag.metricsPort)).get(`ctxprobe_prefix_cache_budget_bytes{model="${MODEL}"}`)).toBe(4096);
    } finally {
      await flag.stop();
    }
    const repo = fs.mkdtempSync(path.join(os.tmpdir(), 'ctxprobe-repo-'));
    fs.writeFileSync(path.join(repo, 'm.json'), JSON.stringify({ name: MODEL, path: dir, prefixCacheBytes: 8192 }));
    const served = await serveCli('', ['--models', repo]);
    try {
      expect(served.lines.find((l) => l.event === 'model_loaded')!.prefixCacheBytes).toBe(8192);
    } finally {
      await served.stop();
    }
  });

  it('harness-shaped requests: answers bit-identical to no cache, each shared token computed once', async () => {
    const prompts = harnessPrompts();
    for (const p of prompts) {
      const [a, b] = await Promise.all([complete(cached, p), complete(uncached, p)]);
      expect(a).toEqual(b);
    }
    const m = await scrape(cached.metricsPort);
    const get = (name: string) => m.get(`${name}{model="${MODEL}"}`)!;
    const requested = prompts.reduce((n, p) => n + p.length, 0);
    expect(get('ctxprobe_tokens_requested_total')).toBe(requested);
    // Each distinct position once; at most one more per request (the position where it
    // leaves the cached path: the log-prob of its own next token was not computed).
    const computed = get('ctxprobe_tokens_computed_total');
    expect(computed).toBeGreaterThanOrEqual(distinctPositions(prompts));
    expect(computed).toBeLessThanOrEqual(distinctPositions(prompts) + prompts.length);
    expect(get('ctxprobe_prefix_cache_tokens_reused_total')).toBe(requested - computed);
    expect(get('ctxprobe_prefix_cache_bytes')).toBeGreaterThan(0);
    expect(get('ctxprobe_prefix_cache_bytes')).toBeLessThanOrEqual(get('ctxprobe_prefix_cache_budget_bytes'));
    // Without the cache, one prompt per request shares nothing.
    const off = await scrape(uncached.metricsPort);
    expect(off.get(`ctxprobe_tokens_computed_total{model="${MODEL}"}`)).toBe(requested);
  });
});
