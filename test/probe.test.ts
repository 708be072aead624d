// Attention probes against the full attention tensors of the float64 reference forward
// pass: votes exactly (ties aside), mass and heatmaps within 1e-5, raw slices, limits.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Engine } from '../src/engine/engine.js';
import { Prober } from '../src/requests/probe.js';
import { Scorer } from '../src/core/scorer.js';
import { InvalidArgumentError } from '../src/common/errors.js';
import { FAMILY_FIXTURES, familyEngine, makeFixture } from './fixtures.js';
import { referenceForward } from './reference.js';
import { LABELS, checkFamily, expectMatrix, sampleIds } from './probe-reference.js';
import { directScoring } from '../src/requests/scoring.js';

describe.each(Object.keys(FAMILY_FIXTURES))('%s probe', (family) => {
  const ctx = familyEngine(family);

  it('votes, mass and heatmaps equal the reference computed from full attention', () => checkFamily(ctx.fx, ctx.engine, 31));

  it('runs a sample over the attention limit in query blocks (down to one token), with the unblocked answers', async () => {
    const vocab = ctx.engine.config.vocabSize;
    const H = ctx.engine.config.numHeads;
    const sample = { chunkIds: sampleIds(61, [5, 9, 7, 6], vocab), excludePositions: [0], queryLabels: [LABELS[1]!, LABELS[3]!] };
    for (const options of [{ perHead: true }, { pool: 'mean' as const, keyReduce: 'mean' as const, queryReduce: 'max' as const }]) {
      const whole = (await new Prober(ctx.engine).probe([sample], options)).samples[0]!;
      // 27 cells: blocks of 5, 3, 2, …, then single tokens as the keys grow; 200: a few blocks.
      for (const cells of [27, 200]) {
        const blocked = (await new Prober(ctx.engine, { maxAttentionBytes: cells * H * 4 }).probe([sample], options)).samples[0]!;
        const what = `${cells} cells ${JSON.stringify(options)}`;
        expectMatrix(blocked.votes, whole.votes, 1e-6, `${what} votes`);
        expectMatrix(blocked.mass, whole.mass, 1e-5, `${what} mass`);
        expectMatrix([blocked.votesExcluded, blocked.massExcluded], [whole.votesExcluded, whole.massExcluded], 1e-5, `${what} excluded`);
        expectMatrix(blocked.heatmap, whole.heatmap, 1e-5, `${what} heatmap`);
        expectMatrix([blocked.heatmapExcluded], [whole.heatmapExcluded], 1e-5, `${what} heatmap excluded`);
        if (whole.massPerHead) blocked.massPerHead!.forEach((l, i) => expectMatrix(l, whole.massPerHead![i]!, 1e-5, `${what} per head`));
      }
    }
  });

  it('returns the query chunk log-probs from the probe pass: the scorer\'s, batched, in blocks and after a cached prefix', async () => {
    const vocab = ctx.engine.config.vocabSize;
    const H = ctx.engine.config.numHeads;
    const a = { chunkIds: sampleIds(71, [4, 8, 6, 5], vocab), excludePositions: [0] };
    const b = { chunkIds: sampleIds(72, [3, 3, 2, 4], vocab) };
    const scorer = new Scorer(ctx.engine, { prefixSharing: false });
    const expected = async (sample: { chunkIds: { ids: number[] }[] }) => {
      const ids = sample.chunkIds.map((c) => c.ids);
      const [score] = await directScoring(scorer).loglikelihood([{ context: ids.slice(0, -1).flat(), continuations: [ids.at(-1)!] }]);
      return score![0]!.tokenLogprobs;
    };
    const want = [await expected(a), await expected(b)];
    const check = (got: number[] | undefined, exp: number[], what: string) => {
      expect(got, what).toHaveLength(exp.length);
      // Every index (forEach would skip the holes of an answer left unfilled).
      for (let k = 0; k < exp.length; k++) expect(Math.abs(got![k]! - exp[k]!), `${what} [${k}]`).toBeLessThan(1e-5);
    };
    const batched = await new Prober(ctx.engine).probe([a, b], { logprobs: true });
    batched.samples.forEach((s, i) => {
      check(s.queryLogprobs, want[i]!, `batched ${i}`);
      expect(Math.abs(s.queryLogprob! - want[i]!.reduce((x, y) => x + y, 0))).toBeLessThan(1e-4);
    });
    const blocked = await new Prober(ctx.engine, { maxAttentionBytes: 27 * H * 4 }).probe([a], { logprobs: true });
    check(blocked.samples[0]!.queryLogprobs, want[0]!, 'blocked');
    const cached = await new Prober(ctx.engine, { scorer: new Scorer(ctx.engine) }).probe([a], { logprobs: true, heatmap: false });
    check(cached.samples[0]!.queryLogprobs, want[0]!, 'after a cached prefix');
    expect((await new Prober(ctx.engine).probe([a])).samples[0]!.queryLogprobs).toBeUndefined();
  });

  it('gives each sample of a padded batch its answer alone, and averages them', async () => {
    const prober = new Prober(ctx.engine);
    const vocab = ctx.engine.config.vocabSize;
    const a = { chunkIds: sampleIds(41, [3, 9, 4, 6], vocab), excludePositions: [0] };
    const b = { chunkIds: sampleIds(42, [2, 3, 2, 3], vocab) };
    const both = await prober.probe([a, b], { perHead: true });
    const alone = [(await prober.probe([a])).samples[0]!, (await prober.probe([b])).samples[0]!];
    both.samples.forEach((s, i) => {
      expectMatrix(s.votes, alone[i]!.votes, 1e-6);
      expectMatrix(s.mass, alone[i]!.mass, 1e-5);
      expectMatrix(s.heatmap, alone[i]!.heatmap, 1e-5);
      expect(s.votesPerHead).toHaveLength(ctx.engine.config.numLayers);
      s.votesPerHead!.forEach((layer, l) => {
        const summed = LABELS.map((_, c) => layer.reduce((acc, head) => acc + head[c]!, 0) / ctx.engine.config.numHeads);
        summed.forEach((v, c) => expect(Math.abs(v - s.votes[l]![c]!)).toBeLessThan(1e-6));
      });
    });
    expectMatrix(
      both.mean!.votes,
      alone[0]!.votes.map((row, l) => row.map((v, c) => (v + alone[1]!.votes[l]![c]!) / 2)),
      1e-6,
    );
  });

  it('returns raw attention slices equal to the reference, under a size cap', async () => {
    const prober = new Prober(ctx.engine, { maxRawBytes: 4096 });
    const chunks = sampleIds(51, [5, 5, 5, 5], ctx.engine.config.vocabSize);
    const A = referenceForward(
      ctx.fx,
      chunks.flatMap((c) => c.ids),
    ).attention;
    const slices = await prober.raw({ chunkIds: chunks }, { layers: [1, 0], heads: [2, 0], queryStart: 10, queryEnd: 14 });
    expect(slices.map((s) => [s.layer, s.head])).toEqual([
      [1, 2],
      [1, 0],
      [0, 2],
      [0, 0],
    ]);
    for (const s of slices) {
      for (let q = 0; q < 4; q++)
        for (let j = 0; j < 20; j++) expect(Math.abs(s.values[q * 20 + j]! - A[s.layer]![s.head]![10 + q]![j]!)).toBeLessThan(1e-5);
    }
    const err = await prober
      .raw({ chunkIds: chunks }, { layers: [0, 1], heads: [0, 1, 2, 3], queryStart: 0, queryEnd: 20 })
      .catch((e) => e);
    expect(err).toBeInstanceOf(InvalidArgumentError);
    expect(err.message).toMatch(/^layers: 2 layers × 4 heads × 20 queries × 20 keys .* over the raw-attention limit/);
  });
});

describe('probe limits and bad samples', () => {
  let engine: Engine;
  beforeAll(async () => {
    engine = await Engine.load(makeFixture(FAMILY_FIXTURES.llama!).dir, { threads: 1 });
  });
  afterAll(async () => engine?.release());

  it('refuses raw slices of a sample whose attention would exceed the memory limit (no blocks for those)', async () => {
    const prober = new Prober(engine, { maxAttentionBytes: 16 * 1024 });
    const err = await prober
      .raw({ chunkIds: sampleIds(2, [20, 20, 10, 10], 300) }, { layers: [0], heads: [0], queryStart: 0, queryEnd: 2 })
      .catch((e) => e);
    expect(err.message).toMatch(/^sample: 60 tokens need .* over the probe limit .*not computed in blocks/);
  });

  it('names bad fields', async () => {
    const prober = new Prober(engine);
    const cases: [any, RegExp][] = [
      [{}, /samples\[0\]: give exactly one of chunks, chunk_ids or messages/],
      [{ chunkIds: [{ label: 'a', ids: [1, 99999] }] }, /samples\[0\]\.chunk_ids\[0\]\.ids\[1\]: token id 99999/],
      [
        {
          chunkIds: [
            { label: 'a', ids: [1] },
            { label: 'b', ids: [] },
          ],
        },
        /samples\[0\]\.chunk_ids\[1\]: chunk "b" has no token/,
      ],
      [{ chunkIds: [{ label: 'a', ids: [1, 2] }], queryLabels: ['zzz'] }, /samples\[0\]\.query_labels\[0\]: no chunk is labelled "zzz"/],
      [{ chunkIds: [{ label: 'a', ids: [1, 2] }], excludePositions: [5] }, /samples\[0\]\.exclude_positions\[0\]: position 5 is outside/],
    ];
    for (const [sample, message] of cases) {
      const err = await prober.probe([sample]).catch((e) => e);
      expect(err).toBeInstanceOf(InvalidArgumentError);
      expect(err.message).toMatch(message);
    }
  });
});
