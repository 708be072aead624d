// BF16 weights kept as stored on --device webgpu (lavapipe). WebGPU has no bfloat16 type:
// a kept matrix is read as uint32 pairs of its values (the file's bytes) and widened each
// pass by a table of the 65,536 bfloat16 values (model/ops.ts), exactly — so a model kept as
// stored scores to the bits of the same model widened at load, holds two bytes a weight on
// the device, and leaves no float node to the CPU. Through `ctxprobe serve` too, by the flag
// and by the environment.
//
// Skips, saying so, where no Vulkan driver is installed (.ci/run installs lavapipe).
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { Engine } from '../src/engine/engine.js';
import { PROVIDERS } from '../src/common/providers.js';
import { FAMILY_FIXTURES, makeFixture } from './fixtures.js';
import { convertToGguf } from './gguf-convert.js';
import { rowLogprobs } from './row-logprobs.js';
import { serveCli } from './cli-serve.js';
import { postJson, VULKAN_DRIVERS } from './helpers.js';

const maybe = VULKAN_DRIVERS ? describe : describe.skip;
if (!VULKAN_DRIVERS) console.warn('webgpu weights tests skipped: no Vulkan driver (see webgpu.test.ts)');

const engines: Engine[] = [];
afterAll(async () => {
  for (const e of engines) await e.release();
});
async function load(p: string, weightsAtRest: 'stored' | 'compute'): Promise<Engine> {
  const e = await Engine.load(p, { device: 'webgpu', threads: 1, weightsAtRest });
  engines.push(e);
  return e;
}

const ROWS = [
  [5, 9, 31, 7, 12, 44, 3, 17],
  [2, 8, 1],
];

// The fixture's weights as the device holds them kept as stored: two bytes a matrix value,
// four a vector's (norms are widened at load).
const storedBytes = (tensors: Iterable<{ shape: number[]; data: Float32Array }>) =>
  [...tensors].reduce((n, t) => n + t.data.length * (t.shape.length === 2 ? 2 : 4), 0);

maybe('bfloat16 weights kept as stored on WebGPU', () => {
  // Llama, tied embeddings (gpt2: Conv1D layout, learned positions; gemma2: 1 + w norms, soft
  // caps, scaled embeddings), fused qkv (phi3), experts and routers (mixtral), post-norms (olmo2).
  it.each(['llama', 'gpt2', 'gemma2', 'phi3', 'mixtral', 'olmo2'])(
    '%s: the bits of the model widened at load, two bytes a weight on the device, no float node on the CPU',
    async (family) => {
      const fx = makeFixture(FAMILY_FIXTURES[family]!, { dtype: 'bfloat16' });
      const widened = await load(fx.dir, 'compute');
      const kept = await load(fx.dir, 'stored');
      expect(kept.info.weights).toMatch(/^bfloat16 checkpoint; kept as stored/);
      expect(kept.info.floatNodesOnCpu).toEqual([]);
      expect(await rowLogprobs(kept, ROWS)).toEqual(await rowLogprobs(widened, ROWS));
      expect((await kept.deviceWeights()).bytes).toBe(storedBytes(fx.tensors.values()));
      expect((await widened.deviceWeights()).bytes).toBeGreaterThan(1.9 * storedBytes(fx.tensors.values()));
    },
  );

  it("a BF16 GGUF (llama.cpp's q/k row order) kept as stored scores as widened", async () => {
    const fx = makeFixture(FAMILY_FIXTURES.llama!);
    const { file } = convertToGguf(fx, path.join(fx.dir, 'model-bf16.gguf'), { dtype: 'bfloat16' });
    expect(await rowLogprobs(await load(file, 'stored'), ROWS)).toEqual(await rowLogprobs(await load(file, 'compute'), ROWS));
  });

  it('an embedding and head in row blocks, kept as stored, score as whole ones widened', async () => {
    const fx = makeFixture(FAMILY_FIXTURES.qwen2!, { dtype: 'bfloat16' });
    const whole = await rowLogprobs(await load(fx.dir, 'compute'), ROWS);
    const webgpu = PROVIDERS.webgpu as { maxTensorBytes?: number };
    const limit = webgpu.maxTensorBytes;
    webgpu.maxTensorBytes = 40 * 32 * 4; // 40 rows of 32 float32 values a block: 8 blocks of 300 rows
    try {
      expect(await rowLogprobs(await load(fx.dir, 'stored'), ROWS)).toEqual(whole);
    } finally {
      webgpu.maxTensorBytes = limit;
    }
  });

  it('matrices widened in row blocks (each its own product, as an 8B model\'s are) score as whole ones widened at load', async () => {
    const fx = makeFixture(FAMILY_FIXTURES.llama!, { dtype: 'bfloat16' });
    const whole = await rowLogprobs(await load(fx.dir, 'compute'), ROWS);
    const unsplit = (await load(fx.dir, 'stored')).info.graphNodes;
    const webgpu = PROVIDERS.webgpu as { maxWidenedBytes?: number };
    const limit = webgpu.maxWidenedBytes;
    // 24 rows of 32 float32 values a block: q, o, gate and up in blocks of 24 rows (o and q
    // uneven: 24 + 8), down in blocks of 16 rows of 48, k and v whole.
    webgpu.maxWidenedBytes = 24 * 32 * 4;
    try {
      const e = await load(fx.dir, 'stored');
      // More nodes: each block its own widening and product.
      expect(e.info.graphNodes).toBeGreaterThan(unsplit);
      expect(await rowLogprobs(e, ROWS)).toEqual(whole);
    } finally {
      webgpu.maxWidenedBytes = limit;
    }
  });

  it('a float32 checkpoint has nothing to keep as stored: refused naming the key', async () => {
    const fx = makeFixture(FAMILY_FIXTURES.llama!);
    await expect(load(fx.dir, 'stored')).rejects.toThrow(/weightsAtRest: stored: .* has no weights narrower than its compute dtype \(float32\)/);
  });

  it('ctxprobe serve --weights-at-rest stored (and CTXPROBE_WEIGHTS_AT_REST) keeps them so, says it, and answers as widened', async () => {
    const fx = makeFixture(FAMILY_FIXTURES.llama!, { dtype: 'bfloat16' });
    const answers: unknown[] = [];
    for (const how of [['--weights-at-rest', 'stored'], [], ['--weights-at-rest', 'compute']]) {
      const env: Record<string, string> = how.length === 0 ? { CTXPROBE_WEIGHTS_AT_REST: 'stored' } : {};
      const s = await serveCli(fx.dir, ['--device', 'webgpu', ...how], env);
      try {
        const loaded = s.lines.find((l) => l.event === 'model_loaded');
        expect(loaded?.weights).toMatch(how[1] === 'compute' ? /widened at load, as asked/ : /kept as stored, as asked/);
        if (how[1] !== 'compute') expect(loaded?.deviceWeightBytes).toBe(storedBytes(fx.tensors.values()));
        const base = `http://127.0.0.1:${s.httpPort}`;
        const r = await postJson(base, '/v1/score', { items: [{ contextIds: { ids: ROWS[0]!.slice(0, 5) }, continuationsIds: [{ ids: ROWS[0]!.slice(5) }] }] });
        expect(r.status).toBe(200);
        answers.push(r.body);
      } finally {
        await s.stop();
      }
    }
    expect(answers[1]).toEqual(answers[0]);
    expect(answers[2]).toEqual(answers[0]);
  }, 300_000);
});
