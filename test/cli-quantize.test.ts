// --quantize, --quantized-activations and --probe-session as docs/models.md gives them: flags,
// environment variables and model repository keys of `ctxprobe serve`, said in the load log,
// and a Score over HTTP answering with the quantized model's numbers (the float64 reference
// over the values the load made).
import fs from 'node:fs';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { FAMILY_FIXTURES, makeFixture, tempDir } from './fixtures.js';
import { convertToGguf } from './gguf-convert.js';
import { referenceForward } from './reference.js';
import { serveCli, type Served } from './cli-serve.js';
import { postJson } from './helpers.js';
import { dequantizeRows } from '../src/checkpoint/ggml-blocks.js';
import { quantizeRows } from '../src/checkpoint/ggml-quantize.js';

const WIDE = { family: 'llama', hidden: 256, layers: 2, heads: 4, kvHeads: 2, intermediate: 512, vocab: 300, maxPositions: 64, seed: 51 } as const;
const running: Served[] = [];
afterAll(async () => Promise.all(running.map((s) => s.stop())));

async function scoreOver(s: Served, context: number[], continuation: number[]): Promise<number[]> {
  const { status, body } = await postJson(`http://127.0.0.1:${s.httpPort}`, '/v1/score', {
    items: [{ contextIds: { ids: context }, continuationsIds: [{ ids: continuation }] }],
  });
  expect(status).toBe(200);
  return body.items[0].continuations[0].tokenLogprobs;
}

describe('quantization on the command line', () => {
  it('--quantize q4_k: the load log says so, and Score answers with the quantized model', async () => {
    const fx = makeFixture(WIDE);
    const s = await serveCli(fx.dir, ['--quantize', 'q4_k']);
    running.push(s);
    const loaded = s.lines.find((l) => l.event === 'model_loaded')!;
    expect(JSON.stringify(loaded)).toMatch(/matrices quantized at load to q4_k \(approximate\)/);
    const tokens = [5, 17, 40, 99, 3, 250, 7, 81];
    const got = await scoreOver(s, tokens.slice(0, 3), tokens.slice(3));
    const quantized = {
      config: fx.config,
      tensors: new Map(
        [...fx.tensors].map(([name, t]) => {
          if (t.shape.length !== 2) return [name, t];
          const [rows, cols] = t.shape as [number, number];
          return [name, { shape: t.shape, data: dequantizeRows('Q4_K', quantizeRows('Q4_K', t.data, rows, cols), rows, cols) }];
        }),
      ),
    };
    const ref = referenceForward(quantized, tokens);
    got.forEach((lp, k) => expect(Math.abs(lp - ref.logprobs[2 + k]![tokens[3 + k]!]!)).toBeLessThan(1e-4));
  });

  it('CTXPROBE_QUANTIZED_ACTIVATIONS=int8 on a GGUF file: the load log says so; on a float model the start fails naming it', async () => {
    const fx = makeFixture(WIDE);
    const { file } = convertToGguf(fx, path.join(fx.dir, 'model-q8_0.gguf'), { dtype: 'Q8_0' });
    const s = await serveCli(file, [], { CTXPROBE_QUANTIZED_ACTIVATIONS: 'int8' });
    running.push(s);
    expect(JSON.stringify(s.lines.find((l) => l.event === 'model_loaded')!)).toMatch(/quantized products on int8 activations \(approximate\)/);
    await expect(serveCli(fx.dir, [], { CTXPROBE_QUANTIZED_ACTIVATIONS: 'int8' })).rejects.toThrow(/quantizedActivations: int8: .* has no quantized weights/);
  });
});

const VULKAN = ['/usr/share/vulkan/icd.d', '/etc/vulkan/icd.d'].some((d) => fs.existsSync(d) && fs.readdirSync(d).some((f) => f.endsWith('.json')));

describe('model repository keys and --probe-session', () => {
  it('a model config with quantize and quantizedActivations serves as the flags do', async () => {
    const fx = makeFixture(WIDE);
    const repo = tempDir('repo-quantize');
    fs.writeFileSync(path.join(repo, 'q.json'), JSON.stringify({ name: 'q', path: fx.dir, quantize: 'q8_0', quantizedActivations: 'int8' }));
    const s = await serveCli('', ['--models', repo]);
    running.push(s);
    const loaded = s.lines.find((l) => l.event === 'model_loaded')!;
    expect(loaded.model).toBe('q');
    expect(loaded.weights).toMatch(/matrices quantized at load to q8_0 \(approximate\); quantized products on int8 activations \(approximate\)/);
    expect((await scoreOver(s, [5, 17, 40], [99, 3])).every((lp) => Number.isFinite(lp) && lp < 0)).toBe(true);
  });

  it('weightsAtRest in a model config keeps a BF16 model as stored on the CPU, as --weights-at-rest does, with the same scores', async () => {
    const fx = makeFixture(FAMILY_FIXTURES.llama!, { dtype: 'bfloat16' });
    const repo = tempDir('repo-weights-at-rest');
    fs.writeFileSync(path.join(repo, 'b.json'), JSON.stringify({ name: 'b', path: fx.dir, weightsAtRest: 'stored' }));
    const fromConfig = await serveCli('', ['--models', repo]);
    running.push(fromConfig);
    expect(fromConfig.lines.find((l) => l.event === 'model_loaded')!.weights).toMatch(/^bfloat16 checkpoint; kept as stored, as asked/);
    const fromFlag = await serveCli(fx.dir, ['--weights-at-rest', 'stored']);
    running.push(fromFlag);
    expect(fromFlag.lines.find((l) => l.event === 'model_loaded')!.weights).toMatch(/kept as stored, as asked/);
    expect(await scoreOver(fromConfig, [5, 17, 40], [99, 3])).toEqual(await scoreOver(fromFlag, [5, 17, 40], [99, 3]));
    fs.writeFileSync(path.join(repo, 'b.json'), JSON.stringify({ name: 'b', path: fx.dir, weightsAtRest: 'folded' }));
    await expect(serveCli('', ['--models', repo])).rejects.toThrow(/weightsAtRest/);
  });

  it('--probe-session is refused on the CPU, naming it; CTXPROBE_PROBE_SESSION and a model config set it on WebGPU', async () => {
    const fx = makeFixture(WIDE);
    await expect(serveCli(fx.dir, ['--probe-session', 'shared'])).rejects.toThrow(/probeSession \(--probe-session\) is a setting of device webgpu, not cpu/);
    if (!VULKAN) return console.warn('webgpu part skipped: no Vulkan driver (see webgpu.test.ts)');
    const fromEnv = await serveCli(fx.dir, ['--device', 'webgpu'], { CTXPROBE_PROBE_SESSION: 'shared' });
    running.push(fromEnv);
    expect(fromEnv.lines.find((l) => l.event === 'model_loaded')!.probeSession).toBe('shared');
    const repo = tempDir('repo-probe-session');
    fs.writeFileSync(path.join(repo, 'g.json'), JSON.stringify({ name: 'g', path: fx.dir, device: 'webgpu', probeSession: 'shared' }));
    const fromConfig = await serveCli('', ['--models', repo]);
    running.push(fromConfig);
    expect(fromConfig.lines.find((l) => l.event === 'model_loaded')!.probeSession).toBe('shared');
    // The default, said as well.
    const plain = await serveCli(fx.dir, ['--device', 'webgpu']);
    running.push(plain);
    expect(plain.lines.find((l) => l.event === 'model_loaded')!.probeSession).toBe('separate');
  });
});
