// Quantized GGUF files on --device webgpu (lavapipe): every block format within 1e-4 per
// token of the float64 reference over the file's dequantized values (MatMulNBits at float32
// accuracy: the provider's default would quantize activations to int8), no float node left to
// the CPU provider by the new ops, and a row's bits its own whatever its batch, down to a
// pass of one token (the products see at least four rows: ProviderProfile.quantizedMinRows).
//
// Skips, saying so, where no Vulkan driver is installed (.ci/run installs lavapipe).
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { Engine } from '../src/engine/engine.js';
import { rng, type SyntheticSpec } from '../src/model/synthetic.js';
import type { QuantTypeName } from '../src/checkpoint/ggml-blocks.js';
import { makeFixture } from './fixtures.js';
import { convertToGguf, type GgufDtype } from './gguf-convert.js';
import { referenceForward } from './reference.js';
import { expectRowBitsOwn, rowLogprobs } from './row-logprobs.js';
import { VULKAN_DRIVERS } from './helpers.js';

const maybe = VULKAN_DRIVERS ? describe : describe.skip;
if (!VULKAN_DRIVERS) console.warn('webgpu quantized tests skipped: no Vulkan driver (see webgpu.test.ts)');

const engines: Engine[] = [];
afterAll(async () => {
  for (const e of engines) await e.release();
});
async function load(p: string): Promise<Engine> {
  const e = await Engine.load(p, { device: 'webgpu', threads: 1 });
  engines.push(e);
  return e;
}

const randomTokens = (seed: number, n: number) => {
  const r = rng(seed);
  return Array.from({ length: n }, () => 3 + Math.floor(r() * 297));
};

const WIDE: SyntheticSpec = { family: 'llama', hidden: 256, layers: 2, heads: 4, kvHeads: 2, intermediate: 512, vocab: 300, maxPositions: 64, seed: 31 };
const TYPES: QuantTypeName[] = ['Q8_0', 'Q4_0', 'Q4_1', 'Q4_K', 'Q5_K', 'Q6_K'];
const q4km = (name: string): GgufDtype | undefined => (/v_proj|down_proj|lm_head/.test(name) ? 'Q6_K' : 'Q4_K');

maybe('quantized GGUF on WebGPU', () => {
  const fx = makeFixture(WIDE);
  const files = [
    ...TYPES.map((type) => ({ name: type, ...convertToGguf(fx, path.join(fx.dir, `model-${type}.gguf`), { dtype: type }) })),
    { name: 'Q4_K_M', ...convertToGguf(fx, path.join(fx.dir, 'model-q4_k_m.gguf'), { dtype: 'Q4_K', typeOf: q4km }) },
  ];

  it.each(files.map((f) => [f.name, f] as const))('%s: within 1e-4 of the float64 reference, no float node on the CPU', async (_, { file, reference }) => {
    const e = await load(file);
    expect(e.info.floatNodesOnCpu).toEqual([]);
    const tokens = randomTokens(5, 20);
    const ref = referenceForward(reference, tokens);
    const [got] = await rowLogprobs(e, [tokens]);
    got!.forEach((lp, i) => expect(Math.abs(lp - ref.logprobs[i]![tokens[i + 1]!]!)).toBeLessThan(1e-4));
  });

  it("Q4_K_M: a row's bits are its own whatever its batch, and a one-token pass's are a longer pass's", async () => {
    const e = engines.at(-1)!;
    await expectRowBitsOwn(e, [randomTokens(1, 9), randomTokens(2, 5), randomTokens(3, 12)]);
  });
});

// onnxruntime gives each session its own copy of its initializers: the probe session, made
// on the first probe, held a second copy of every weight on the device. The weights now go
// up once, at load, and both sessions read those device tensors (graph/device-weights.ts).
maybe('one copy of the weights on WebGPU, whatever the mix of requests', () => {
  const probeOf = (e: Engine, tokens: number[]) =>
    e.forward({
      rows: [{ tokens, startPosition: 0, pastRow: 0, probe: { keyBins: tokens.map((_, i) => i % 3), chunks: 3, queryWeights: tokens.map(() => 1) } }],
      scored: tokens.slice(1).map((target, index) => ({ row: 0, index, target })),
      topK: 2,
      keepPresent: false,
    });

  it('a float32 checkpoint: its bytes on the device once at load, and nothing more after probes and scoring', async () => {
    const fx = makeFixture({ ...WIDE, tied: false, seed: 41 });
    const e = await load(fx.dir);
    const checkpointBytes = [...fx.tensors.values()].reduce((n, t) => n + t.data.length * 4, 0);
    expect(await e.deviceWeights()).toEqual({ tensors: expect.any(Number), bytes: checkpointBytes });
    const before = await e.deviceWeights();
    const tokens = randomTokens(21, 12);
    const probed = await probeOf(e, tokens);
    expect(probed.probe).toBeDefined();
    // The probe session's scores are the scoring session's bits, from the same tensors.
    const [scored] = await rowLogprobs(e, [tokens]);
    expect(Array.from(probed.logprobs)).toEqual(scored);
    expect(await e.deviceWeights()).toEqual(before);
  });

  it('a Q4_K_M GGUF: its parts up once, a probe adds none', async () => {
    const fx = makeFixture(WIDE);
    const { file } = convertToGguf(fx, path.join(fx.dir, 'model-once.gguf'), { dtype: 'Q4_K', typeOf: q4km });
    const e = await load(file);
    const before = await e.deviceWeights();
    expect(before.bytes).toBeGreaterThan(0);
    expect((await probeOf(e, randomTokens(22, 9))).probe).toBeDefined();
    expect(await e.deviceWeights()).toEqual(before);
  });
});

maybe('one session on WebGPU: --probe-session shared', () => {
  it("serves scoring and probes from one session, with the separate sessions' bits", async () => {
    const fx = makeFixture(WIDE);
    const { file } = convertToGguf(fx, path.join(fx.dir, 'model-shared.gguf'), { dtype: 'Q4_K', typeOf: q4km });
    const separate = await load(file);
    const shared = await Engine.load(file, { device: 'webgpu', threads: 1, probeSession: 'shared' });
    engines.push(shared);
    expect(shared.device.probeSession).toBe('shared');
    // Its one graph is the probe graph: the scoring graph and the tap.
    expect(shared.info.graphNodes).toBeGreaterThan(separate.info.graphNodes);
    const rows = [randomTokens(11, 10), randomTokens(12, 6)];
    expect(await rowLogprobs(shared, rows)).toEqual(await rowLogprobs(separate, rows));
    const probe = (e: Engine) =>
      e.forward({
        rows: rows.map((tokens, row) => ({
          tokens,
          startPosition: 0,
          pastRow: row,
          ...(row === 0 && { probe: { keyBins: tokens.map((_, i) => i % 3), chunks: 3, queryWeights: tokens.map(() => 1) } }),
        })),
        scored: rows.flatMap((tokens, row) => tokens.slice(1).map((target, index) => ({ row, index, target }))),
        topK: 2,
        keepPresent: false,
      });
    const [a, b] = [await probe(shared), await probe(separate)];
    expect(a.probe).toBeDefined();
    expect(a.probe).toEqual(b.probe);
    expect(Array.from(a.logprobs)).toEqual(Array.from(b.logprobs));
    // The CPU has one session whatever is asked: the setting is refused there, by name.
    await expect(Engine.load(file, { threads: 1, probeSession: 'shared' })).rejects.toThrow(/probeSession \(--probe-session\) is a setting of device webgpu, not cpu/);
  });
});
