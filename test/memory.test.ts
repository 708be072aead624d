// Models at the size users run: what a model needs in memory is worked out before anything
// is built (engine/memory.ts). A BF16 checkpoint whose float32 copy would not fit keeps its
// weights as stored, each matrix widened for its product (exact), and answers; so does a
// Q4_K_M GGUF of the 8B shape, its blocks repacked at load (zero blocks in a sparse file);
// one that cannot fit at all is refused at load naming what it needs — never a kill by the
// kernel.
import fs from 'node:fs';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { Engine } from '../src/engine/engine.js';
import { Scorer } from '../src/core/scorer.js';
import { directScoring } from '../src/requests/scoring.js';
import { planMemory, prepackedForInt8 } from '../src/engine/memory.js';
import { PROVIDERS } from '../src/common/providers.js';
import { onlySoftwareVulkan } from '../src/engine/adapter.js';
import { readModelConfig } from '../src/model/config.js';
import { writeZeroCheckpoint } from '../src/model/synthetic.js';
import { LLAMA3_8B, writeZeroLlamaGguf } from '../src/model/synthetic-gguf.js';
import { FAMILY_FIXTURES, makeFixture, tempDir } from './fixtures.js';
import { serveCli } from './cli-serve.js';

const GiB = 2 ** 30;
const VULKAN = ['/usr/share/vulkan/icd.d', '/etc/vulkan/icd.d'].some((d) => fs.existsSync(d) && fs.readdirSync(d).length > 0);
const dirs: string[] = [];
afterAll(() => dirs.forEach((d) => fs.rmSync(d, { recursive: true, force: true })));

/** A Llama-3 shape (8B: hidden 4096, 32 layers; 70B: 8192, 80), zeros, sparse on disk. */
function llama3(size: '8b' | '70b'): string {
  const dir = tempDir(`llama3-${size}`);
  dirs.push(dir);
  const shape =
    size === '8b'
      ? { hidden: 4096, layers: 32, heads: 32, intermediate: 14336 }
      : { hidden: 8192, layers: 80, heads: 64, intermediate: 28672 };
  writeZeroCheckpoint(
    dir,
    { family: 'llama', ...shape, kvHeads: 8, vocab: 384, vocabSize: 128256, maxPositions: 8192, ropeTheta: 500000 },
    'bfloat16',
    4,
  );
  return dir;
}

/** `ctxprobe serve --model PATH` of a model of zeros: the load log's `weights` matches
 * `weights`, and a Score answers −ln(vocab) for every token (every token equally likely).
 * The server is left running for more checks; the caller stops it. */
async function servesAndAnswers(model: string, weights: RegExp) {
  const s = await serveCli(model, ['--threads', '2', '--metrics-port', '-1']);
  try {
    expect(s.lines.find((l) => l.event === 'model_loaded')!.weights).toMatch(weights);
    const res = await fetch(`http://127.0.0.1:${s.httpPort}/v1/score`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ items: [{ contextIds: { ids: [1, 2, 3] }, continuationsIds: [{ ids: [4, 5] }] }] }),
    });
    expect(res.status).toBe(200);
    const lp = (await res.json()).items[0].continuations[0].tokenLogprobs;
    expect(lp.map((x: number) => +x.toFixed(4))).toEqual([-11.7618, -11.7618]);
    return s;
  } catch (e) {
    await s.stop();
    throw e;
  }
}

describe('the memory plan', () => {
  const config = readModelConfig(makeFixture(FAMILY_FIXTURES.llama!).dir);
  const limits = { maxBatchTokens: 512, maxAttentionBytes: 192 * 2 ** 20, prefixCacheBytes: GiB };
  // Matrices of 4096 × 4096, as many as the parameters need.
  const tensors = (dtype: 'bfloat16' | 'float32', params: number) =>
    Array.from({ length: Math.round(params / 4096 ** 2) }, () => ({ dtype, shape: [4096, 4096] }));

  it('widens at load what fits widened, keeps as stored what fits only so, refuses the rest', () => {
    const bf16 = tensors('bfloat16', 8e9); // 16 GB stored, 32 GB widened
    expect(planMemory(config, bf16, 'float32', limits, 64 * GiB)).toMatchObject({ atRest: 'compute', fits: true });
    const kept = planMemory(config, bf16, 'float32', limits, 22 * GiB);
    expect(kept).toMatchObject({ atRest: 'stored', fits: true });
    expect(kept.reason).toMatch(
      /kept as stored \(14\.9 GiB\), each matrix widened to float32 for its product: widened at load it would need 3\d\.\d GiB, 22\.0 GiB available/,
    );
    expect(planMemory(config, bf16, 'float32', limits, 12 * GiB)).toMatchObject({ atRest: 'stored', fits: false });
    // Float32 weights are as stored already: nothing to keep narrower.
    expect(planMemory(config, tensors('float32', 8e9), 'float32', limits, 22 * GiB)).toMatchObject({ atRest: 'compute', fits: false });
  });

  it("counts int8 activations' prepacked copy of each quantized matrix: what fits exact can be refused so", () => {
    // 4.5 GiB of quantized parts and a float32 norm.
    const parts = [...Array.from({ length: 9 }, () => ({ dtype: 'quantized' as const, shape: [4096, 4096 * 16], bytes: GiB / 2 })), { dtype: 'float32' as const, shape: [4096] }];
    const exact = planMemory(config, parts, 'float32', limits, 8 * GiB);
    const int8 = planMemory(config, prepackedForInt8(parts), 'float32', limits, 8 * GiB);
    expect(exact.fits).toBe(true);
    expect(int8.fits).toBe(false);
    // The parts 1.6 times, the float32 norm as it is.
    expect(int8.weights).toBe(Math.ceil(1.6 * (GiB / 2)) * 9 + 4096 * 4);
    expect(int8.need - int8.weights).toBe(exact.need - exact.weights);
  });
});

describe('weights kept as stored', () => {
  it('a BF16 checkpoint widened per product scores as when widened at load', async () => {
    const fx = makeFixture(FAMILY_FIXTURES.llama!, { dtype: 'bfloat16' });
    const items = [{ context: [5, 9, 31, 7, 12], continuations: [[44, 3, 17], [2]] }];
    const answers = [];
    for (const weightsAtRest of ['compute', 'stored'] as const) {
      const engine = await Engine.load(fx.dir, { threads: 1, weightsAtRest });
      answers.push(await directScoring(new Scorer(engine)).loglikelihood(items));
      expect(engine.info.weights).toMatch(weightsAtRest === 'stored' ? /as asked/ : /bfloat16 checkpoint/);
      await engine.release();
    }
    const [folded, stored] = answers;
    expect(stored![0]!.map((c) => c.tokenIds)).toEqual(folded![0]!.map((c) => c.tokenIds));
    stored![0]!.forEach((c, k) =>
      c.tokenLogprobs.forEach((lp, t) => expect(Math.abs(lp - folded![0]![k]!.tokenLogprobs[t]!)).toBeLessThan(1e-5)),
    );
  });

  it('a Llama-3-8B shape in BF16 serves on this machine, its weights as stored, and answers', async () => {
    const dir = llama3('8b');
    const s = await servesAndAnswers(dir, /^bfloat16 checkpoint; kept as stored \(15\.0 GiB\)/);
    try {
      const models = await (await fetch(`http://127.0.0.1:${s.httpPort}/v1/list-models`)).json();
      expect(models.models[0].weights).toMatch(/kept as stored/);
    } finally {
      await s.stop();
    }
  }, 600_000);

  it('a Llama-3-8B shape as a Q4_K_M GGUF serves on this machine, its blocks in their exact form, and answers', async () => {
    const dir = tempDir('llama3-8b-q4km');
    dirs.push(dir);
    const file = path.join(dir, 'llama3-8b-Q4_K_M.gguf');
    writeZeroLlamaGguf(file, LLAMA3_8B, 'q4_k_m');
    await (await servesAndAnswers(file, /^Q4_K\/F32\/Q6_K GGUF; as stored \(6\.5 GiB\)/)).stop();
  }, 600_000);

  it('an embedding and head in row blocks answer as whole ones (ids in every block)', async () => {
    const fx = makeFixture(FAMILY_FIXTURES.qwen2!); // untied? tied: the blocks serve both
    const items = [{ context: [0, 77, 150, 299, 12], continuations: [[298, 1, 151], [76]] }];
    const whole = await Engine.load(fx.dir, { threads: 1 });
    const expected = await directScoring(new Scorer(whole)).loglikelihood(items);
    await whole.release();
    const cpu = PROVIDERS.cpu as { maxTensorBytes?: number };
    cpu.maxTensorBytes = 40 * 32 * 4; // 40 rows of 32 floats a block: 8 blocks of 300 rows
    try {
      const blocked = await Engine.load(fx.dir, { threads: 1 });
      const got = await directScoring(new Scorer(blocked)).loglikelihood(items);
      await blocked.release();
      got[0]!.forEach((c, k) => {
        expect(c.tokenIds).toEqual(expected[0]![k]!.tokenIds);
        c.tokenLogprobs.forEach((lp, t) => expect(Math.abs(lp - expected[0]![k]!.tokenLogprobs[t]!)).toBeLessThan(1e-6));
      });
    } finally {
      delete cpu.maxTensorBytes;
    }
  });

  it('a 152k-vocabulary float32 embedding and head (Qwen2.5-7B widths) serve on WebGPU (lavapipe), in row blocks', async () => {
    if (!VULKAN) return console.warn('skipped: no Vulkan driver (the webgpu tests say how to install lavapipe)');
    const dir = tempDir('qwen7b-widths');
    dirs.push(dir);
    writeZeroCheckpoint(
      dir,
      {
        family: 'qwen2',
        hidden: 3584,
        layers: 1,
        heads: 28,
        kvHeads: 4,
        intermediate: 1024,
        vocab: 384,
        vocabSize: 152064,
        maxPositions: 4096,
        tied: false,
      },
      'float32',
    );
    const s = await serveCli(dir, ['--device', 'webgpu', '--metrics-port', '-1']);
    try {
      const res = await fetch(`http://127.0.0.1:${s.httpPort}/v1/score`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ items: [{ contextIds: { ids: [1, 2, 3] }, continuationsIds: [{ ids: [152000, 7] }] }] }),
      });
      expect(res.status).toBe(200);
      // Zero weights: every token equally likely (an id of the last block too).
      const lp = (await res.json()).items[0].continuations[0].tokenLogprobs;
      expect(lp.map((x: number) => +x.toFixed(4))).toEqual([-11.9321, -11.9321]);
    } finally {
      await s.stop();
    }
  }, 900_000);

  it('a Llama-3-70B shape in BF16 is refused at load, naming what it needs and what to do', async () => {
    const dir = llama3('70b');
    const err = await serveCli(dir, ['--metrics-port', '-1']).then(
      (s) => (s.stop(), new Error('it served')),
      (e) => e,
    );
    expect(err.message).toMatch(
      new RegExp(`${path.basename(dir)}: needs about 1[3-4]\\d\\.\\d GiB of memory — weights 1[3-4]\\d\\.\\d GiB \\(as stored\\)`),
    );
    expect(err.message).toMatch(/Options: a quantized checkpoint \(a GGUF file in Q4_K_M or Q8_0\)/);
  }, 120_000);

  it('on WebGPU with only lavapipe (the device memory is the host\'s), the 70B shape is refused alike, not killed', async () => {
    if (!VULKAN || !onlySoftwareVulkan()) return console.warn('skipped: needs lavapipe as the only Vulkan driver');
    const dir = llama3('70b');
    const err = await serveCli(dir, ['--device', 'webgpu', '--metrics-port', '-1']).then(
      (s) => (s.stop(), new Error('it served')),
      (e) => e,
    );
    expect(err.message).toMatch(new RegExp(`${path.basename(dir)}: needs about 1[3-4]\\d\\.\\d GiB of memory — weights 1[3-4]\\d\\.\\d GiB \\(as stored\\)`));
  }, 120_000);
});
