// Generation: the exactness contract on every fixture (a generated token's log-prob is the
// bits Score gives it after the same prefix; greedy tokens are the argmax; seeded samples
// are the same batched or alone), the sampler against closed forms, stop strings and EOS,
// and the OpenAI routes as lm-evaluation-harness's generate_until and the openai client send them.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Batcher } from '../src/core/batcher.js';
import { Engine } from '../src/engine/engine.js';
import { Scorer } from '../src/core/scorer.js';
import type { Unit, UnitScore } from '../src/core/units.js';
import { rng } from '../src/common/random.js';
import { Generation, generationModel, runGenerations, type GenerationModel } from '../src/requests/generate.js';
import { sampleToken, type SamplingParams } from '../src/requests/sampling.js';
import type { LoadedModel } from '../src/serving/repository.js';
import type { CtxprobeServer } from '../src/server.js';
import { FAMILY_FIXTURES, familyEngine, makeFixture } from './fixtures.js';
import { referenceTokenLogprobs } from './reference.js';
import { client, postJson, scrape, serveModel, streamed, unary } from './helpers.js';
import { serveCli } from './cli-serve.js';
import { directScoring } from '../src/requests/scoring.js';

const GREEDY: SamplingParams = { temperature: 0, topP: 1, topK: 0, minP: 0, maxTokens: 8, stop: [], n: 1, logprobs: 0 };

const randomTokens = (r: () => number, n: number, vocab: number) => Array.from({ length: n }, () => 3 + Math.floor(r() * (vocab - 3)));

describe.each(Object.keys(FAMILY_FIXTURES))('%s: generation exactness', (family) => {
  const ctx = familyEngine(family);

  it('each generated log-prob is the bits Score gives that token after the same prefix; greedy tokens are its argmax; seeded samples are the same batched or alone', async () => {
    const engine = ctx.engine;
    const vocab = engine.config.vocabSize;
    const r = rng(5);
    const scorer = new Scorer(engine, { maxBatchTokens: 16 });
    const batcher = new Batcher('m', scorer);
    const step = (units: Unit[], continuing: boolean) => batcher.submit(units, { continuing }).result;
    const model = generationModel(engine, scorer);
    // A prompt longer than one pass (16 tokens): it is prefilled in chunks when cached.
    const prompts = [randomTokens(r, 21, vocab), randomTokens(r, 5, vocab)];
    prompts.push([...prompts[0]!.slice(0, 12), ...randomTokens(r, 3, vocab)]);
    const greedy = await runGenerations(
      prompts.map((p) => new Generation(model, p, GREEDY)),
      step,
    );

    const alone = new Scorer(engine, { prefixSharing: false });
    for (const [i, [choice]] of greedy.entries()) {
      const seq = prompts[i]!.concat(choice!.tokens);
      for (const [k, token] of choice!.tokens.entries()) {
        // Score of this token after the same prefix, computed whole, uncached, alone.
        const context = seq.slice(0, prompts[i]!.length + k);
        const score = (await directScoring(alone).loglikelihood([{ context, continuations: [[token]], topK: 1 }]))[0]![0];
        expect(choice!.logprobs[k]).toBe(score!.tokenLogprobs[0]);
        // The argmax: the most likely token of that distribution (on an exact tie the
        // lowest id, as torch.argmax; TopK lists it first too).
        expect(score!.topK![0]!.ids[0]).toBe(token);
        expect(score!.isGreedy).toBe(true);
      }
      // And the float64 reference agrees with the numbers (each after its own prefix:
      // longrope's positions depend on the sequence's length).
      choice!.logprobs.forEach((lp, k) => {
        const ref = referenceTokenLogprobs(ctx.fx, seq.slice(0, prompts[i]!.length + k + 1), 1);
        expect(Math.abs(lp - ref.logprobs[0]!)).toBeLessThan(1e-4);
      });
    }

    // Seeded sampling: batched with the others, or alone on a fresh scheduler, the same.
    const sampling = { ...GREEDY, temperature: 1, topP: 0.9, seed: 42, n: 2 };
    const together = await runGenerations(
      prompts.map((p) => new Generation(model, p, sampling)),
      step,
    );
    for (const [i, p] of prompts.entries()) {
      const solo = new Scorer(engine, { maxBatchTokens: 64 });
      const soloBatcher = new Batcher('solo', solo);
      const [choices] = await runGenerations(
        [new Generation(generationModel(engine, solo), p, sampling)],
        (u, c) => soloBatcher.submit(u, { continuing: c }).result,
      );
      expect(choices!.map((c) => c.tokens)).toEqual(together[i]!.map((c) => c.tokens));
      expect(choices!.map((c) => c.logprobs)).toEqual(together[i]!.map((c) => c.logprobs));
    }
  });
});

describe('continuous batching of sequences of different lengths', () => {
  // The bench model's attention shape (head_dim 64, 2 threads as on a 2-core server): there
  // the CPU kernels' sums over key slots rounded differently when a shorter row's new token
  // sat after the pass's longest past, masked slots between (4,229 of 32,000 log-probs off
  // by an ulp with 3 slots between).
  let engine: Engine;
  beforeAll(async () => {
    const fx = makeFixture({
      family: 'llama',
      hidden: 128,
      layers: 2,
      heads: 2,
      kvHeads: 1,
      intermediate: 256,
      vocab: 300,
      maxPositions: 512,
      seed: 23,
      scale: 0.1,
    });
    engine = await Engine.load(fx.dir, { threads: 2 });
  });
  afterAll(() => engine?.release());

  it('steps sequences of different lengths in shared passes, each getting the bits it gets alone', async () => {
    const vocab = engine.config.vocabSize;
    let widest = 0;
    let counting = true;
    engine.onPass((p) => counting && (widest = Math.max(widest, p.rows)));
    const r = rng(8);
    const prompts = [60, 63, 90, 101, 75].map((n) => randomTokens(r, n, vocab));
    // 20 steps: each sequence's path is compacted (16 pieces) while it steps in shared passes.
    const params = { ...GREEDY, maxTokens: 20, logprobs: 3 };
    const scorer = new Scorer(engine);
    const batcher = new Batcher('m', scorer);
    const together = await runGenerations(
      prompts.map((p) => new Generation(generationModel(engine, scorer), p, params)),
      (u, c) => batcher.submit(u, { continuing: c }).result,
    );
    counting = false;
    // The five decode steps of a round share one pass (before, only rows of one past
    // length did: here each ran alone).
    expect(widest).toBe(prompts.length);
    for (const [i, p] of prompts.entries()) {
      const solo = new Scorer(engine);
      const soloBatcher = new Batcher('solo', solo);
      const [alone] = await runGenerations(
        [new Generation(generationModel(engine, solo), p, params)],
        (u, c) => soloBatcher.submit(u, { continuing: c }).result,
      );
      expect(together[i]![0]!.tokens).toEqual(alone![0]!.tokens);
      expect(together[i]![0]!.logprobs).toEqual(alone![0]!.logprobs);
      expect(together[i]![0]!.top).toEqual(alone![0]!.top);
    }
  });

  it('streams of separate requests step together: every decode step of five is one pass of five rows', async () => {
    const vocab = engine.config.vocabSize;
    const r = rng(9);
    const prompts = [40, 41, 57, 33, 70].map((n) => randomTokens(r, n, vocab));
    const params = { ...GREEDY, maxTokens: 6, ignoreEos: true };
    const scorer = new Scorer(engine);
    const batcher = new Batcher('m', scorer);
    const rows: number[] = [];
    let counting = true;
    engine.onPass((p) => counting && rows.push(p.rows));
    // Each its own runGenerations, as five clients' calls are, through an async step as the
    // serving layer's: each resubmits its next step from its own promise callbacks, some
    // after the round's own (a round started as the first resubmits took it alone).
    await Promise.all(
      prompts.map((p) =>
        runGenerations([new Generation(generationModel(engine, scorer), p, params)], async (u, c) => await batcher.submit(u, { continuing: c }).result),
      ),
    );
    counting = false;
    // The prompts' pass(es), five rows in all, then maxTokens − 1 decode steps of every
    // stream at once.
    const steps = params.maxTokens - 1;
    expect(rows.slice(-steps)).toEqual(new Array(steps).fill(prompts.length));
    expect(rows.slice(0, -steps).reduce((a, b) => a + b, 0)).toBe(prompts.length);
  });

  it('a sequence stepping alone reads its past where it lies: its steps copy a fraction of it, and it gets the bits of a prompt run whole', async () => {
    const vocab = engine.config.vocabSize;
    const prompt = randomTokens(rng(9), 101, vocab);
    // The prompt in 32-token query blocks (four pieces in the cache), then 20 steps.
    const generate = async (maxTokens: number, maxBatchTokens: number) => {
      const scorer = new Scorer(engine, { maxBatchTokens });
      const batcher = new Batcher('m', scorer);
      const before = await engine.laidOutKvBytes();
      const [choices] = await runGenerations(
        [new Generation(generationModel(engine, scorer), prompt, { ...GREEDY, maxTokens, logprobs: 3 })],
        (u, c) => batcher.submit(u, { continuing: c }).result,
      );
      return { choice: choices![0]!, copied: (await engine.laidOutKvBytes()) - before };
    };
    const first = await generate(1, 32);
    const all = await generate(21, 32);
    // Each step used to lay out its whole past (≥ 101 slots); now the path is compacted as
    // it continues, and a step copies only the pieces after the compacted one.
    const stepsCopied = all.copied - first.copied;
    expect(stepsCopied).toBeGreaterThan(0);
    expect(stepsCopied).toBeLessThan((20 * prompt.length * engine.kvBytesPerToken) / 3);
    // The prompt run in one pass, each step laying out nothing but its own new slots' copy
    // for the cache: the same bits.
    const whole = await generate(21, 4096);
    expect(all.choice.tokens).toEqual(whole.choice.tokens);
    expect(all.choice.logprobs).toEqual(whole.choice.logprobs);
    expect(all.choice.top).toEqual(whole.choice.top);
  });
});

describe('a long generation in the prefix cache', () => {
  const ctx = familyEngine('llama');

  it('reads its path as a few pieces (compacted as it grows) and its log-probs stay the bits of an echo of the whole sequence', async () => {
    const engine = ctx.engine;
    const scorer = new Scorer(engine, { maxBatchTokens: 16 });
    const batcher = new Batcher('m', scorer);
    const prompt = randomTokens(rng(3), 9, engine.config.vocabSize);
    const [[choice]] = (await runGenerations(
      [new Generation(generationModel(engine, scorer), prompt, { ...GREEDY, maxTokens: 50, ignoreEos: true })],
      (units, continuing) => batcher.submit(units, { continuing }).result,
    )) as any;
    expect(choice.tokens).toHaveLength(50);
    const seq = [...prompt, ...choice.tokens];
    const cache = scorer.cache!;
    const match = cache.match(seq);
    // 49 of the tokens went in one at a time; without compaction, 49 pieces and more.
    expect(match.depth).toBe(seq.length - 1);
    expect(cache.pieces(match, match.depth).length).toBeLessThan(18);
    cache.release(match);
    const alone = new Scorer(engine, { prefixSharing: false });
    const echo = directScoring(alone).prepareEcho([seq], 0);
    const [e] = echo.finish((await alone.scoreUnits(echo.units)).scores);
    expect(choice.logprobs).toEqual(e!.promptLogprobs.slice(prompt.length - 1));
    // Bytes counted are the segments the cache holds: the session thread keeps exactly those.
    expect(cache.bytes).toBeLessThanOrEqual(cache.budget);
    expect(await engine.keptPasts()).toBe(cache.stats().segments);
  });
});

describe('a generation with no cache budget (--prefix-cache-bytes 0)', () => {
  const ctx = familyEngine('llama');

  it("keeps its running sequences' KV pinned (each step computes one token), answers the bits the cached server does, and leaves nothing behind", async () => {
    const engine = ctx.engine;
    const prompt = randomTokens(rng(8), 40, engine.config.vocabSize);
    const params = { ...GREEDY, temperature: 1, seed: 5, n: 2, maxTokens: 12, ignoreEos: true };
    const run = async (prefixCacheBytes: number) => {
      const scorer = new Scorer(engine, { maxBatchTokens: 16, prefixCacheBytes });
      const computed: number[] = [];
      const [choices] = await runGenerations([new Generation(generationModel(engine, scorer), prompt, params)], async (units) => {
        const { scores, work } = await scorer.scoreUnits(units);
        computed.push(work.tokensComputed);
        return scores;
      });
      return { choices: choices!, computed, scorer };
    };
    const none = await run(0);
    const cached = await run(2 ** 30);
    expect(none.choices.map((c) => c.tokens)).toEqual(cached.choices.map((c) => c.tokens));
    expect(none.choices.map((c) => c.logprobs)).toEqual(cached.choices.map((c) => c.logprobs));
    // Prefill in 16-token chunks (16, 16), then the last 8 prompt tokens with each choice's
    // first step, then one token per choice per step: never the whole sequence again.
    expect(none.computed).toEqual(cached.computed);
    expect(none.computed.slice(0, 2)).toEqual([16, 16]);
    expect(none.computed.slice(3).every((n) => n === 2)).toBe(true);
    // Released as the generation ended: with no budget, the cache holds nothing.
    const stats = none.scorer.cache!.stats();
    expect([stats.bytes, stats.segments]).toEqual([0, 0]);
    // The session thread keeps exactly what the caches hold: no pin left a segment behind.
    expect(await engine.keptPasts()).toBe(cached.scorer.cache!.stats().segments);
  });
});

describe('ctxprobe serve --prefix-cache-bytes 0, as a user starts it', () => {
  it('generates a completion computing one token a step after the prompt, and the cache holds nothing after', async () => {
    const fx = makeFixture({ ...FAMILY_FIXTURES.llama!, maxPositions: 128 });
    const server = await serveCli(fx.dir, ['--prefix-cache-bytes', '0'], { CTXPROBE_LOG_LEVEL: 'info' });
    try {
      const prompt = randomTokens(rng(12), 30, 200);
      const computed = async () =>
        (await scrape(server.metricsPort)).get(
          'ctxprobe_tokens_computed_total{model="' + server.lines.find((l) => l.event === 'serving')!.models[0] + '"}',
        ) ?? 0;
      const before = await computed();
      const res = await postJson(`http://127.0.0.1:${server.httpPort}`, '/v1/completions', {
        prompt,
        max_tokens: 10,
        temperature: 0,
        ignore_eos: undefined,
      });
      expect(res.status, res.text).toBe(200);
      // The 30-token prompt with the first step, then one token for each of the 9 others:
      // not the whole sequence again at every step.
      expect((await computed()) - before).toBe(30 + 9);
      expect(
        (await scrape(server.metricsPort)).get(
          'ctxprobe_prefix_cache_bytes{model="' + server.lines.find((l) => l.event === 'serving')!.models[0] + '"}',
        ),
      ).toBe(0);
    } finally {
      await server.stop();
    }
  });
});

describe('sampling', () => {
  const logp = Float32Array.from([0.5, 0.2, 0.2, 0.1], Math.log);
  /** How often each token comes out over an even grid of uniforms. */
  const frequencies = (p: Parameters<typeof sampleToken>[1]) => {
    const N = 2000;
    const counts = [0, 0, 0, 0];
    for (let i = 0; i < N; i++) counts[sampleToken(logp, p, (i + 0.5) / N)]!++;
    return counts.map((c) => c / N);
  };
  const plain = { temperature: 1, topK: 0, topP: 1, minP: 0 };

  it('draws in proportion to softmax(logp / T)', () => {
    const at = (T: number) => {
      const w = [0.5, 0.2, 0.2, 0.1].map((p) => p ** (1 / T));
      const total = w.reduce((a, b) => a + b, 0);
      return w.map((x) => x / total);
    };
    for (const T of [1, 0.5, 2])
      frequencies({ ...plain, temperature: T }).forEach((f, i) => expect(Math.abs(f - at(T)[i]!)).toBeLessThan(1e-3));
  });

  it('top-k, top-p and min-p keep the tokens their definitions keep, renormalised', () => {
    // top-k 2: 0.5 and the first 0.2 tie with the second at the boundary: both 0.2s stay.
    expect(frequencies({ ...plain, topK: 1 })).toEqual([1, 0, 0, 0]);
    frequencies({ ...plain, topK: 2 }).forEach((f, i) => expect(Math.abs(f - [0.5, 0.2, 0.2, 0][i]! / 0.9)).toBeLessThan(1e-3));
    // top-p 0.6: the smallest set reaching 0.6 is {0, 1} (0.5 + 0.2).
    frequencies({ ...plain, topP: 0.6 }).forEach((f, i) => expect(Math.abs(f - [0.5 / 0.7, 0.2 / 0.7, 0, 0][i]!)).toBeLessThan(1e-3));
    // min-p 0.3: at least 0.3 × 0.5 = 0.15 → token 3 (0.1) goes.
    frequencies({ ...plain, minP: 0.3 }).forEach((f, i) => expect(Math.abs(f - [0.5, 0.2, 0.2, 0][i]! / 0.9)).toBeLessThan(1e-3));
  });

  it('temperature 0 is the first maximum', () => {
    expect(sampleToken(Float32Array.from([-2, -1, -1, -3]), { ...plain, temperature: 0 }, 0.99)).toBe(1);
  });
});

describe('a generation step by step (stop strings, EOS, streamed text)', () => {
  // A model whose distribution puts all its mass on one scripted token per step.
  const vocabText = ['<eos>', 'Hel', 'lo', ' wor', 'ld', '!', ' again'];
  const model: GenerationModel = {
    vocabSize: vocabText.length,
    maxLength: 100,
    stopIds: [0],
    decode: (ids) => ids.map((i) => (i === 0 ? '' : vocabText[i]!)).join(''),
    decodeWithSpecial: (ids) => ids.map((i) => vocabText[i]!).join(''),
    cached: true,
    prefillChunk: 4,
    layers: 1,
    heads: 1,
  };
  const play = (script: number[], params: Partial<SamplingParams>) => {
    const g = new Generation(model, [1, 2, 3], { ...GREEDY, maxTokens: 20, ...params });
    const deltas: string[] = [];
    const finishes: string[] = [];
    let k = 0;
    while (!g.done) {
      const units = g.units();
      const outputs: UnitScore[] = units.map(() => {
        const lp = new Float32Array(vocabText.length).fill(-30);
        lp[script[k]!] = 0;
        return { logprobs: [], greedy: [], next: lp };
      });
      k++;
      for (const e of g.accept(outputs)) {
        deltas.push(e.text);
        if (e.finish) finishes.push(e.finish);
      }
    }
    return { result: g.results()[0]!, deltas, finishes };
  };

  it('a stop string spanning tokens ends the text where it begins; streamed deltas never show it', () => {
    const { result, deltas } = play([1, 2, 3, 4, 5, 6], { stop: ['o wo'] });
    expect(result.text).toBe('Hell');
    expect(result.finish).toBe('stop');
    expect(result.tokens).toEqual([1, 2, 3]); // through the token that completed it
    expect(deltas.join('')).toBe('Hell');
  });

  it('EOS ends with stop and adds no text; max_tokens ends with length', () => {
    const eos = play([1, 2, 0, 5], {});
    expect([eos.result.text, eos.result.finish, eos.result.tokens]).toEqual(['Hello', 'stop', [1, 2, 0]]);
    const length = play([1, 2, 3, 4, 5, 6], { maxTokens: 4 });
    expect([length.result.text, length.result.finish, length.deltas.join('')]).toEqual(['Hello world', 'length', 'Hello world']);
  });

  it("each token's text is what it adds where it stands: SentencePiece's ▁ a space after the prompt, not dropped as alone", () => {
    // As SentencePiece decodes: ▁ is a space, except the one that starts the text.
    const pieces = ['</s>', '▁Hel', 'lo', '▁wor', 'ld', '!'];
    const spm = (ids: number[]) => ids.map((i) => pieces[i]!).join('').replaceAll('▁', ' ').replace(/^ /, '');
    const g = new Generation({ ...model, vocabSize: pieces.length, decode: spm, decodeWithSpecial: spm }, [1, 2], { ...GREEDY, maxTokens: 3 });
    const texts: string[] = [];
    for (const token of [3, 4, 5]) {
      const next = new Float32Array(pieces.length).fill(-30);
      next[token] = 0;
      for (const e of g.accept(g.units().map(() => ({ logprobs: [], greedy: [], next })))) texts.push(e.tokenText);
    }
    // Alone, ▁wor decodes as "wor": the text would read "Helloworld!".
    expect(texts).toEqual([' wor', 'ld', '!']);
    expect(g.results()[0]!.tokenTexts.join('')).toBe(g.results()[0]!.text);
  });
});

describe('/v1/completions and /v1/chat/completions generate', () => {
  let model: LoadedModel;
  let server: CtxprobeServer;
  let base: string;
  beforeAll(async () => {
    const fx = makeFixture({ ...FAMILY_FIXTURES.qwen2!, maxPositions: 128, chatTemplate: 'chatml' });
    ({ model, server, base } = await serveModel('qwen-chat', fx.dir));
  });
  afterAll(async () => server?.close());

  const post = (route: string, body: unknown) => postJson(base, route, body);

  it('names the field it refuses as the request named it (field defects #14)', async () => {
    const messages = [{ role: 'user', content: 'Translate to French: good morning' }];
    const cases: [string, unknown, RegExp][] = [
      ['/v1/chat/completions', { messages, logprobs: true, top_logprobs: 500 }, /^top_logprobs: must be a whole number in \[0, 100\]/],
      ['/v1/chat/completions', { messages, max_completion_tokens: 5000 }, /^max_completion_tokens: the prompt's \d+ tokens plus 5000/],
      ['/v1/chat/completions', { messages, max_tokens: 5000 }, /^max_tokens: the prompt's/],
      ['/v1/chat/completions', { messages, max_tokens: -3 }, /^max_tokens: a whole number ≥ 1 \(or null\) is required/],
      [
        '/v1/chat/completions',
        { messages: [{ role: 'wizard', content: 'hi' }] },
        /^messages\[0\]\.role: one of system, developer, user, assistant, tool/,
      ],
      [
        '/v1/generate',
        { prompt: { chunks: [{ label: 'p', text: 'hi' }] }, sampling: { topP: 'NaN', maxTokens: 2 } },
        /^top_p: must be in \(0, 1\]/,
      ],
    ];
    for (const [route, body, message] of cases) {
      const res = await post(route, body);
      expect(res.status, `${route} ${JSON.stringify(body)}`).toBe(400);
      expect(res.body.error?.message ?? res.body.message, `${route} ${JSON.stringify(body)}`).toMatch(message);
    }
    // An int64 seed past 2⁵³ is a whole number (it was refused as not one).
    const seeded = await post('/v1/completions', { prompt: 'Once', max_tokens: 3, temperature: 1, seed: 2 ** 53 });
    expect(seeded.status, seeded.text).toBe(200);
  });

  /** Server-sent events as a list of parsed chunks, and whether the stream ended with [DONE]. */
  const events = (text: string) => {
    const data = text
      .split('\n\n')
      .filter((e) => e.startsWith('data: '))
      .map((e) => e.slice(6));
    return { done: data.at(-1) === '[DONE]', chunks: data.filter((d) => d !== '[DONE]').map((d) => JSON.parse(d)) };
  };

  it("answers lm-evaluation-harness's generate_until body (local-completions), greedy = the argmax chain of Score", async () => {
    const tok = model.engine.tokenizer;
    // openai_completions.py _create_payload(generate=True): prompt batch, max_tokens, temperature 0, stop (until + eos), seed.
    const body = {
      prompt: ['Question: What is the tower? Answer:', 'Knowledge: it is tall.'],
      model: 'qwen-chat',
      max_tokens: 10,
      temperature: 0,
      stop: ['\n\n', '<|im_end|>'],
      seed: 1234,
    };
    const out = await post('/v1/completions', body);
    expect(out.status).toBe(200);
    expect(out.body.choices).toHaveLength(2);
    for (const [i, prompt] of body.prompt.entries()) {
      const choice = out.body.choices.find((c: any) => c.index === i);
      const ids = tok.encode(prompt, true);
      // The argmax chain, one Score (echo) per step, independent of the generation loop.
      const chain: number[] = [];
      for (let k = 0; k < choice.token_ids.length; k++) {
        // The scoring path's greedy next token (max_tokens 1), keyed by id.
        const scored = await post('/v1/completions', {
          prompt: [...ids, ...chain],
          max_tokens: 1,
          temperature: 0,
          logprobs: 1,
          return_tokens_as_token_ids: true,
        });
        chain.push(Number(scored.body.choices[0].logprobs.tokens.at(-1).slice('token_id:'.length)));
      }
      expect(choice.token_ids).toEqual(chain);
      if (choice.finish_reason === 'length') expect(choice.text).toBe(tok.decodeText(chain));
      expect(out.body.usage.completion_tokens).toBe(out.body.choices.reduce((n: number, c: any) => n + c.token_ids.length, 0));
    }

    // The same request streamed: the deltas add up to the same texts, then [DONE].
    const streamed = await post('/v1/completions', { ...body, stream: true });
    expect(streamed.status).toBe(200);
    expect(streamed.type).toContain('text/event-stream');
    const { done, chunks } = events(streamed.text);
    expect(done).toBe(true);
    for (const c of out.body.choices) {
      const mine = chunks.flatMap((ch) => ch.choices).filter((x: any) => x.index === c.index);
      expect(mine.map((x: any) => x.text).join('')).toBe(c.text);
      expect(mine.at(-1).finish_reason).toBe(c.finish_reason);
    }
  });

  it("answers local-chat-completions' body with the model's chat template, as /v1/completions on the rendered prompt", async () => {
    const messages = [{ role: 'user', content: 'Where is the tower?' }];
    const chat = await post('/v1/chat/completions', {
      messages,
      model: 'qwen-chat',
      max_tokens: 6,
      temperature: 0,
      stop: ['\n\n'],
      seed: 1234,
    });
    expect(chat.status).toBe(200);
    expect(chat.body.object).toBe('chat.completion');
    const rendered = '<|im_start|>user\nWhere is the tower?<|im_end|>\n<|im_start|>assistant\n';
    const plain = await post('/v1/completions', {
      prompt: rendered,
      add_special_tokens: false,
      max_tokens: 6,
      temperature: 0,
      stop: ['\n\n'],
    });
    expect(chat.body.choices[0].message).toEqual({ role: 'assistant', content: plain.body.choices[0].text });
    expect(chat.body.choices[0].token_ids).toEqual(plain.body.choices[0].token_ids);

    const withLogprobs = await post('/v1/chat/completions', { messages, max_tokens: 6, temperature: 0, logprobs: true, top_logprobs: 2 });
    const content = withLogprobs.body.choices[0].logprobs.content;
    const plainLogprobs = await post('/v1/completions', {
      prompt: rendered,
      add_special_tokens: false,
      max_tokens: 6,
      temperature: 0,
      logprobs: 2,
    });
    expect(content).toHaveLength(withLogprobs.body.usage.completion_tokens);
    expect(content.map((c: any) => c.logprob)).toEqual(plainLogprobs.body.choices[0].logprobs.token_logprobs);
    content.forEach((c: any) => {
      expect(c.top_logprobs.length).toBeLessThanOrEqual(2);
      expect(c.top_logprobs[0].logprob).toBe(c.logprob); // greedy: the most likely
    });

    const streamed = await post('/v1/chat/completions', {
      messages,
      max_tokens: 6,
      temperature: 0,
      stream: true,
      stream_options: { include_usage: true },
    });
    const { done, chunks } = events(streamed.text);
    expect(done).toBe(true);
    expect(chunks[0].choices[0].delta.role).toBe('assistant');
    expect(chunks.map((c) => c.choices[0]?.delta?.content ?? '').join('')).toBe(chat.body.choices[0].message.content);
    expect(chunks.at(-1).usage.completion_tokens).toBe(chat.body.usage.completion_tokens);
  });

  it('logprobs N: N distinct alternatives per generated token, keyed by text or (return_tokens_as_token_ids) by id, the chosen one first at temperature 0', async () => {
    const body = { prompt: 'Once upon a time', max_tokens: 8, temperature: 0, logprobs: 3 };
    const byId = (await post('/v1/completions', { ...body, return_tokens_as_token_ids: true })).body.choices[0];
    expect(byId.logprobs.tokens).toEqual(byId.token_ids.map((id: number) => `token_id:${id}`));
    byId.logprobs.top_logprobs.forEach((top: Record<string, number>, k: number) => {
      expect(Object.keys(top)).toHaveLength(3);
      expect(Object.keys(top)[0]).toBe(`token_id:${byId.token_ids[k]}`);
      expect(Object.values(top)[0]).toBe(byId.logprobs.token_logprobs[k]);
    });
    const byText = (await post('/v1/completions', body)).body.choices[0];
    expect(byText.token_ids).toEqual(byId.token_ids);
    byText.logprobs.top_logprobs.forEach((top: Record<string, number>) => {
      expect(Object.keys(top)).toHaveLength(3);
      expect(new Set(Object.keys(top)).size).toBe(3);
    });
  });

  it('the same seed gives the same text whatever runs beside it; what is not implemented is refused by name', async () => {
    const body = { prompt: 'Once upon a time', max_tokens: 12, temperature: 1, top_k: 50, seed: 7, n: 2 };
    const alone = await post('/v1/completions', body);
    const [together] = await Promise.all([
      post('/v1/completions', body),
      post('/v1/completions', { ...body, prompt: 'Something else entirely', seed: 8 }),
    ]);
    expect(together.body.choices.map((c: any) => c.token_ids)).toEqual(alone.body.choices.map((c: any) => c.token_ids));
    for (const [field, value] of [
      ['presence_penalty', 0.5],
      ['frequency_penalty', 1],
      ['logit_bias', { '5': 1 }],
      ['top_p', 0],
      ['max_tokens', 1000],
    ] as const) {
      const res = await post('/v1/completions', { prompt: 'x', max_tokens: 4, [field]: value });
      expect(res.status).toBe(400);
      expect(res.body.error.message.startsWith(`${field}:`)).toBe(true);
    }
  });
});

describe('gRPC Generate', () => {
  let model: LoadedModel;
  let server: CtxprobeServer;
  beforeAll(async () => {
    const fx = makeFixture({ ...FAMILY_FIXTURES.llama!, maxPositions: 128 });
    ({ model, server } = await serveModel('llama-tiny', fx.dir));
  });
  afterAll(async () => server?.close());

  it("streams each token as HTTP's completions make it, and each token's attention is a Probe's of the same sequence", async () => {
    const vocab = model.engine.config.vocabSize;
    const r = rng(9);
    const parts = { instruction: randomTokens(r, 5, vocab), knowledge: randomTokens(r, 9, vocab), history: randomTokens(r, 6, vocab) };
    const chunks = Object.entries(parts).map(([label, ids]) => ({ label, ids: { ids } }));
    const gen = client('Generation', server.port);
    const before = await scrape(server.metricsPort!);
    const messages = await streamed(gen, 'Generate', {
      prompt: { chunks, excludePositions: [0] },
      sampling: { temperature: 0, maxTokens: 6, logprobs: 2 },
      attention: true,
    });
    expect(messages).toHaveLength(6);
    expect(messages[0].spans.map((s: any) => s.label)).toEqual(['instruction', 'knowledge', 'history']);
    expect(messages[0].promptTokens).toBe(20);
    expect(messages.at(-1).finishReason).toBe('length');
    const tokens = messages.map((m: any) => m.tokenId);
    const prompt = Object.values(parts).flat();
    // The same tokens and log-probs as HTTP's completions on the same ids.
    const res = await fetch(`http://127.0.0.1:${server.httpPort}/v1/completions`, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({ prompt, max_tokens: 6, temperature: 0, logprobs: 0 }),
    });
    const http = (await res.json()) as any;
    expect(http.choices[0].token_ids).toEqual(tokens);
    expect(http.choices[0].logprobs.token_logprobs).toEqual(messages.map((m: any) => m.logprob));
    messages.forEach((m: any) => expect(m.top[0].logprob).toBe(m.logprob));

    // Token k was made by the pass whose query is the token before it: a Probe of prompt +
    // tokens[0..k) with that token as its own query chunk sees the same attention (the
    // query's own key counts to the response in Generate).
    const probing = client('Probing', server.port);
    for (let k = 2; k < tokens.length; k++) {
      const sample = {
        chunks: [...chunks, { label: 'response', ids: { ids: tokens.slice(0, k - 1) } }, { label: 'query', ids: { ids: [tokens[k - 1]] } }],
        queryLabels: ['query'],
        excludePositions: [0],
      };
      const probe = await unary(probing, 'Probe', { samples: [sample], skipHeatmap: true });
      const p = probe.samples[0];
      const layers = model.engine.config.numLayers;
      for (const what of ['votes', 'mass'] as const) {
        const want = p[what].values;
        const got = messages[k][what].values;
        expect(messages[k][what].cols).toBe(4);
        for (let l = 0; l < layers; l++) {
          for (let c = 0; c < 3; c++) expect(got[l * 4 + c]).toBeCloseTo(want[l * 5 + c], 5);
          expect(got[l * 4 + 3]).toBeCloseTo(want[l * 5 + 3] + want[l * 5 + 4], 5);
        }
        expect(messages[k][`${what}Excluded`].map((v: number) => v.toFixed(5))).toEqual(
          p[`${what}Excluded`].map((v: number) => v.toFixed(5)),
        );
      }
    }
    const after = await scrape(server.metricsPort!);
    const delta = (k: string) => (after.get(k) ?? 0) - (before.get(k) ?? 0);
    expect(delta('ctxprobe_generated_tokens_total{model="llama-tiny"}')).toBe(12); // the gRPC call's and HTTP's
    // Greedy steps bring their top tokens out of the graph, not the whole distribution (4
    // bytes a token of the vocabulary, a step: it did before).
    const bytes = (what: string) => delta(`ctxprobe_forward_pass_bytes_total{model="llama-tiny",what="${what}"}`);
    expect(bytes('outputs')).toBeGreaterThan(0);
    expect(bytes('outputs')).toBeLessThan(12 * vocab * 4);
    expect(bytes('present_kv')).toBeGreaterThan(0);
  });

  it('a seed gives the same sampled tokens alone or beside another call; without one, each call draws anew', async () => {
    const gen = client('Generation', server.port);
    const req = (seed?: number) => ({
      prompt: { chunks: [{ label: 'prompt', text: 'Once upon a time' }] },
      sampling: { temperature: 1.5, maxTokens: 12, n: 2, ...(seed !== undefined ? { seed: { value: seed } } : {}) },
    });
    const tokens = (ms: any[]) => [0, 1].map((c) => ms.filter((m) => m.choice === c).map((m) => m.tokenId));
    const alone = tokens(await streamed(gen, 'Generate', req(11)));
    const [beside] = await Promise.all([streamed(gen, 'Generate', req(11)), streamed(gen, 'Generate', req(12))]);
    expect(tokens(beside)).toEqual(alone);
    expect(alone[0]).not.toEqual(alone[1]); // two choices, two streams of draws
    const unseeded = await Promise.all([1, 2, 3].map(() => streamed(gen, 'Generate', req())));
    expect(new Set(unseeded.map((ms) => JSON.stringify(tokens(ms)))).size).toBeGreaterThan(1);
  });

  it('a deadline or a client going away stops a generation at its next step', async () => {
    const gen = client('Generation', server.port);
    const key = 'ctxprobe_generated_tokens_total{model="llama-tiny"}';
    const count = async () => (await scrape(server.metricsPort!)).get(key) ?? 0;
    const req = { prompt: { chunks: [{ label: 'p', text: 'Once' }] }, sampling: { temperature: 1, maxTokens: 100, ignoreEos: true } };
    const err = await streamed(gen, 'Generate', req, { deadline: Date.now() + 40 }).then(
      () => undefined,
      (e) => e,
    );
    expect(err?.code).toBe(4); // DEADLINE_EXCEEDED
    // Over HTTP: read the first event of a stream, then hang up.
    const controller = new AbortController();
    const res = await fetch(`http://127.0.0.1:${server.httpPort}/v1/completions`, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({ prompt: 'Once', max_tokens: 100, temperature: 1, stream: true, ignore_eos: true }),
      signal: controller.signal,
    });
    const reader = res.body!.getReader();
    await reader.read();
    const before = await count();
    controller.abort();
    await new Promise((r) => setTimeout(r, 300));
    // The model is idle again: nothing more is generated, and the call ended short of 100 tokens.
    const settled = await count();
    await new Promise((r) => setTimeout(r, 200));
    expect(await count()).toBe(settled);
    expect(settled - before).toBeLessThan(100);
  });

  it('counts generated tokens as they are made, those of a stream cancelled midway too', async () => {
    const key = 'ctxprobe_generated_tokens_total{model="llama-tiny"}';
    const count = async () => (await scrape(server.metricsPort!)).get(key) ?? 0;
    const start = await count();
    const controller = new AbortController();
    const res = await fetch(`http://127.0.0.1:${server.httpPort}/v1/completions`, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({ prompt: 'Once', max_tokens: 100, temperature: 0, stream: true, ignore_eos: true }),
      signal: controller.signal,
    });
    expect(res.status).toBe(200);
    const reader = res.body!.getReader();
    let events = 0;
    for (let text = ''; events < 4;) {
      const { value, done } = await reader.read();
      if (done) throw new Error(`the stream ended after ${events} events`);
      text += new TextDecoder().decode(value);
      events = (text.match(/^data: \{/gm) ?? []).length;
    }
    // The call is still running: its tokens so far are counted (they counted when it ended).
    expect((await count()) - start).toBeGreaterThanOrEqual(events);
    controller.abort();
    await new Promise((r) => setTimeout(r, 300));
    // Cancelled before its end: what it generated stays counted (it never counted).
    const after = (await count()) - start;
    expect(after).toBeGreaterThanOrEqual(events);
    expect(after).toBeLessThan(100);
  });

  it('refuses a bad request naming the field, before streaming', async () => {
    const gen = client('Generation', server.port);
    const cases: [unknown, RegExp][] = [
      [{ sampling: { maxTokens: 4 } }, /^prompt: required/],
      [{ prompt: { chunks: [{ label: 'a', text: 'hi' }] }, sampling: { maxTokens: 4, topP: 1.5 } }, /^top_p: must be in/],
      [{ prompt: { chunks: [{ label: 'a', text: 'hi' }], queryLabels: ['a'] } }, /^prompt\.query_labels: does not apply/],
      [{ prompt: { chunks: [{ label: 'a', text: 'hi' }] }, sampling: { maxTokens: 1000 } }, /^max_tokens: the prompt's/],
    ];
    for (const [req, message] of cases) {
      const err = await streamed(gen, 'Generate', req).then(
        () => undefined,
        (e) => e,
      );
      expect(err?.code, JSON.stringify(req)).toBe(3);
      expect(err.details).toMatch(message);
    }
  });
});
