// The SPEC's attention statistics computed from the reference forward pass's full
// attention tensors, and the check of a prober against them (shared by test files).
import { expect } from 'vitest';
import type { Engine } from '../src/engine/engine.js';
import { Scorer } from '../src/core/scorer.js';
import { Prober, type ProbeOptions, type Reducer } from '../src/requests/probe.js';
import { rng } from '../src/model/synthetic.js';
import { referenceForward, referenceWindow, type ReferenceModel } from './reference.js';

export const LABELS = ['instruction', 'history', 'knowledge', 'response'];

export function sampleIds(seed: number, lengths: number[], vocab: number) {
  const r = rng(seed);
  return lengths.map((n, k) => ({ label: LABELS[k]!, ids: Array.from({ length: n }, () => 3 + Math.floor(r() * (vocab - 3))) }));
}

/** The SPEC's definitions, computed from A[l][h][t][j]. */
export function referenceProbe(
  A: number[][][][],
  spans: [number, number][],
  queries: number[],
  excluded: Set<number>,
  opts: Required<Pick<ProbeOptions, 'pool' | 'queryReduce' | 'keyReduce'>>,
  window?: number,
) {
  const L = A.length;
  const H = A[0]!.length;
  const T = A[0]![0]!.length;
  const chunkOf = (j: number) => spans.findIndex(([s, e]) => j >= s && j < e);
  const C = spans.length;
  const votes = Array.from({ length: L }, () => new Array(C).fill(0));
  const mass = Array.from({ length: L }, () => new Array(C).fill(0));
  const votesExcluded = new Array(L).fill(0);
  const massExcluded = new Array(L).fill(0);
  let nearTies = 0;
  const n = H * queries.length;
  for (let l = 0; l < L; l++)
    for (let h = 0; h < H; h++)
      for (const t of queries) {
        const row = A[l]![h]![t]!;
        const keys = row.map((_, j) => j).filter((j) => j <= t);
        const best = (js: number[]) => js.reduce((a, j) => (row[j]! > row[a]! ? j : a), js[0]!);
        const jAll = best(keys);
        if (excluded.has(jAll)) votesExcluded[l] += 1 / n;
        const kept = keys.filter((j) => !excluded.has(j));
        const jIn = best(kept);
        const second = Math.max(...kept.filter((j) => j !== jIn).map((j) => row[j]!), -1);
        if (row[jIn]! - second < 1e-5) nearTies++;
        votes[l]![chunkOf(jIn)] += 1 / n;
        const sink = keys.filter((j) => excluded.has(j)).reduce((a, j) => a + row[j]!, 0);
        massExcluded[l] += sink / n;
        for (const j of kept) mass[l]![chunkOf(j)] += row[j]! / (1 - sink) / n;
      }
  // Heatmap: pool over layers and heads, reduce keys then queries.
  const pooled = (t: number, j: number) => {
    const vals = A.flatMap((layer) => layer.map((head) => head[t]![j]!));
    return opts.pool === 'max' ? Math.max(...vals) : vals.reduce((a, v) => a + v, 0) / vals.length;
  };
  const reduce = (vals: number[], r: Reducer) =>
    vals.length === 0
      ? 0
      : r === 'max'
        ? Math.max(...vals)
        : r === 'sum'
          ? vals.reduce((a, v) => a + v, 0)
          : vals.reduce((a, v) => a + v, 0) / vals.length;
  const keyValue = (t: number, keys: number[]) => {
    // Keys the query can see: causal, and inside a sliding window (Mistral).
    const visible = keys.filter((j) => j <= t && (window === undefined || t - j < window));
    if (opts.keyReduce === 'mean') return visible.length ? visible.reduce((a, j) => a + pooled(t, j), 0) / visible.length : 0;
    return reduce(
      keys.map((j) => pooled(t, j)),
      opts.keyReduce,
    );
  };
  const spanKeys = ([s, e]: [number, number]) => Array.from({ length: e - s }, (_, k) => s + k).filter((j) => !excluded.has(j));
  const heatmap = spans.map(([s, e]) =>
    spans.map((u) =>
      reduce(
        Array.from({ length: e - s }, (_, k) => s + k)
          .filter((t) => !excluded.has(t))
          .map((t) => keyValue(t, spanKeys(u))),
        opts.queryReduce,
      ),
    ),
  );
  void T;
  return { votes, votesExcluded, mass, massExcluded, heatmap, nearTies: nearTies / n };
}

export function expectMatrix(actual: number[][], expected: number[][], tol: number, what = '') {
  expect(actual.length).toBe(expected.length);
  actual.forEach((row, i) =>
    row.forEach((v, j) =>
      expect(Math.abs(v - expected[i]![j]!), `${what}[${i}][${j}] ${v} vs ${expected[i]![j]}`).toBeLessThanOrEqual(tol),
    ),
  );
}

export async function checkFamily(model: ReferenceModel, engine: Engine, seed: number) {
  const prober = new Prober(engine);
  const vocab = engine.config.vocabSize;
  const chunks = sampleIds(seed, [4, 7, 6, 5], vocab);
  const ids = chunks.flatMap((c) => c.ids);
  const A = referenceForward(model, ids).attention;
  const spans: [number, number][] = [];
  let at = 0;
  for (const c of chunks) spans.push([at, (at += c.ids.length)]);
  const queries = Array.from({ length: 5 }, (_, k) => 17 + k);
  for (const opts of [
    { pool: 'max', queryReduce: 'mean', keyReduce: 'max' },
    { pool: 'mean', queryReduce: 'max', keyReduce: 'sum' },
    { pool: 'max', queryReduce: 'sum', keyReduce: 'mean' },
  ] as const) {
    for (const excluded of [new Set<number>(), new Set([0])]) {
      const answer = await prober.probe([{ chunkIds: chunks, excludePositions: [...excluded] }], opts);
      const got = answer.samples[0]!;
      const ref = referenceProbe(A, spans, queries, excluded, opts, referenceWindow(model.config));
      expect(got.labels).toEqual(LABELS);
      const what = `${JSON.stringify(opts)} excluded=${[...excluded]} `;
      expectMatrix(got.votes, ref.votes, ref.nearTies + 1e-6, what + 'votes');
      expectMatrix([got.votesExcluded], [ref.votesExcluded], 1e-6, what + 'votesExcluded');
      expectMatrix(got.mass, ref.mass, 1e-5, what + 'mass');
      expectMatrix([got.massExcluded], [ref.massExcluded], 1e-5, what + 'massExcluded');
      expectMatrix(got.heatmap, ref.heatmap, 1e-5, what + 'heatmap');
      got.votes.forEach((row) => expect(Math.abs(row.reduce((a, v) => a + v, 0) - 1)).toBeLessThan(1e-5));
      got.mass.forEach((row) => expect(Math.abs(row.reduce((a, v) => a + v, 0) - 1)).toBeLessThan(1e-5));
    }
  }
  // A query chunk in the middle, without a heatmap: the probe pass holds only its rows
  // (the cached prefix before, nothing after), with the full probe's votes and mass.
  {
    const middle = { chunkIds: chunks, queryLabels: [LABELS[1]!] };
    const full = (await new Prober(engine).probe([middle])).samples[0]!;
    const rows: number[] = [];
    // Rows of the passes that probe (the prefix runs before, into the cache: KV only).
    const spy: Engine = Object.create(engine, {
      forward: {
        value: (req: Parameters<Engine['forward']>[0]) => {
          for (const r of req.rows) if (r.probe) rows.push(r.tokens.length);
          return engine.forward(req);
        },
      },
    });
    const s = new Scorer(spy);
    const got = (await new Prober(spy, { scorer: s }).probe([middle], { heatmap: false })).samples[0]!;
    if (s.cache) expect(rows).toEqual([chunks[1]!.ids.length]);
    expectMatrix(got.votes, full.votes, 1e-6, 'middle query votes');
    expectMatrix(got.mass, full.mass, 1e-5, 'middle query mass');
  }
  // Without a heatmap, through the prefix cache: the 17 tokens before the query chunk are
  // computed once (KV only), then reused; the probe pass runs only the query rows.
  const scorer = new Scorer(engine);
  const cached = new Prober(engine, { scorer });
  for (const [round, excluded] of [new Set<number>(), new Set([0])].entries()) {
    const answer = await cached.probe([{ chunkIds: chunks, excludePositions: [...excluded] }], { heatmap: false });
    const got = answer.samples[0]!;
    const ref = referenceProbe(A, spans, queries, excluded, { pool: 'max', queryReduce: 'mean', keyReduce: 'max' }, referenceWindow(model.config));
    // No cache where positions depend on the sequence length (longrope): the whole sample runs.
    if (scorer.cache) expect(got.prefix).toEqual(round === 0 ? { computed: 17, reused: 0 } : { computed: 0, reused: 17 });
    else expect(got.prefix).toBeUndefined();
    expect(got.heatmap).toEqual([]);
    expectMatrix(got.votes, ref.votes, ref.nearTies + 1e-6, 'cached prefix votes');
    expectMatrix([got.votesExcluded], [ref.votesExcluded], 1e-6, 'cached prefix votesExcluded');
    expectMatrix(got.mass, ref.mass, 1e-5, 'cached prefix mass');
    expectMatrix([got.massExcluded], [ref.massExcluded], 1e-5, 'cached prefix massExcluded');
  }
}
