// Chunk attribution against independent computations: `mask` against the float64
// reference with the chunk's attention weights zeroed before renormalisation, `remove`
// against the edited sample scored on its own, shared-prefix variants against unshared
// ones, and the surrogate fit against its normal equations.
import fs from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Engine } from '../src/engine/engine.js';
import { countVariants, prepareAttribution, type AttributionSample } from '../src/requests/attribution.js';
import { leastSquares } from '../src/common/matrix.js';
import { rng } from '../src/common/random.js';
import { plan } from '../src/core/planner.js';
import { Scorer } from '../src/core/scorer.js';
import { FAMILY_FIXTURES, familyEngine, makeFixture } from './fixtures.js';
import { referenceTokenLogprobs } from './reference.js';
import { directScoring } from '../src/requests/scoring.js';

const tokens = (r: () => number, n: number, vocab: number) => Array.from({ length: n }, () => 3 + Math.floor(r() * (vocab - 3)));

/** Sum of the target chunk's token log-probs, each given everything before it, from the
 * float64 reference with `hidden` keys knocked out. */
function referenceTarget(
  fx: Parameters<typeof referenceTokenLogprobs>[0],
  ids: number[],
  targetStart: number,
  hidden: { start: number; end: number }[] = [],
) {
  return referenceTokenLogprobs(fx, ids, ids.length - targetStart, { hidden }).logprobs;
}

describe.each(['llama', 'qwen2-window', 'gemma2', 'mixtral', 'phi3-longrope'])('%s: attribution', (family) => {
  const ctx = familyEngine(family);

  it('mask = the reference with the chunk zeroed; remove = the edited sample alone; shared = unshared', async () => {
    const vocab = ctx.engine.config.vocabSize;
    const r = rng(5);
    // Chunk lengths cross the fixtures' sliding windows (4–8).
    const chunkIds = [
      { label: 'instruction', ids: tokens(r, 5, vocab) },
      { label: 'history', ids: tokens(r, 6, vocab) },
      { label: 'history', ids: tokens(r, 4, vocab) },
      { label: 'knowledge', ids: tokens(r, 7, vocab) },
      { label: 'response', ids: tokens(r, 5, vocab) },
    ];
    const sample: AttributionSample = { chunkIds };
    const options = { keepOnly: true, historySweep: [0, 1, 5], subsets: 6, seed: 3 };
    const ids = chunkIds.flatMap((c) => c.ids);
    const starts = chunkIds.map((_, k) => chunkIds.slice(0, k).reduce((n, c) => n + c.ids.length, 0));
    const span = (k: number) => ({ start: starts[k]!, end: starts[k]! + chunkIds[k]!.ids.length });
    const targetStart = starts[4]!;

    const shared = new Scorer(ctx.engine, { minSharedTokens: 2, maxBatchTokens: 16 });
    const prepared = await prepareAttribution(ctx.engine, [sample], options);
    const { scores, work } = await shared.scoreUnits(prepared.units);
    const [a] = prepared.finish(scores);

    const baseRef = referenceTarget(ctx.fx, ids, targetStart);
    const sum = (v: number[]) => v.reduce((x, y) => x + y, 0);
    expect(a!.target).toBe(4);
    expect(a!.base.numTokens).toBe(5);
    a!.base.tokenLogprobs.forEach((lp, j) => expect(Math.abs(lp - baseRef[j]!)).toBeLessThan(1e-4));
    expect(a!.chunks.map((c) => c.index)).toEqual([0, 1, 2, 3]);
    let moved = 0;
    for (const c of a!.chunks) {
      const masked = referenceTarget(ctx.fx, ids, targetStart, [span(c.index)]);
      expect(Math.abs(c.mask!.logprob - sum(masked))).toBeLessThan(1e-4);
      c.mask!.tokenDeltas.forEach((d, j) => expect(Math.abs(d - (masked[j]! - baseRef[j]!))).toBeLessThan(1e-4));
      moved = Math.max(moved, Math.abs(c.mask!.delta));
      const edited = chunkIds.filter((_, k) => k !== c.index).flatMap((x) => x.ids);
      const removed = referenceTarget(ctx.fx, edited, targetStart - chunkIds[c.index]!.ids.length);
      expect(Math.abs(c.remove!.logprob - sum(removed))).toBeLessThan(1e-4);
      expect(c.remove!.delta).toBeCloseTo(c.remove!.logprob - a!.base.logprob, 10);
      expect(c.remove!.meanDelta).toBeCloseTo(c.remove!.logprob / 5 - a!.base.logprob / 5, 10);
    }
    // The knockouts matter (else the comparisons above prove little).
    expect(moved).toBeGreaterThan(1e-3);
    // keep-only (everything before the target but the ablated chunks) = nothing dropped here;
    // the sweep drops the first history turns.
    expect(a!.keepOnly!.mask!.delta).toBeCloseTo(0, 5);
    expect(a!.sweep!.map((s) => [s.keep, s.dropped])).toEqual([
      [0, [1, 2]],
      [1, [1]],
      [5, []],
    ]);
    const sweep0 = referenceTarget(ctx.fx, ids, targetStart, [span(1), span(2)]);
    expect(Math.abs(a!.sweep![0]!.mask!.logprob - sum(sweep0))).toBeLessThan(1e-4);
    const sweep1 = referenceTarget(
      ctx.fx,
      [...chunkIds[0]!.ids, ...chunkIds[2]!.ids, ...chunkIds[3]!.ids, ...chunkIds[4]!.ids],
      targetStart - 6,
    );
    expect(Math.abs(a!.sweep![1]!.remove!.logprob - sum(sweep1))).toBeLessThan(1e-4);
    // Random patterns: each pattern's log-likelihood is the reference's with the dropped chunks masked.
    const fit = a!.subsets!;
    expect(fit.patterns).toHaveLength(6);
    fit.patterns.forEach((p, n) => {
      const hidden = p.flatMap((kept, j) => (kept ? [] : [span(fit.chunks[j]!)]));
      expect(Math.abs(fit.logprobs[n]! - sum(referenceTarget(ctx.fx, ids, targetStart, hidden)))).toBeLessThan(1e-4);
    });

    // The same variants, each scored alone with nothing shared: equal within 1e-5; the
    // shared job computed fewer tokens than the unshared one when the family allows sharing.
    const alone = new Scorer(ctx.engine, { prefixSharing: false });
    const solo = await Promise.all(prepared.units.map(async (u) => (await alone.scoreUnits([u])).scores[0]!));
    prepared.units.forEach((_, i) =>
      scores[i]!.logprobs.forEach((lp, j) => expect(Math.abs(lp - solo[i]!.logprobs[j]!)).toBeLessThan(1e-5)),
    );
    if (shared.cache) expect(work.tokensComputed).toBeLessThan(0.6 * work.tokensRequested);
  });
});

describe('attribution planning and validation', () => {
  const ctx = familyEngine('llama');

  it('a masked row that starts before its mask ends runs in two blocks, broken where the mask starts to apply', () => {
    const row = {
      unit: 0,
      tokens: [1, 2, 3, 4, 5, 6, 7, 8],
      startPosition: 0,
      scoredFrom: 5,
      targetFrom: 0,
      targetCount: 3,
      pastRow: 0,
      hidden: [{ start: 2, end: 6 }],
    };
    const p = plan([row], { maxBatchTokens: 64 });
    expect(
      p.passes.map((x) => [x.rows[0]!.startPosition, x.rows[0]!.tokens.length, x.rows[0]!.hidden ?? null, x.past ?? null, x.keep]),
    ).toEqual([
      [0, 6, null, null, true],
      [6, 2, [{ start: 2, end: 6 }], 0, false],
    ]);
    // Its scored positions: one (5) in the first block, two in the second.
    expect(p.passes.map((x) => [x.rows[0]!.scoredFrom, x.rows[0]!.targetFrom, x.rows[0]!.targetCount])).toEqual([
      [5, 0, 1],
      [0, 1, 2],
    ]);
  });

  it('each sample draws its own random patterns from the seed and its index; the count of variants is known beforehand', async () => {
    const ids = (n: number, from: number) => Array.from({ length: n }, (_, i) => from + i);
    const sample = (from: number): AttributionSample => ({
      chunkIds: ['a', 'b', 'c', 'd', 'e', 'f'].map((label, k) => ({ label, ids: ids(2, from + 2 * k) })),
    });
    const patterns = async (samples: AttributionSample[], seed: number) => {
      const options = { subsets: 24, seed, interventions: ['mask' as const] };
      const prepared = await prepareAttribution(ctx.engine, samples, options);
      expect(prepared.units).toHaveLength(countVariants(samples, options).total);
      // Patterns are fixed when the variants are made; the scores do not change them.
      return prepared
        .finish(prepared.units.map((u) => ({ logprobs: u.targets.map(() => -1), greedy: u.targets.map(() => false) })))
        .map((a) => a.subsets!.patterns);
    };
    const [p0, p1] = await patterns([sample(5), sample(5)], 3);
    expect(p1).not.toEqual(p0); // same chunk count, same seed: other patterns
    // A sample's patterns depend on the seed and its place only, not on the other samples.
    const [, q1] = await patterns([sample(40), sample(5)], 3);
    expect(q1).toEqual(p1);
    const [alone] = await patterns([sample(5)], 3);
    expect(alone).toEqual(p0);
    const [other] = await patterns([sample(5)], 4);
    expect(other).not.toEqual(p0);
  });

  it('refuses what it cannot attribute, naming the field', async () => {
    const ids = (n: number) => Array.from({ length: n }, (_, i) => 5 + i);
    const cases: [AttributionSample[], object, RegExp][] = [
      [
        [
          {
            chunkIds: [
              { label: 'a', ids: ids(3) },
              { label: 'b', ids: ids(2) },
            ],
            target: 'zz',
          },
        ],
        {},
        /samples\[0\]\.target: no chunk is labelled "zz"/,
      ],
      [
        [
          {
            chunkIds: [
              { label: 'a', ids: ids(3) },
              { label: 'b', ids: ids(2) },
            ],
            target: 'a',
          },
        ],
        {},
        /samples\[0\]\.target: the target is the first chunk/,
      ],
      [
        [
          {
            chunkIds: [
              { label: 'a', ids: ids(3) },
              { label: 'b', ids: ids(2) },
            ],
            ablate: ['b'],
          },
        ],
        {},
        /samples\[0\]\.ablate\[0\]: no chunk before the target is labelled "b"/,
      ],
      [
        [
          {
            chunkIds: [
              { label: 'a', ids: ids(3) },
              { label: 'b', ids: ids(2) },
            ],
          },
        ],
        { interventions: ['erase'] },
        /interventions\[0\]: must be remove or mask/,
      ],
      [
        [
          {
            chunkIds: [
              { label: 'a', ids: ids(3) },
              { label: 'b', ids: ids(2) },
            ],
          },
        ],
        { subsets: -1 },
        /random_subsets: must be a whole number/,
      ],
      [
        [
          {
            chunkIds: [
              { label: 'a', ids: ids(3) },
              { label: 'b', ids: ids(2) },
            ],
          },
        ],
        { historySweep: [1.5] },
        /history_sweep\[0\]: must be a whole number/,
      ],
    ];
    for (const [samples, options, message] of cases)
      await expect(prepareAttribution(ctx.engine, samples, options)).rejects.toThrow(message);
  });
});

describe('attribution over chat messages and text chunks', () => {
  const TEMPLATE =
    "{{ bos_token }}{% for m in messages %}{% if m.role == 'system' %}<<SYS>>{{ m.content }}<</SYS>>\n{% elif m.role == 'user' %}[INST] {{ m.content }} [/INST]{% else %} {{ m.content }}{{ eos_token }}\n{% endif %}{% endfor %}";
  let engine: Engine;
  beforeAll(async () => {
    const dir = makeFixture({ ...FAMILY_FIXTURES.llama!, maxPositions: 512 }).dir;
    const cfgFile = path.join(dir, 'tokenizer_config.json');
    fs.writeFileSync(cfgFile, JSON.stringify({ ...JSON.parse(fs.readFileSync(cfgFile, 'utf8')), chat_template: TEMPLATE }));
    engine = await Engine.load(dir, { threads: 1 });
  });
  afterAll(() => engine?.release());

  it('removing a message or a passage inside one re-renders the conversation; masking keeps the BOS visible', async () => {
    const messages = [
      { role: 'system', content: 'Be brief.' },
      { role: 'user', content: 'Where is the tower?' },
      { role: 'assistant', content: 'In Paris.' },
      {
        role: 'user',
        content: '',
        chunks: [
          { label: 'passage#1', text: 'The tower is made of iron. ' },
          { label: 'passage#2', text: 'Bananas are yellow. ' },
          { label: 'question', text: 'How tall is it?' },
        ],
      },
      { role: 'assistant', content: 'About 330 metres.' },
    ];
    const scorer = new Scorer(engine, { prefixSharing: false });
    const prepared = await prepareAttribution(engine, [{ messages }], { historySweep: [1] });
    const [a] = prepared.finish((await scorer.scoreUnits(prepared.units)).scores);
    expect(a!.chunks.map((c) => c.label)).toEqual(['system', 'user#1', 'assistant#1', 'passage#1', 'passage#2', 'question']);
    // Each removal equals the conversation rendered without it, scored on its own.
    const alone = async (msgs: typeof messages) => {
      const p = await prepareAttribution(engine, [{ messages: msgs }], { interventions: ['mask'] });
      return p.finish((await scorer.scoreUnits(p.units)).scores)[0]!.base.logprob;
    };
    expect(a!.chunks[1]!.remove!.logprob).toBeCloseTo(await alone(messages.filter((_, k) => k !== 1)), 5);
    const noPassage = messages.map((m, k) => (k === 3 ? { ...m, chunks: m.chunks!.filter((c) => c.label !== 'passage#2') } : m));
    expect(a!.chunks[4]!.remove!.logprob).toBeCloseTo(await alone(noPassage), 5);
    // History turns of a chat: the user and assistant messages before the target.
    expect(a!.sweep![0]!.dropped).toEqual([1]);
    // The system chunk starts with BOS: masking it leaves position 0 visible, so the
    // target equals a reference with positions 1.. of the chunk hidden (checked on the unit).
    const maskUnit = prepared.units.find((u) => u.hidden?.length === 1 && u.hidden[0]!.start === 1);
    expect(maskUnit?.hidden).toEqual([{ start: 1, end: a!.spans[0]!.end }]);
  });

  it('a target left first by a removal is predicted as a continuation of an empty context is (from BOS), not refused', async () => {
    // No BOS in the text (as a ChatML dialogue with no system message): removing everything
    // before the target left nothing to predict its first token, and the whole call failed.
    const chunks = [
      { label: 'user#1', text: 'User: is the sky blue?\n' },
      { label: 'assistant#1', text: 'Bot: yes, it is blue.' },
    ];
    const scorer = new Scorer(engine, { prefixSharing: false });
    const prepared = await prepareAttribution(engine, [{ chunks }], { interventions: ['remove'] });
    const [a] = prepared.finish((await scorer.scoreUnits(prepared.units)).scores);
    const target = (await engine.tokenizer.encodeAsync(chunks[1]!.text, false)) as number[];
    const [alone] = (await directScoring(scorer).loglikelihood([{ context: [], continuations: [target] }]))[0]!;
    expect(a!.chunks[0]!.remove!.logprob).toBeCloseTo(alone!.logprob, 5);
    expect(a!.chunks[0]!.remove!.logprob).not.toBe(a!.base.logprob);
  });

  it('text chunks: remove re-tokenises the rest', async () => {
    const chunks = [
      { label: 'instruction', text: 'Answer from the knowledge.\n' },
      { label: 'history', text: 'User: hi\nBot: hello\n' },
      { label: 'knowledge', text: 'Knowledge: the sky is blue.\n' },
      { label: 'response', text: 'Bot: it is blue.' },
    ];
    const scorer = new Scorer(engine);
    const prepared = await prepareAttribution(engine, [{ chunks, addSpecialTokens: true }], { interventions: ['remove'] });
    const [a] = prepared.finish((await scorer.scoreUnits(prepared.units)).scores);
    const p2 = await prepareAttribution(engine, [{ chunks: chunks.filter((c) => c.label !== 'knowledge'), addSpecialTokens: true }], {
      interventions: ['remove'],
    });
    const [b] = p2.finish((await new Scorer(engine, { prefixSharing: false }).scoreUnits(p2.units)).scores);
    expect(Math.abs(a!.chunks[2]!.remove!.logprob - b!.base.logprob)).toBeLessThan(1e-5);
  });
});

describe('leastSquares', () => {
  it('recovers exact linear data and satisfies the normal equations on noisy data', () => {
    const r = rng(9);
    const X: number[][] = Array.from({ length: 40 }, () => Array.from({ length: 5 }, () => (r() < 0.5 ? 1 : 0)));
    const w = [0.5, -1.25, 2, 0, 3.5];
    const exact = X.map((x) => 7 + x.reduce((s, v, j) => s + v * w[j]!, 0));
    const fit = leastSquares(X, exact);
    expect(fit.intercept).toBeCloseTo(7, 9);
    fit.weights.forEach((v, j) => expect(v).toBeCloseTo(w[j]!, 9));
    expect(fit.r2).toBeCloseTo(1, 12);
    const noisy = exact.map((y) => y + (r() - 0.5));
    const f2 = leastSquares(X, noisy);
    const residual = noisy.map((y, i) => y - f2.intercept - X[i]!.reduce((s, v, j) => s + v * f2.weights[j]!, 0));
    // Residuals orthogonal to the intercept and every column.
    expect(Math.abs(residual.reduce((a, b) => a + b, 0))).toBeLessThan(1e-9);
    for (let j = 0; j < 5; j++) expect(Math.abs(residual.reduce((a, e, i) => a + e * X[i]![j]!, 0))).toBeLessThan(1e-9);
    expect(f2.r2).toBeGreaterThan(0.5);
    expect(f2.r2).toBeLessThan(1);
  });
});
