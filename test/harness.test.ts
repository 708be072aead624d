// lm-evaluation-harness semantics: whitespace moved, whole-vs-context encoding, empty
// context, left truncation, add_bos, rolling windows, Min-K% — each checked against the
// reference forward pass on the token sequence the harness would build.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Engine } from '../src/engine/engine.js';
import { Scorer } from '../src/core/scorer.js';
import { minKOf, rollingWindows } from '../src/requests/scoring.js';
import { InvalidArgumentError } from '../src/common/errors.js';
import { FAMILY_FIXTURES, makeFixture, type Fixture } from './fixtures.js';
import { referenceTokenLogprobs } from './reference.js';
import { directScoring } from '../src/requests/scoring.js';

let fx: Fixture;
let engine: Engine;
let scorer: Scorer;
beforeAll(async () => {
  fx = makeFixture(FAMILY_FIXTURES.llama!);
  engine = await Engine.load(fx.dir, { threads: 1 });
  scorer = new Scorer(engine);
});
afterAll(async () => engine?.release());

const enc = (text: string, bos = false) => engine.tokenizer.encode(text, bos);
function expectClose(actual: number[], expected: number[], tol = 1e-4) {
  expect(actual.length).toBe(expected.length);
  actual.forEach((a, i) => expect(Math.abs(a - expected[i]!)).toBeLessThan(tol));
}

describe('continuation log-likelihood', () => {
  it('moves trailing whitespace of the context to the continuation', async () => {
    const [[a]] = (await directScoring(scorer).loglikelihood([{ context: 'Hello there ', continuations: ['world'] }])) as any;
    const [[b]] = (await directScoring(scorer).loglikelihood([{ context: 'Hello there', continuations: [' world'] }])) as any;
    const ctx = enc('Hello there');
    expect(a.tokenIds).toEqual(enc('Hello there world').slice(ctx.length));
    expect(a.tokenIds).not.toEqual(enc('world'));
    expect(a.tokenIds).toEqual(b.tokenIds);
    expect(Math.abs(a.logprob - b.logprob)).toBeLessThan(1e-6);
    expect(a.numChars).toBe(5); // the continuation as given, for acc_norm
    const ref = referenceTokenLogprobs(fx, enc('Hello there world'), a.numTokens);
    expectClose(a.tokenLogprobs, ref.logprobs);
    expect(a.isGreedy).toBe(ref.greedy.every(Boolean));
  });

  it('takes the continuation tokens from the whole encoding when a word is split', async () => {
    const text = 'Knowledge: The tower was built for the World';
    // Find a split inside a word where the context's tokens are not a prefix of the whole's.
    let split = -1;
    for (let i = 1; i < text.length - 1 && split < 0; i++) {
      const whole = enc(text);
      const ctx = enc(text.slice(0, i));
      if (text[i] !== ' ' && text[i - 1] !== ' ' && ctx.some((t, k) => whole[k] !== t)) split = i;
    }
    expect(split).toBeGreaterThan(0);
    const context = text.slice(0, split);
    const continuation = text.slice(split);
    const [[r]] = (await directScoring(scorer).loglikelihood([{ context, continuations: [continuation] }])) as any;
    const ctx = enc(context);
    const whole = enc(text);
    expect(r.tokenIds).toEqual(whole.slice(ctx.length));
    // Scored as the harness does: context tokens, then the whole's tail.
    const ref = referenceTokenLogprobs(fx, [...ctx, ...whole.slice(ctx.length)], r.numTokens);
    expectClose(r.tokenLogprobs, ref.logprobs);
  });

  it('scores an empty context after the prefix token (BOS)', async () => {
    const [[r]] = (await directScoring(scorer).loglikelihood([{ context: '', continuations: ['Once upon a time'] }])) as any;
    expect(r.tokenIds).toEqual(enc('Once upon a time'));
    const ref = referenceTokenLogprobs(fx, [engine.tokenizer.bosId!, ...r.tokenIds], r.numTokens);
    expectClose(r.tokenLogprobs, ref.logprobs);
  });

  it('adds BOS through the tokenizer when add_bos is set', async () => {
    const [[withBos]] = (await directScoring(scorer).loglikelihood([{ context: 'The bot', continuations: [' said'], addBos: true }])) as any;
    const ids = enc('The bot', true);
    expect(ids[0]).toBe(engine.tokenizer.bosId);
    const [[byIds]] = (await directScoring(scorer).loglikelihood([{ context: ids, continuations: [withBos.tokenIds] }])) as any;
    expectClose(withBos.tokenLogprobs, byIds.tokenLogprobs, 1e-6);
  });

  it('truncates from the left: (ctx + cont)[-(L+1):][:-1]', async () => {
    const L = 12;
    const short = new Scorer(engine, { maxLength: L });
    const context = 'User: Can you tell me about the Eiffel Tower? Bot:';
    const [[r]] = (await directScoring(short).loglikelihood([{ context, continuations: [' The tower'] }])) as any;
    const all = [...enc(context), ...r.tokenIds];
    expect(r.truncatedTokens).toBe(all.length - (L + 1));
    const ref = referenceTokenLogprobs(fx, all.slice(-(L + 1)), r.numTokens);
    expectClose(r.tokenLogprobs, ref.logprobs);
    await expect(directScoring(short).loglikelihood([{ context, continuations: [' The tower'], truncation: 'error' }])).rejects.toThrow(
      /items\[0\]\.continuations\[0\].*over the maximum length 12/,
    );
  });

  it('reports character and UTF-8 byte lengths of multi-byte continuations', async () => {
    const [[r]] = (await directScoring(scorer).loglikelihood([{ context: 'She said', continuations: [' héllo 😀'] }])) as any;
    expect(r.numChars).toBe(8);
    expect(r.numBytes).toBe(12);
    const ref = referenceTokenLogprobs(fx, enc('She said héllo 😀'), r.numTokens);
    expectClose(r.tokenLogprobs, ref.logprobs);
  });

  it('refuses bad input naming the field', async () => {
    const vocab = engine.config.vocabSize;
    const cases: [any, RegExp][] = [
      [{ context: 'a', continuations: [''] }, /items\[0\]\.continuations\[0\]: continuation is empty/],
      [{ context: [1, 2], continuations: [[3, vocab]] }, /items\[0\]\.continuations\[0\]\[1\]: token id \d+ is outside/],
      [{ context: [1, -1], continuations: [[3]] }, /items\[0\]\.context_ids\[1\]/],
      [{ context: 'a', continuations: [[3]] }, /both be text or both be token ids/],
      [{ context: 'a', continuations: ['b'], topK: -1 }, /items\[0\]\.top_k/],
      [{ context: 'a', continuations: [] }, /items\[0\]\.continuations: at least one/],
    ];
    for (const [req, message] of cases) {
      const err = await directScoring(scorer).loglikelihood([req]).catch((e) => e);
      expect(err).toBeInstanceOf(InvalidArgumentError);
      expect(err.message).toMatch(message);
    }
  });
});

describe('rolling log-likelihood', () => {
  it('builds the harness windows (closed form for L = 4, ten tokens)', () => {
    const tokens = Array.from({ length: 10 }, (_, i) => i);
    // First window predicts 0..3 after the prefix token; later windows predict disjoint
    // spans with the L-1 tokens before them as context (made disjoint).
    expect(rollingWindows(tokens, -1, 4)).toEqual([
      [[-1], [0, 1, 2, 3]],
      [[3], [4, 5, 6, 7]],
      [
        [5, 6, 7],
        [8, 9],
      ],
    ]);
    const predicted = rollingWindows(
      Array.from({ length: 57 }, (_, i) => i),
      -1,
      8,
    ).flatMap(([, b]) => b);
    expect(predicted).toEqual(Array.from({ length: 57 }, (_, i) => i));
  });

  it('sums windowed log-probs, mean loss and Min-K% against the reference', async () => {
    const L = 8;
    const short = new Scorer(engine, { maxLength: L });
    const text = 'The weather today is sunny and warm, so we will walk';
    const [r] = await directScoring(short).rolling([{ text, minKPercent: 30 }]);
    const tokens = enc(text);
    expect(r!.numTokens).toBe(tokens.length);
    // Independent windowing: every token t is predicted from the (up to) L tokens before
    // it in its window; window starts at multiples of L in the token list.
    const expected: number[] = [];
    for (let start = 0; start < tokens.length; start += L) {
      const span = tokens.slice(start, start + L);
      const input =
        start === 0 ? [engine.tokenizer.bosId!, ...span] : [...tokens.slice(Math.max(0, start + span.length - L - 1), start), ...span];
      expected.push(...referenceTokenLogprobs(fx, input, span.length).logprobs);
    }
    expectClose(r!.tokenLogprobs, expected);
    const sum = expected.reduce((a, b) => a + b, 0);
    expect(Math.abs(r!.logprob - sum)).toBeLessThan(1e-3);
    expect(Math.abs(r!.meanLoss + sum / tokens.length)).toBeLessThan(1e-4);
    const k = Math.floor(tokens.length * 0.3);
    const lowest = [...expected].sort((a, b) => a - b).slice(0, k);
    expect(Math.abs(r!.minKLogprob - lowest.reduce((a, b) => a + b, 0) / k)).toBeLessThan(1e-4);
  });
});

describe('paper-exact metric modes', () => {
  it("KIEval's loss: no prefix token, the first token never predicted, tokens 1..n−1 scored (windows too)", async () => {
    const text = 'The weather today is sunny and warm, so we will walk';
    const tokens = enc(text);
    const [r] = await directScoring(scorer).rolling([{ text, skipFirstToken: true }]);
    expect(r!.numTokens).toBe(tokens.length - 1);
    expectClose(r!.tokenLogprobs, referenceTokenLogprobs(fx, tokens, tokens.length - 1).logprobs);
    const sum = r!.tokenLogprobs.reduce((a, b) => a + b, 0);
    expect(Math.abs(r!.meanLoss + sum / (tokens.length - 1))).toBeLessThan(1e-9);
    // In windows of L = 8: every token after the first from the (up to) L tokens before it.
    const L = 8;
    const [w] = await directScoring(new Scorer(engine, { maxLength: L })).rolling([{ text, skipFirstToken: true }]);
    const expected: number[] = [];
    for (let t = 1; t < tokens.length; t += L) {
      const span = tokens.slice(t, t + L);
      const input = [...tokens.slice(Math.max(0, t + span.length - L - 1), t), ...span];
      expected.push(...referenceTokenLogprobs(fx, input, span.length).logprobs);
    }
    expectClose(w!.tokenLogprobs, expected);
    await expect(directScoring(scorer).rolling([{ text: [5], skipFirstToken: true }])).rejects.toThrow(/items\[0\]\.text: one token: with skip_first_token nothing is predicted/);
  });

  it('Min-K% for several k from one pass, with the at-least-one rule or KIEval skipping ⌊n·k⌋ = 0 (hand-checked)', async () => {
    // Hand-checked: ascending [-5, -3, -2, -1].
    expect(minKOf([-5, -3, -2, -1], 50, false)).toEqual({ kPercent: 50, count: 2, logprob: -4, skipped: false });
    expect(minKOf([-5, -3, -2, -1], 20, false)).toEqual({ kPercent: 20, count: 1, logprob: -5, skipped: false });
    expect(minKOf([-5, -3, -2, -1], 20, true)).toMatchObject({ count: 0, skipped: true });
    expect(minKOf([-5, -3, -2, -1], 20, true).logprob).toBeNaN();
    expect(minKOf([-5, -3, -2, -1], 25, true)).toEqual({ kPercent: 25, count: 1, logprob: -5, skipped: false });
    expect(minKOf([-5, -3, -2, -1], 100, true)).toEqual({ kPercent: 100, count: 4, logprob: -11 / 4, skipped: false });
    const text = 'short text here';
    const ks = [5, 10, 20, 30, 40, 50, 60];
    const [skip] = await directScoring(scorer).rolling([{ text, minKPercent: ks[0], minKPercents: ks.slice(1), minKRule: 'skip' }]);
    const [keep] = await directScoring(scorer).rolling([{ text, minKPercent: ks[0], minKPercents: ks.slice(1) }]);
    const n = skip!.numTokens;
    const sorted = [...skip!.tokenLogprobs].sort((a, b) => a - b);
    expect(skip!.minK.map((m) => m.kPercent)).toEqual(ks);
    skip!.minK.forEach((m, j) => {
      const count = Math.floor((n * ks[j]!) / 100);
      expect(m.count).toBe(count);
      expect(m.skipped).toBe(count === 0);
      if (count > 0) expect(Math.abs(m.logprob - sorted.slice(0, count).reduce((a, b) => a + b, 0) / count)).toBeLessThan(1e-9);
      expect(keep!.minK[j]!.count).toBe(Math.max(1, count));
    });
    // A short text really exercises the rule: at 5% nothing is left.
    expect(skip!.minK[0]!.skipped).toBe(true);
    expect(skip!.minKLogprob).toBeNaN();
    expect(keep!.minKLogprob).toBe(sorted[0]);
  });

  it("the context's own log-probs, the mean per token, and unconditional normalisation", async () => {
    const context = 'Question: what colour is the sky? Answer:';
    const neutral = 'Answer:';
    const [conts] = await directScoring(scorer).loglikelihood([{ context, continuations: [' blue', ' green'], contextLogprobs: true, unconditionalContext: neutral }]);
    const ctx = enc(context);
    // Context tokens 1..n−1, each given all before it.
    const c = conts![0]!.context!;
    expect(c.tokenIds).toEqual(ctx.slice(1));
    expectClose(c.tokenLogprobs, referenceTokenLogprobs(fx, ctx, ctx.length - 1).logprobs);
    expect(conts![1]!.context).toBe(c);
    for (const [j, cont] of [' blue', ' green'].entries()) {
      const a = conts![j]!;
      expect(a.meanLogprob).toBeCloseTo(a.logprob / a.numTokens, 12);
      const [[alone]] = (await directScoring(scorer).loglikelihood([{ context: neutral, continuations: [cont] }])) as any;
      expect(Math.abs(a.unconditional!.logprob - alone.logprob)).toBeLessThan(1e-6);
      expect(a.unconditional!.difference).toBeCloseTo(a.logprob - a.unconditional!.logprob, 12);
      // The whole sequence's log-likelihood (CHARPEval App. A): context + continuation.
      const whole = enc(context + cont);
      const ref = referenceTokenLogprobs(fx, whole, whole.length - 1).logprobs.reduce((x, y) => x + y, 0);
      expect(Math.abs(c.logprob + a.logprob - ref)).toBeLessThan(1e-3);
    }
    await expect(directScoring(scorer).loglikelihood([{ context, continuations: [' x'], unconditionalContext: [5, 6] }])).rejects.toThrow(
      /items\[0\]\.unconditional: the neutral context must be of the same kind/,
    );
  });
});
