// A probe's answer has the same bits alone and in any batch, its prefix cached or not
// (docs/scoring.md, the prefix cache's contract): mass and heatmaps are sums of floats, so this holds
// only if every sum adds a sample's values in one order whatever shares its pass — other
// samples of other lengths, other query chunks, more chunks (a pass's bins), one query
// token, query blocks, a warm or a cold cache.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Engine } from '../src/engine/engine.js';
import { Scorer } from '../src/core/scorer.js';
import { Prober, type ProbeOptions, type ProbeSample, type SampleProbe } from '../src/requests/probe.js';
import { rng } from '../src/model/synthetic.js';
import { FAMILY_FIXTURES, makeFixture } from './fixtures.js';

const chunks = (seed: number, lengths: number[], vocab: number) => {
  const r = rng(seed);
  return lengths.map((n, k) => ({ label: `c${k}`, ids: Array.from({ length: n }, () => 3 + Math.floor(r() * (vocab - 3))) }));
};

// Every float of an answer, as bits.
const bits = (s: SampleProbe) => {
  const floats = [
    s.mass,
    s.massPerHead ?? [],
    s.massExcluded,
    s.votes,
    s.votesPerHead ?? [],
    s.votesExcluded,
    s.heatmap,
    s.heatmapExcluded,
  ].flat(3);
  return Array.from(new Uint32Array(Float64Array.from(floats as number[]).buffer)).join(',');
};

describe.each(['llama', 'gpt2'])('%s probe bits', (family) => {
  let engine: Engine;
  beforeAll(async () => {
    engine = await Engine.load(makeFixture({ ...FAMILY_FIXTURES[family]!, maxPositions: 2048 }).dir, { threads: 1 });
  });
  afterAll(async () => engine?.release());

  it('gives a sample the same mass, votes and heatmap bits alone and beside any other samples, cached or not', async () => {
    const V = engine.config.vocabSize;
    // Over 1024 keys (the CPU MatMul's longest stretch of keys); 300 tokens in one pass with others.
    const long: ProbeSample = { chunkIds: chunks(1, [1, 600, 500, 120], V), excludePositions: [0] };
    const short: ProbeSample = { chunkIds: chunks(2, [1, 90, 80, 60], V), excludePositions: [0], queryLabels: ['c1', 'c3'] };
    const oneQuery: ProbeSample = { chunkIds: chunks(3, [1, 30, 1], V) };
    const others: ProbeSample[] = [
      { chunkIds: chunks(4, Array(20).fill(7), V) }, // 22 bins
      { chunkIds: chunks(5, Array(70).fill(3), V), queryLabels: ['c0', 'c69'] }, // 72 bins
      { chunkIds: chunks(6, [5, 5, 5, 5], V), excludePositions: [0] },
      { chunkIds: chunks(7, [2, 40, 9], V), queryLabels: ['c1'] },
    ];
    const batches = [[], [others[0]!], [others[1]!], [others[2]!, others[3]!], [others[3]!, others[1]!, others[0]!]];
    for (const target of [long, short, oneQuery]) {
      for (const options of [
        { heatmap: false },
        { heatmap: true, keyReduce: 'sum' },
        { heatmap: true, pool: 'mean', keyReduce: 'mean' },
      ] as ProbeOptions[]) {
        const answers = new Map<string, string[]>();
        const add = (what: string, s: SampleProbe) => answers.set(bits(s), [...(answers.get(bits(s)) ?? []), what]);
        for (const [k, others] of batches.entries()) {
          for (const batch of [
            [target, ...others],
            [...others, target],
          ]) {
            const at = batch.indexOf(target);
            const plain = await new Prober(engine).probe(batch, { perHead: true, ...options });
            add(`batch ${k}, place ${at}`, plain.samples[at]!);
            // Without the heatmap the rows before the query chunks come from the cache.
            if (options.heatmap) continue;
            const cached = new Prober(engine, { scorer: new Scorer(engine) });
            add(`batch ${k}, place ${at}, cache cold`, (await cached.probe(batch, { perHead: true, ...options })).samples[at]!);
            add(`batch ${k}, place ${at}, cache warm`, (await cached.probe(batch, { perHead: true, ...options })).samples[at]!);
          }
        }
        expect([...answers.values()], `${target.chunkIds!.length} chunks, ${JSON.stringify(options)}`).toHaveLength(1);
      }
    }
  });
});
