// A real trained GQA Llama (../shared/models/stories260K) against llama.cpp's log-probs.
// Uses ../shared: skipped, with a message, where it is absent.
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Engine } from '../src/engine/engine.js';
import { Scorer } from '../src/core/scorer.js';
import { SafetensorsCheckpoint } from '../src/checkpoint/safetensors.js';
import { checkFamily } from './probe-reference.js';
import { directScoring } from '../src/requests/scoring.js';

const dir = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../shared/models/stories260K');
const present = fs.existsSync(path.join(dir, 'REFERENCE.json'));
if (!present) console.warn(`skipping stories260K tests: ${dir} is absent (it lives in the team's shared/ folder)`);

describe.skipIf(!present)('shared stories260K vs llama.cpp', () => {
  let engine: Engine;
  let ref: { text: string; tokens: number[]; logprobs: (number | null)[] };
  beforeAll(async () => {
    ref = JSON.parse(fs.readFileSync(path.join(dir, 'REFERENCE.json'), 'utf8'));
    engine = await Engine.load(dir, { threads: 1 });
  });
  afterAll(async () => engine?.release());

  it('tokenises the reference sentence as llama.cpp does', () => {
    expect(engine.tokenizer.encode(ref.text, true)).toEqual(ref.tokens);
  });

  it('matches the teacher-forced log-probs within 1e-4, from token ids and from text', async () => {
    const expected = ref.logprobs.slice(1) as number[];
    const scorer = new Scorer(engine);
    const results = await directScoring(scorer).loglikelihood([
      { context: ref.tokens.slice(0, 1), continuations: [ref.tokens.slice(1)] },
      { context: '', continuations: [ref.text] },
    ]);
    for (const r of results.map((item) => item[0]!)) {
      expect(r.tokenIds).toEqual(ref.tokens.slice(1));
      r.tokenLogprobs.forEach((lp, i) => expect(Math.abs(lp - expected[i]!)).toBeLessThan(1e-4));
    }
  });

  it('gives the same log-probs when the sentence is split into context and continuation', async () => {
    const scorer = new Scorer(engine);
    const cut = 12;
    const results = await directScoring(scorer).loglikelihood([
      { context: ref.tokens.slice(0, cut), continuations: [ref.tokens.slice(cut), ref.tokens.slice(cut, cut + 3)] },
    ]);
    for (const r of results[0]!)
      r.tokenLogprobs.forEach((lp, i) => expect(Math.abs(lp - (ref.logprobs[cut + i] as number))).toBeLessThan(1e-4));
  });
});

describe.skipIf(!present)('shared stories260K attention probes', () => {
  it('equal the reference computed from its full attention (a real BOS attention sink)', async () => {
    const ckpt = new SafetensorsCheckpoint(dir);
    const tensors = new Map([...ckpt.tensors.keys()].map((n) => [n, { shape: ckpt.get(n).shape, data: ckpt.readFloat32(n) }]));
    const config = JSON.parse(fs.readFileSync(path.join(dir, 'config.json'), 'utf8'));
    const engine = await Engine.load(dir, { threads: 1 });
    await checkFamily({ config, tensors }, engine, 61);
    await engine.release();
  });
});
