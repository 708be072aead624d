// The OpenAI-compatible endpoint as lm-evaluation-harness's local-completions model uses
// it: its exact request bodies, its parsing rule, the same numbers as the gRPC Score call.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { LoadedModel } from '../src/serving/repository.js';
import { CtxprobeServer } from '../src/server.js';
import { FAMILY_FIXTURES, makeFixture } from './fixtures.js';
import { referenceForward, referenceTokenLogprobs } from './reference.js';
import { harnessParse, postJson, scoringClient, scrape, serveModel, unary } from './helpers.js';

let model: LoadedModel;
let fxTensors: any;
let server: CtxprobeServer;
let base: string;

beforeAll(async () => {
  const fx = makeFixture({ ...FAMILY_FIXTURES.qwen2!, maxPositions: 128 });
  fxTensors = fx;
  ({ model, server, base } = await serveModel('qwen-tiny', fx.dir));
});
afterAll(async () => server?.close());

const post = (route: string, body: unknown) => postJson(base, route, body);

describe('/v1/completions', () => {
  it("answers the harness's exact request body, and its parsing gives the gRPC Score numbers", async () => {
    const tok = model.engine.tokenizer;
    const context = tok.encode("Knowledge: The tower was built for the 1889 World's Fair. User: When was it built? Bot:");
    const continuations = [' In 1889.', ' Yesterday.', ' It was built for the Fair in 1889, a long time ago.'].map((c) => tok.encode(c));
    const prompts = continuations.map((c) => [...context, ...c]);
    const body = { model: 'qwen-tiny', prompt: prompts, temperature: 0, max_tokens: 1, logprobs: 1, seed: 1234, echo: true };
    const { status, body: out } = await post('/v1/completions', body);
    expect(status).toBe(200);
    expect(out.object).toBe('text_completion');
    expect(out.choices).toHaveLength(3);
    out.choices.forEach((ch: any, i: number) => {
      expect(ch.index).toBe(i);
      expect(ch.logprobs.token_logprobs).toHaveLength(prompts[i]!.length + 1);
      expect(ch.logprobs.token_logprobs[0]).toBeNull();
      expect(ch.logprobs.top_logprobs[0]).toBeNull();
    });
    const parsed = harnessParse(
      out,
      prompts.map(() => context.length),
    );
    const client = scoringClient(server.port);
    const grpcRes = await unary(client, 'Score', {
      items: [{ contextIds: { ids: context }, continuationsIds: continuations.map((ids) => ({ ids })) }],
    });
    client.close();
    grpcRes.items[0].continuations.forEach((c: any, i: number) => {
      expect(Math.abs(parsed[i]![0] - c.logprob)).toBeLessThan(1e-4);
      expect(parsed[i]![1]).toBe(c.isGreedy);
    });
  });

  it('echoes every prompt token with its reference log-prob, and predicts the greedy next token', async () => {
    const prompt = model.engine.tokenizer.encode('The weather today is sunny and warm.');
    const { body: out } = await post('/v1/completions', { prompt, max_tokens: 1, logprobs: 3, echo: true });
    const lps = out.choices[0].logprobs.token_logprobs;
    const ref = referenceTokenLogprobs(fxTensors, prompt, prompt.length - 1);
    ref.logprobs.forEach((lp, k) => expect(Math.abs(lps[k + 1] - lp)).toBeLessThan(1e-4));
    const next = out.choices[0].logprobs.top_logprobs.at(-1);
    expect(Object.keys(next).length).toBeGreaterThanOrEqual(1);
    expect(lps.at(-1)).toBe(Math.max(...(Object.values(next) as number[])));
  });

  it('shares a common prefix across the prompts of a request without changing answers', async () => {
    const tok = model.engine.tokenizer;
    const shared = tok.encode(
      'Instruction: choose the best response. User: I like to bake bread. Bot: Did you know bread is old? User: What do I need?',
    );
    const prompts = [' Flour and water.', ' Sugar.', ' A good oven.'].map((c) => [...shared, ...tok.encode(c)]);
    const before = (await scrape(server.metricsPort!)).get('ctxprobe_tokens_computed_total{model="qwen-tiny"}') ?? 0;
    const together = (await post('/v1/completions', { prompt: prompts, max_tokens: 0, logprobs: 1, echo: true })).body;
    const after = (await scrape(server.metricsPort!)).get('ctxprobe_tokens_computed_total{model="qwen-tiny"}') ?? 0;
    const total = prompts.reduce((n, p) => n + p.length, 0);
    // The shared part runs twice (its log-probs, its KV), not once per prompt.
    expect(after - before).toBeLessThanOrEqual(total - shared.length + prompts.length);
    for (const [i, p] of prompts.entries()) {
      const alone = (await post('/v1/completions', { prompt: p, max_tokens: 0, logprobs: 1, echo: true })).body;
      const a = together.choices[i].logprobs.token_logprobs;
      const b = alone.choices[0].logprobs.token_logprobs;
      expect(a).toHaveLength(p.length);
      a.slice(1).forEach((lp: number, k: number) => expect(Math.abs(lp - b[k + 1])).toBeLessThan(1e-5));
    }
  });

  it('takes text prompts, encoded with the special tokens as reference servers do', async () => {
    const { body: out } = await post('/v1/completions', { prompt: ['Hello there', 'Bye'], max_tokens: 0, echo: true, logprobs: 0 });
    expect(out.choices[0].text).toBe('Hello there');
    expect(out.usage.prompt_tokens).toBe(
      model.engine.tokenizer.encode('Hello there', true).length + model.engine.tokenizer.encode('Bye', true).length,
    );
  });

  it('refuses on the scoring path (max_tokens 0 or 1, greedy) what generation refuses, with its message; takes neutral values', async () => {
    const prompt = [5, 6, 7, 8];
    const refused: Record<string, unknown>[] = [
      { logit_bias: { '5': 1 } },
      { suffix: 'y' },
      { presence_penalty: 0.5 },
      { frequency_penalty: 0.5 },
      { repetition_penalty: 1.2 },
      { best_of: 3 },
      { top_p: 7 },
      { top_k: -3 },
      { min_p: 2 },
      { stop: [''] },
    ];
    for (const extra of refused) {
      const generation = await post('/v1/completions', { prompt, max_tokens: 2, ...extra });
      expect(generation.status, JSON.stringify(extra)).toBe(400);
      expect(generation.body.error.message).toMatch(new RegExp(`^${Object.keys(extra)[0]}: `));
      for (const max_tokens of [0, 1]) {
        const scoring = await post('/v1/completions', { prompt, max_tokens, temperature: 0, echo: true, logprobs: 1, ...extra });
        expect(scoring.status, `${JSON.stringify(extra)} max_tokens ${max_tokens}`).toBe(400);
        expect(scoring.body.error.message).toBe(generation.body.error.message);
      }
    }
    // Neutral values (and what the harness sends besides: seed) change nothing.
    const harness = { prompt, max_tokens: 1, temperature: 0, echo: true, logprobs: 1, seed: 1234 };
    const plain = await post('/v1/completions', harness);
    const neutral = { presence_penalty: 0, frequency_penalty: 0, repetition_penalty: 1, best_of: 1, n: 1, top_p: 1, top_k: -1, min_p: 0 };
    const withNeutral = await post('/v1/completions', { ...harness, ...neutral, logit_bias: {}, suffix: null, stop: null, user: 'u' });
    expect(withNeutral.status).toBe(200);
    expect(withNeutral.body.choices).toEqual(plain.body.choices);
    // A stop string can end the one token: max_tokens 1 with stop generates, and stops there.
    const next = plain.body.choices[0].text.slice(-1);
    expect(next.length).toBe(1);
    const stopped = await post('/v1/completions', { prompt, max_tokens: 1, temperature: 0, stop: [next] });
    expect(stopped.status).toBe(200);
    expect(stopped.body.choices[0]).toMatchObject({ finish_reason: 'stop', text: '' });
  });

  it('logprobs 0: each position holds its own token and log-prob (as vLLM), scoring, echo and generation alike', async () => {
    const prompt = [5, 6, 7, 8];
    const own = (lp: any) =>
      lp.top_logprobs.forEach((top: any, k: number) =>
        expect(top, `position ${k}`).toEqual(k === 0 && lp.token_logprobs[0] === null ? null : { [lp.tokens[k]]: lp.token_logprobs[k] }),
      );
    const scoring = (await post('/v1/completions', { prompt, max_tokens: 1, temperature: 0, echo: true, logprobs: 0 })).body.choices[0]
      .logprobs;
    expect(scoring.top_logprobs).toHaveLength(prompt.length + 1);
    own(scoring);
    const greedy = (await post('/v1/completions', { prompt, max_tokens: 3, temperature: 0, echo: true, logprobs: 0 })).body.choices[0]
      .logprobs;
    expect(greedy.top_logprobs).toHaveLength(prompt.length + 3);
    own(greedy);
    // The same shape: the scoring answer is the greedy generation's first positions.
    expect(greedy.top_logprobs.slice(0, prompt.length + 1)).toEqual(scoring.top_logprobs);
    for (const extra of [{ temperature: 1, seed: 3 }, { return_tokens_as_token_ids: true }]) {
      const body = { prompt, max_tokens: 3, logprobs: 0, ...extra };
      const sampled = (await post('/v1/completions', body)).body.choices[0].logprobs;
      expect(sampled.top_logprobs, JSON.stringify(extra)).toHaveLength(3);
      own(sampled);
    }
    const ids = (await post('/v1/completions', { prompt, max_tokens: 0, echo: true, logprobs: 0, return_tokens_as_token_ids: true })).body;
    own(ids.choices[0].logprobs);
    expect(ids.choices[0].logprobs.tokens.at(-1)).toBe(`token_id:${prompt.at(-1)}`);
  });

  it('answers bad requests with 4xx and an OpenAI-style error', async () => {
    const cases: [unknown, number, RegExp][] = [
      [{ prompt: 'x', max_tokens: 5, presence_penalty: 1 }, 400, /presence_penalty: is not supported/],
      [{ prompt: [] }, 400, /prompt: a string, a list of token ids/],
      [{ prompt: [[1, 2], [999999]], max_tokens: 1 }, 400, /prompt\[1\]\[0\]: token id 999999/],
      [{ prompt: 'x', logprobs: -2, max_tokens: 1 }, 400, /logprobs/],
      [{ model: 'gpt-5', prompt: 'x' }, 404, /model: no model named "gpt-5"/],
    ];
    for (const [body, status, message] of cases) {
      const res = await post('/v1/completions', body);
      expect(res.status, JSON.stringify(body)).toBe(status);
      expect(res.body.error.message).toMatch(message);
    }
    const notJson = await fetch(base + '/v1/completions', { method: 'POST', body: '{', headers: { 'content-type': 'application/json' } });
    expect(notJson.status).toBe(400);
    // A browser page can send these cross-origin without a preflight: only JSON is taken.
    for (const type of ['text/plain', 'application/x-www-form-urlencoded', 'multipart/form-data; boundary=x']) {
      const res = await fetch(base + '/v1/completions', {
        method: 'POST',
        body: JSON.stringify({ prompt: 'x' }),
        headers: { 'content-type': type },
      });
      expect(res.status, type).toBe(415);
      expect(((await res.json()) as any).error.message).toMatch(/^content-type: application\/json is required/);
    }
  });
});

describe('tokenizer routes', () => {
  it('tokenize, detokenize and tokenizer_info agree with the model tokenizer', async () => {
    const tok = model.engine.tokenizer;
    const t = (await post('/tokenize', { prompt: 'Hello world', add_special_tokens: false })).body;
    expect(t.tokens).toEqual(tok.encode('Hello world'));
    expect(t.count).toBe(t.tokens.length);
    expect(t.max_model_len).toBe(128);
    expect((await post('/detokenize', { tokens: t.tokens })).body.prompt).toBe('Hello world');
    const info = (await (await fetch(base + '/tokenizer_info')).json()) as any;
    expect(info.eos_token).toBe(tok.config.eos_token);
    expect(info.model_max_length).toBe(128);
    const models = (await (await fetch(base + '/v1/models')).json()) as any;
    expect(models.data.map((m: any) => m.id)).toEqual(['qwen-tiny']);
  });
});

describe('the remote tokenizer flow of lm-evaluation-harness (tokenizer_backend=remote)', () => {
  // lm_eval/utils.py RemoteTokenizer: GET /tokenizer_info (with a JSON content type and
  // no body), POST /tokenize {prompt, add_special_tokens: false}; TemplateAPI's
  // _encode_pair then splits encode(context + continuation) after encode(context).
  const remote = {
    info: async () => (await (await fetch(base + '/tokenizer_info', { headers: { 'Content-Type': 'application/json' } })).json()) as any,
    encode: async (text: string) => (await post('/tokenize', { prompt: text, add_special_tokens: false })).body.tokens as number[],
  };

  it('auto-detects (eos_token is a string), and scores exactly as gRPC Score does on text', async () => {
    const info = await remote.info();
    expect(typeof info.eos_token).toBe('string');
    expect(typeof info.bos_token === 'string' || info.bos_token === null).toBe(true);
    // eos_token_id as the harness derives it: encode(eos_token)[0].
    expect((await remote.encode(info.eos_token))[0]).toBe(info.eos_token_id);
    const context = 'Knowledge: The tower was built in 1889. User: When? Bot:';
    const conts = [' In 1889.', ' Never.'];
    const ctx = await remote.encode(context);
    const prompts = await Promise.all(conts.map((c) => remote.encode(context + c)));
    const { body: out } = await post('/v1/completions', {
      model: 'qwen-tiny',
      prompt: prompts,
      temperature: 0,
      max_tokens: 1,
      logprobs: 1,
      seed: 1234,
      echo: true,
    });
    const parsed = harnessParse(
      out,
      prompts.map(() => ctx.length),
    );
    const client = scoringClient(server.port);
    const grpcRes = await unary(client, 'Score', { items: [{ contextText: context, continuationsText: conts }] });
    client.close();
    grpcRes.items[0].continuations.forEach((c: any, i: number) => {
      expect(Math.abs(parsed[i]![0] - c.logprob)).toBeLessThan(1e-5);
      expect(parsed[i]![1]).toBe(c.isGreedy);
    });
  });

  it('serves tokenizer_config.json special tokens written as AddedToken objects as strings', async () => {
    const tok = model.engine.tokenizer;
    const saved = { ...tok.config };
    tok.config.eos_token = { __type: 'AddedToken', content: tok.tokenString(tok.eosId!), lstrip: false };
    delete tok.config.bos_token;
    try {
      const info = await remote.info();
      expect(info.eos_token).toBe(tok.tokenString(tok.eosId!));
      expect(info.bos_token).toBe(tok.bosId === undefined ? null : tok.tokenString(tok.bosId));
    } finally {
      for (const k of Object.keys(tok.config)) delete tok.config[k];
      Object.assign(tok.config, saved);
    }
  });
});

describe('the rest of the HTTP surface', () => {
  it('keeps top_logprobs in likelihood order with N distinct entries, number-like keys included', async () => {
    const tok = model.engine.tokenizer;
    const prompt = tok.encode('In 1889 there were 12 of 3 and 45 or 6 7 8 9 0 1 2.');
    const res = await fetch(base + '/v1/completions', {
      method: 'POST',
      headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({ prompt, echo: true, max_tokens: 0, logprobs: 5 }),
    });
    const text = await res.text();
    const raw = text.slice(text.indexOf('"top_logprobs":'), text.indexOf('"text_offset":'));
    // Read each top_logprobs object in the order its keys stand in the text.
    const objects = [...raw.matchAll(/\{("(?:[^"\\]|\\.)*":-?[\d.e+-]+(?:,"(?:[^"\\]|\\.)*":-?[\d.e+-]+)*)\}/g)].map((m) =>
      [...m[1]!.matchAll(/"((?:[^"\\]|\\.)*)":(-?[\d.e+-]+)/g)].map((e) => [JSON.parse(`"${e[1]}"`), Number(e[2])] as [string, number]),
    );
    expect(objects.length).toBe(prompt.length - 1);
    for (const entries of objects) {
      expect(entries).toHaveLength(5);
      expect(new Set(entries.map(([k]) => k)).size).toBe(5);
      for (let k = 1; k < entries.length; k++) expect(entries[k]![1]).toBeLessThanOrEqual(entries[k - 1]![1]);
    }
    expect(objects.some((entries) => entries.some(([k]) => /^\d+$/.test(k.trim())))).toBe(true);
  });

  it('return_tokens_as_token_ids: N distinct token_id keys at every position, where text keys collide', async () => {
    const tok = model.engine.tokenizer;
    const prompt = tok.encode('Café crème, naïve façade — 1889: “Eiffel” ✓ 東京 ok.');
    const N = 12;
    const ask = (extra: object) => post('/v1/completions', { prompt, echo: true, max_tokens: 0, logprobs: N, ...extra });
    const byText = (await ask({})).body.choices[0].logprobs;
    const { status, body } = await ask({ return_tokens_as_token_ids: true });
    expect(status).toBe(200);
    const lp = body.choices[0].logprobs;
    expect(lp.tokens).toEqual(prompt.map((id) => `token_id:${id}`));
    expect(lp.token_logprobs).toEqual(byText.token_logprobs);
    // Against the float64 reference: each entry's log-prob, and nothing likelier left out.
    const ref = referenceForward(fxTensors, prompt.slice(0, -1)).logprobs;
    lp.top_logprobs.slice(1).forEach((top: Record<string, number>, t: number) => {
      const entries = Object.entries(top);
      expect(entries).toHaveLength(N);
      const ids = entries.map(([k]) => Number(/^token_id:(\d+)$/.exec(k)![1]));
      expect(new Set(ids).size).toBe(N);
      entries.forEach(([, v], k) => expect(Math.abs(v - ref[t]![ids[k]!]!)).toBeLessThan(1e-4));
      const last = entries.at(-1)![1];
      ref[t]!.forEach((v, id) => v > last + 1e-4 && expect(ids).toContain(id));
    });
    // Keyed by text, byte tokens of one character share a key: some positions fall short.
    const short = byText.top_logprobs.slice(1).filter((top: Record<string, number>) => Object.keys(top).length < N);
    expect(short.length).toBeGreaterThan(0);
  });

  it('honours add_special_tokens for text prompts and offsets text by the text, not by an added BOS', async () => {
    const tok = model.engine.tokenizer;
    const text = 'Hello there, general Kenobi';
    const withSpecial = (await post('/v1/completions', { prompt: text, echo: true, max_tokens: 0, logprobs: 0 })).body.choices[0];
    const plain = (await post('/v1/completions', { prompt: text, echo: true, max_tokens: 0, logprobs: 0, add_special_tokens: false })).body
      .choices[0];
    expect(plain.logprobs.tokens.length).toBe(tok.encode(text, false).length);
    expect(withSpecial.logprobs.tokens.length).toBe(tok.encode(text, true).length);
    for (const choice of [withSpecial, plain]) {
      expect(choice.text).toBe(text);
      const { tokens, text_offset: offsets } = choice.logprobs;
      // Each text token starts where its text does in the echoed prompt.
      tokens.forEach((t: string, k: number) => {
        if (text.startsWith(t, offsets[k])) expect(text.slice(offsets[k], offsets[k] + t.length)).toBe(t);
      });
      expect(offsets.at(-1) + tokens.at(-1).length).toBe(text.length);
    }
  });

  it('answers GET /health for load balancers: 200 while serving', async () => {
    const res = await fetch(base + '/health');
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({ status: 'SERVING' });
  });

  it('labels metrics by route: 2,000 random paths add one series, not 2,000', async () => {
    const before = await scrape(server.metricsPort!);
    await Promise.all(
      Array.from({ length: 2000 }, (_, i) => fetch(`${base}/x${i}/${Math.random().toString(36).slice(2)}`).then((r) => r.arrayBuffer())),
    );
    const after = await scrape(server.metricsPort!);
    const added = [...after.keys()].filter((k) => !before.has(k));
    // One label value ('http other'): its counter and latency histogram, and nothing per path.
    expect(added.length).toBeLessThan(40);
    expect(added.filter((k) => k.includes('/x'))).toEqual([]);
    expect(
      after.get('ctxprobe_requests_total{method="http other",code="404"}')! -
        (before.get('ctxprobe_requests_total{method="http other",code="404"}') ?? 0),
    ).toBe(2000);
  });

  it('refuses every malformed body with a 4xx naming the field', async () => {
    const vocab = model.engine.config.vocabSize;
    const cases: [string, unknown, number, RegExp][] = [
      ['/v1/completions', null, 400, /^body: must be object/],
      ['/v1/completions', { prompt: 'x', model: { name: 'qwen-tiny' } }, 400, /^model: must be string/],
      ['/v1/completions', { prompt: 'x', echo: 'yes' }, 400, /^echo: must be boolean/],
      ['/v1/completions', { prompt: 'x', max_tokens: '1' }, 400, /^max_tokens: must be integer/],
      ['/v1/completions', { prompt: 'x', max_tokens: 2, top_p: 0 }, 400, /^top_p: must be in \(0, 1\]/],
      ['/v1/completions', { prompt: 'x', max_tokens: 0, stream: true }, 400, /^max_tokens: must be ≥ 1 to generate/],
      ['/v1/completions', { prompt: 'x', max_tokens: 2, suffix: 'y' }, 400, /^suffix: is not supported/],
      ['/v1/chat/completions', { messages: [{ role: 'user', content: 'x' }] }, 400, /^messages: the model has no chat template/],
      ['/v1/chat/completions', { messages: [{ role: 'user', content: [{ type: 'image_url', text: 'x' }] }] }, 400, /^messages\[0\]\.content/],
      ['/v1/completions', { prompt: 'x', frequency_penalty: 1 }, 400, /^frequency_penalty: is not supported/],
      ['/v1/completions', { prompt: 'x', mirostat: 1 }, 400, /^mirostat: unknown field/],
      ['/v1/completions', { prompt: [[1, 2], 'a', [-1]] }, 400, /^prompt\[2\]: a string or a non-empty list of token ids/],
      ['/v1/completions', { prompt: { text: 'x' } }, 400, /^prompt: a string, a list of token ids, or a list of either/],
      ['/v1/completions', { max_tokens: 0 }, 400, /^prompt: is required/],
      ['/v1/completions', { prompt: 'x', logprobs: 1000, max_tokens: 0 }, 400, /^logprobs: must be a whole number in \[0, 100\]/],
      ['/detokenize', { tokens: [1, vocab + 5] }, 400, /^tokens\[1\]: token id \d+ is outside the vocabulary/],
      ['/detokenize', { tokens: 'abc' }, 400, /^tokens: must be array/],
      ['/tokenize', { prompt: 7 }, 400, /^prompt: must be string/],
    ];
    for (const [route, body, status, message] of cases) {
      const res = await post(route, body);
      expect(res.status, `${route} ${JSON.stringify(body)}`).toBe(status);
      expect(res.body.error.message, `${route} ${JSON.stringify(body)}`).toMatch(message);
    }
  });

  it('applies the per-request item limit to prompts, as gRPC does to items', async () => {
    const small = await CtxprobeServer.start({ port: 0, metricsPort: -1, httpPort: 0, maxItemsPerRequest: 3 });
    small.addModel(model);
    small.setServing();
    try {
      const res = await fetch(`http://127.0.0.1:${small.httpPort}/v1/completions`, {
        method: 'POST',
        headers: { 'Content-Type': 'application/json' },
        body: JSON.stringify({ prompt: ['a', 'b', 'c', 'd'], max_tokens: 0 }),
      });
      expect(res.status).toBe(400);
      expect(((await res.json()) as any).error.message).toMatch(/^prompt: /);
    } finally {
      await small.drain();
    }
  });
});
