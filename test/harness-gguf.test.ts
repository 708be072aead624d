// lm-evaluation-harness's local-completions loglikelihood against a GGUF file served as
// docs/scoring.md says (`ctxprobe serve --model FILE.gguf`): its remote tokenizer flow (GET
// /tokenizer_info, POST /tokenize, then echo scoring of each context + continuation) on a
// Q4_K_M-like file gives each continuation's log-likelihood within 1e-4 a token of the float64
// reference over the file's dequantized values, and its greedy flag as the reference's.
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { makeFixture } from './fixtures.js';
import { convertToGguf, type GgufDtype } from './gguf-convert.js';
import { referenceForward, type ReferenceModel } from './reference.js';
import { serveCli, type Served } from './cli-serve.js';
import { harnessParse, postJson } from './helpers.js';

const q4km = (name: string): GgufDtype | undefined => (/v_proj|down_proj|lm_head/.test(name) ? 'Q6_K' : 'Q4_K');

let served: Served;
let base: string;
let reference: ReferenceModel;
beforeAll(async () => {
  const fx = makeFixture({ family: 'llama', hidden: 256, layers: 2, heads: 4, kvHeads: 2, intermediate: 512, vocab: 300, maxPositions: 128, seed: 41 });
  const converted = convertToGguf(fx, path.join(fx.dir, 'tiny-Q4_K_M.gguf'), { dtype: 'Q4_K', typeOf: q4km });
  reference = converted.reference;
  served = await serveCli(converted.file);
  base = `http://127.0.0.1:${served.httpPort}`;
});
afterAll(async () => served?.stop());

describe('lm-evaluation-harness local-completions on a GGUF file', () => {
  it('scores loglikelihood requests as the float64 reference over the file’s values', async () => {
    // lm_eval/utils.py RemoteTokenizer, as test/openai.test.ts replays it.
    const info = (await (await fetch(base + '/tokenizer_info', { headers: { 'Content-Type': 'application/json' } })).json()) as any;
    expect(typeof info.eos_token).toBe('string');
    const encode = async (text: string) => (await postJson(base, '/tokenize', { prompt: text, add_special_tokens: false })).body.tokens as number[];
    const context = 'Knowledge: the tower was built in 1889. User: when was it built? Bot:';
    const continuations = [' In 1889.', ' Never.', ' It was built for the fair, in 1889.'];
    const ctx = await encode(context);
    const prompts = await Promise.all(continuations.map((c) => encode(context + c)));
    const { status, body } = await postJson(base, '/v1/completions', {
      model: 'tiny-Q4_K_M',
      prompt: prompts,
      temperature: 0,
      max_tokens: 1,
      logprobs: 1,
      seed: 1234,
      echo: true,
    });
    expect(status).toBe(200);
    const parsed = harnessParse(body, prompts.map(() => ctx.length));
    prompts.forEach((p, i) => {
      const ref = referenceForward(reference, p);
      const positions = Array.from({ length: p.length - ctx.length }, (_, k) => ctx.length - 1 + k);
      const logprob = positions.reduce((sum, t) => sum + ref.logprobs[t]![p[t + 1]!]!, 0);
      expect(Math.abs(parsed[i]![0] - logprob)).toBeLessThan(1e-4 * positions.length);
      const greedy = positions.every((t) => ref.logprobs[t]!.indexOf(Math.max(...ref.logprobs[t]!)) === p[t + 1]);
      expect(parsed[i]![1]).toBe(greedy);
    });
  });
});
