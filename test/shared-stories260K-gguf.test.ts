// The original GGUF of a real trained model (../shared/models/stories260K.gguf) against
// llama.cpp: its tokenizer built from the metadata gives llama.cpp's ids (and its HF
// twin's, which reproduces them), and its log-probs are llama.cpp's within ~1e-5, in
// process, through the CLI as a user runs it and through a served model.
// Uses ../shared: skipped, with a message, where it is absent.
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Engine } from '../src/engine/engine.js';
import { Scorer } from '../src/core/scorer.js';
import { directScoring } from '../src/requests/scoring.js';
import { TextTokenizer } from '../src/text/tokenizer.js';
import { ROOT, serveCli } from './cli-serve.js';

const shared = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../shared/models');
const file = path.join(shared, 'stories260K.gguf');
const twin = path.join(shared, 'stories260K');
const present = fs.existsSync(file) && fs.existsSync(path.join(twin, 'REFERENCE.json'));
if (!present) console.warn(`skipping stories260K.gguf tests: ${file} is absent (it lives in the team's shared/ folder)`);

interface Reference {
  text: string;
  tokens: number[];
  logprobs: (number | null)[];
}

/** Every scored token's log-prob within 1e-5 of llama.cpp's (the first token has none). */
function expectLlamaCpp(ref: Reference, ids: number[], logprobs: number[]): void {
  expect(ids).toEqual(ref.tokens.slice(1));
  logprobs.forEach((lp, i) => expect(Math.abs(lp - (ref.logprobs[i + 1] as number)), `token ${i + 1}`).toBeLessThan(1e-5));
}

describe.skipIf(!present)('shared stories260K.gguf vs llama.cpp', () => {
  let engine: Engine;
  let ref: Reference;
  beforeAll(async () => {
    ref = JSON.parse(fs.readFileSync(path.join(twin, 'REFERENCE.json'), 'utf8'));
    engine = await Engine.load(file, { threads: 1 });
  });
  afterAll(async () => engine?.release());

  it("reads the file's llama hyperparameters and tokenizer", () => {
    const c = engine.config;
    expect([
      c.spec.family,
      c.numLayers,
      c.hiddenSize,
      c.numHeads,
      c.numKvHeads,
      c.headDim,
      c.intermediateSize,
      c.vocabSize,
      c.maxPositions,
    ]).toEqual(['llama', 5, 64, 8, 4, 8, 172, 512, 2048]);
    expect([c.tiedEmbeddings, c.bosTokenId, c.eosTokenId, c.rope!.theta]).toEqual([false, 1, 2, 10000]);
  });

  it('tokenises the reference sentence as llama.cpp does, BOS added as llama.cpp adds it', () => {
    expect(engine.tokenizer.encode(ref.text, true)).toEqual(ref.tokens);
  });

  it('tokenises as the HF twin (which reproduces llama.cpp): unicode, spaces, digits, bytes outside the vocabulary', () => {
    const hf = TextTokenizer.load(twin);
    const texts = [
      ref.text,
      ' leading space',
      'two  spaces,   three   and a tab\there',
      'line\nbreaks\n\n and\r\n CRLF',
      'digits 0123456789 and 3.14159 and 1,000,000',
      'ünïcödé — ñ, ß, é, 日本語, 中文, 한국어, Ελληνικά, русский',
      'emoji 🦙🦙 👩‍👩‍👧 and a lone surrogate-free astral 𝔘𝔫𝔦𝔠𝔬𝔡𝔢',
      'control \u0001\u0007 and zero-width\u200b joiner',
      'bytes outside the vocabulary: ~`{}@#$%^&*_+=',
      '<s>special</s> tokens <unk> in text',
      'Once upon a time, there was a little girl named Lily.<s>She loved to play.',
      '',
      ' ',
      'x'.repeat(300),
      "she said: 'don't!' — and they didn't.",
    ];
    for (const text of texts)
      for (const special of [false, true])
        expect(engine.tokenizer.encode(text, special), JSON.stringify(text)).toEqual(hf.encode(text, special));
    expect(engine.tokenizer.decodeText(engine.tokenizer.encode(ref.text, true))).toBe(ref.text);
  });

  it("scores the reference sentence with llama.cpp's log-probs within 1e-5, from ids and from text", async () => {
    const results = await directScoring(new Scorer(engine)).loglikelihood([
      { context: ref.tokens.slice(0, 1), continuations: [ref.tokens.slice(1)] },
      { context: '', continuations: [ref.text] },
    ]);
    for (const r of results.map((item) => item[0]!)) expectLlamaCpp(ref, r.tokenIds, r.tokenLogprobs);
  });

  it('scores the same through `ctxprobe score --model stories260K.gguf`, as a user runs it', () => {
    const out = execFileSync(
      process.execPath,
      [path.join(ROOT, 'bin/ctxprobe.js'), 'score', '--model', file, '--context', '', '--continuation', ref.text, '--threads', '1'],
      { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] },
    );
    const answer = JSON.parse(out);
    expect(answer.model).toBe('stories260K');
    expectLlamaCpp(ref, answer.results[0].tokenIds, answer.results[0].tokenLogprobs);
  });

  it('scores the same through a served model (ctxprobe serve --model stories260K.gguf, POST /v1/score)', async () => {
    const server = await serveCli(file);
    try {
      const res = await fetch(`http://127.0.0.1:${server.httpPort}/v1/score`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ items: [{ id: 'ref', contextText: '', continuationsText: [ref.text] }] }),
      });
      expect(res.status).toBe(200);
      const body = await res.json();
      const scored = body.items[0].continuations[0];
      expectLlamaCpp(ref, scored.tokenIds.map(Number), scored.tokenLogprobs);
      const models = await (await fetch(`http://127.0.0.1:${server.httpPort}/v1/list-models`)).json();
      expect(models.models[0].name).toBe('stories260K');
    } finally {
      await server.stop();
    }
  });
});
