// The OpenAI-compatible endpoint as lm-evaluation-harness's local-completions model uses
// it: its exact request bodies, its parsing rule, the same numbers as the gRPC Score call.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadModel, type LoadedModel } from '../src/repository.js';
import { CtxprobeServer } from '../src/server.js';
import { FAMILY_FIXTURES, makeFixture } from './fixtures.js';
import { referenceTokenLogprobs } from './reference.js';
import { scoringClient, scrape, unary } from './helpers.js';

let model: LoadedModel;
let fxTensors: any;
let server: CtxprobeServer;
let base: string;

beforeAll(async () => {
  const fx = makeFixture({ ...FAMILY_FIXTURES.qwen2!, maxPositions: 128 });
  fxTensors = fx;
  model = await loadModel({ name: 'qwen-tiny', path: fx.dir, threads: 1 });
  server = await CtxprobeServer.start({ port: 0, metricsPort: 0, httpPort: 0 });
  server.addModel(model);
  server.setServing();
  base = `http://127.0.0.1:${server.httpPort}`;
});
afterAll(async () => server?.close());

const post = async (route: string, body: unknown) => {
  const res = await fetch(base + route, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body) });
  return { status: res.status, body: (await res.json()) as any };
};

/** lm-evaluation-harness openai_completions.py: parse_logprobs. */
function harnessParse(out: any, ctxlens: number[]): [number, boolean][] {
  return out.choices.map((choice: any, i: number) => {
    const ctxlen = ctxlens[i]!;
    const tokenLogprobs: number[] = choice.logprobs.token_logprobs.slice(ctxlen, -1);
    const top: Record<string, number>[] = choice.logprobs.top_logprobs.slice(ctxlen, -1);
    const logprob = tokenLogprobs.reduce((a, b) => a + b, 0);
    const isGreedy = tokenLogprobs.every((tok, k) => tok === Math.max(...Object.values(top[k]!)));
    return [logprob, isGreedy];
  });
}

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

  it('answers bad requests with 4xx and an OpenAI-style error', async () => {
    const cases: [unknown, number, RegExp][] = [
      [{ prompt: 'x', max_tokens: 5 }, 400, /max_tokens: 5 is not supported/],
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
    const notJson = await fetch(base + '/v1/completions', { method: 'POST', body: '{' });
    expect(notJson.status).toBe(400);
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
