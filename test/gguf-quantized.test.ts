// Quantized GGUF files computed exactly: every listed block format, in a model whose every
// matrix is whole blocks of it (hidden 256), scores within 1e-4 per token of the float64
// reference over the values the file defines (ggml's dequantization); every family as Q8_0
// and Q4_1 (the matrices whose rows are not whole blocks stay F32, as llama.cpp falls back);
// a Q4_K_M-like mix; and the batch contracts: a row's bits do not depend on its batch, and a
// decode step's are the Score's.
import fs from 'node:fs';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { Engine } from '../src/engine/engine.js';
import { readGguf, ggmlTypeName } from '../src/checkpoint/gguf.js';
import { rng, type SyntheticSpec } from '../src/model/synthetic.js';
import { EXACT_FORMS, dequantizeRows, repackRows, type QuantTypeName } from '../src/checkpoint/ggml-blocks.js';
import ort from 'onnxruntime-node';
import { quantizeRows } from '../src/checkpoint/ggml-quantize.js';
import { bf16ToF32, f32ToBf16 } from '../src/common/floats.js';
import { FAMILY_FIXTURES, makeFixture } from './fixtures.js';
import { convertToGguf, GGUF_FAMILIES, type GgufDtype } from './gguf-convert.js';
import { referenceForward } from './reference.js';
import onnxProto from 'onnx-proto';
import { openCheckpoint } from '../src/engine/checkpoint.js';
import { buildDecoderGraph } from '../src/model/decoder.js';

const { onnx } = onnxProto;
import { expectRowBitsOwn, rowLogprobs } from './row-logprobs.js';

const engines: Engine[] = [];
afterAll(async () => Promise.all(engines.map((e) => e.release())));
async function load(p: string): Promise<Engine> {
  const e = await Engine.load(p, { threads: 1 });
  engines.push(e);
  return e;
}

function randomTokens(seed: number, n: number, vocab: number): number[] {
  const r = rng(seed);
  return Array.from({ length: n }, () => 3 + Math.floor(r() * (vocab - 3)));
}

/** Each token's log-prob against the float64 reference over the file's values. */
async function expectExact(file: string, reference: Parameters<typeof referenceForward>[0], seed: number) {
  const e = await load(file);
  const tokens = randomTokens(seed, 20, e.config.vocabSize);
  const ref = referenceForward(reference, tokens);
  const [got] = await rowLogprobs(e, [tokens]);
  got!.forEach((lp, i) => expect(Math.abs(lp - ref.logprobs[i]![tokens[i + 1]!]!)).toBeLessThan(1e-4));
  return e;
}

/** A llama whose every matrix is whole blocks of 256 (hidden 256, MLP 512, q/k/v/o 256 wide). */
const WIDE: SyntheticSpec = { family: 'llama', hidden: 256, layers: 2, heads: 4, kvHeads: 2, intermediate: 512, vocab: 300, maxPositions: 64, seed: 31 };

const TYPES: QuantTypeName[] = ['Q8_0', 'Q4_0', 'Q4_1', 'Q4_K', 'Q5_K', 'Q6_K'];

describe('every block format, every matrix quantized', () => {
  const fx = makeFixture(WIDE);
  it.each(TYPES)('%s scores within 1e-4 of the float64 reference over its dequantized values', async (type) => {
    const { file, reference } = convertToGguf(fx, path.join(fx.dir, `model-${type}.gguf`), { dtype: type });
    const types = new Set([...readGguf(file).tensors.values()].map((t) => ggmlTypeName(t.type)));
    // Every matrix in the format (norms stay F32).
    expect([...types].sort()).toEqual([`${type} (${{ Q8_0: 8, Q4_0: 2, Q4_1: 3, Q4_K: 12, Q5_K: 13, Q6_K: 14 }[type]})`, 'F32 (0)'].sort());
    await expectExact(file, reference, 5);
  });
});

/** What llama.cpp's Q4_K_M gives a llama: Q6_K for v and down projections (all of them here)
 * and the head, Q4_K for the rest. */
const q4km = (name: string): GgufDtype | undefined => (/v_proj|down_proj|lm_head/.test(name) ? 'Q6_K' : 'Q4_K');

describe('a Q4_K_M mix', () => {
  const fx = makeFixture(WIDE);
  const { file, reference } = convertToGguf(fx, path.join(fx.dir, 'model-q4_k_m.gguf'), { dtype: 'Q4_K', typeOf: q4km });

  it('scores within 1e-4 of the float64 reference; the load says how the weights are stored', async () => {
    const e = await expectExact(file, reference, 7);
    expect(e.info.weights).toMatch(/Q4_K/);
    expect(e.info.weights).toMatch(/Q6_K/);
  });

  it("a row's bits are its own whatever its batch, and a one-token pass's are a longer pass's", async () => {
    const e = await load(file);
    await expectRowBitsOwn(e, [randomTokens(1, 9, 300), randomTokens(2, 5, 300), randomTokens(3, 12, 300)]);
  });
});

describe.each(GGUF_FAMILIES.filter((f) => FAMILY_FIXTURES[f]))('%s', (family) => {
  // Gemma: llama.cpp scales queries by head_dim^-½ (no key for query_pre_attn_scalar);
  // Qwen3-MoE: llama.cpp renormalises its experts and has no dense layers (as gguf.test.ts).
  const base = FAMILY_FIXTURES[family]!;
  const extra = base.extraConfig ?? {};
  const spec: SyntheticSpec = family.startsWith('gemma')
    ? { ...base, extraConfig: { ...extra, query_pre_attn_scalar: base.headDim } }
    : family === 'qwen3_moe'
      ? { ...base, extraConfig: { ...extra, norm_topk_prob: true, mlp_only_layers: [] } }
      : base;
  it.each(['Q8_0', 'Q4_1'] as const)('as %s (its matrices of whole blocks) scores within 1e-4 of the float64 reference', async (type) => {
    const fx = makeFixture(spec);
    const { file, reference } = convertToGguf(fx, path.join(fx.dir, `model-${type}.gguf`), { dtype: type });
    expect([...readGguf(file).tensors.values()].some((t) => ggmlTypeName(t.type).startsWith(type))).toBe(true);
    await expectExact(file, reference, 9);
  });
});

describe('refusals', () => {
  it('a non-finite scale in a quantized tensor refuses the load, naming the tensor', async () => {
    const fx = makeFixture({ ...WIDE, layers: 1 });
    const { file } = convertToGguf(fx, path.join(fx.dir, 'model-nan.gguf'), { dtype: 'Q8_0' });
    const t = readGguf(file).tensors.get('blk.0.ffn_up.weight')!;
    // Row 3's first block: its f16 scale as infinity.
    const fd = fs.openSync(file, 'r+');
    fs.writeSync(fd, Buffer.from([0x00, 0x7c]), 0, 2, t.offset + 3 * (256 / 32) * 34);
    fs.closeSync(fd);
    await expect(Engine.load(file, { threads: 1 })).rejects.toThrow(/tensor blk\.0\.ffn_up\.weight \(model\.layers\.0\.mlp\.up_proj\.weight\) has a non-finite scale or min in block row 3/);
  });
});

/** The mean distance per token of a file's log-probs on int8 activations to the float64
 * reference over its dequantized values. */
async function int8Distance(file: string, reference: Parameters<typeof referenceForward>[0], seed: number) {
  const e = await Engine.load(file, { threads: 1, quantizedActivations: 'int8' });
  engines.push(e);
  const tokens = randomTokens(seed, 20, e.config.vocabSize);
  const ref = referenceForward(reference, tokens);
  const [got] = await rowLogprobs(e, [tokens]);
  const distance = got!.map((lp, i) => Math.abs(lp - ref.logprobs[i]![tokens[i + 1]!]!));
  return { e, mean: distance.reduce((a, b) => a + b, 0) / distance.length };
}

describe('int8 activations, on request', () => {
  it('moves each log-prob a little from the exact values, says so in the load log, and is refused for a float model', async () => {
    const fx = makeFixture(WIDE);
    const { file, reference } = convertToGguf(fx, path.join(fx.dir, 'model-int8-act.gguf'), { dtype: 'Q4_K', typeOf: q4km });
    const { e, mean } = await int8Distance(file, reference, 5);
    expect(e.info.weights).toMatch(/int8 activations \(approximate\)/);
    // Approximate: off the exact values, but by far less than a nat.
    expect(mean).toBeGreaterThan(1e-5);
    expect(mean).toBeLessThan(0.05);
    await expect(Engine.load(fx.dir, { threads: 1, quantizedActivations: 'int8' })).rejects.toThrow(/quantizedActivations: int8: .* has no quantized weights/);
  });

  // The 8-bit part as onnxruntime reads it: at float32 accuracy the product of one matrix's
  // wide parts (ggml-blocks.ts) is the float64 product of its dequantized values.
  it.each(['Q8_0', 'Q5_K', 'Q6_K'] as const)('%s: its 8-bit parts, in a MatMulNBits of float32 accuracy, give the product of the dequantized matrix', async (type) => {
    const [N, K, M] = [8, 512, 3];
    const r = rng(17);
    const bytes = quantizeRows(type, Float32Array.from({ length: N * K }, () => r() * 2 - 1), N, K);
    const w = dequantizeRows(type, bytes, N, K);
    const { parts } = repackRows(type, bytes, N, K, true);
    const { block, mins } = EXACT_FORMS[type];
    const init = (name: string, dataType: number, dims: number[], data: Uint8Array) => onnx.TensorProto.create({ name, dataType, dims, rawData: data });
    const value = (name: string, dims: number[]) => onnx.ValueInfoProto.create({ name, type: { tensorType: { elemType: 1, shape: { dim: dims.map((d) => ({ dimValue: d })) } } } });
    const attrs = Object.entries({ K, N, bits: 8, block_size: block, accuracy_level: 1 }).map(([name, i]) => ({ name, type: onnx.AttributeProto.AttributeType.INT, i }));
    const model = onnx.ModelProto.encode(
      onnx.ModelProto.create({
        irVersion: 10,
        opsetImport: [{ domain: '', version: 21 }, { domain: 'com.microsoft', version: 1 }],
        graph: {
          name: 'wide',
          node: [{ opType: 'MatMulNBits', domain: 'com.microsoft', input: ['x', 'w', 's', 'z'], output: ['y'], attribute: attrs }],
          initializer: [init('w', 2, [N, K / block, block], parts.wide!), init('s', 1, [(N * K) / block], parts.scales!), init('z', 2, [(N * K) / block], parts.wideZeros!)],
          input: [value('x', [M, K])],
          output: [value('y', [M, N])],
        },
      }),
    ).finish();
    const session = await ort.InferenceSession.create(model);
    const x = Float32Array.from({ length: M * K }, () => r() * 2 - 1);
    const y = (await session.run({ x: new ort.Tensor('float32', x, [M, K]) })).y!.data as Float32Array;
    await session.release();
    // The mins' term (Q5_K) is a product of its own in the graph (quantized.ts): taken out here.
    const minOf = (n: number, k: number) => (mins ? new Float32Array(parts.mins!.buffer)[n * (K / 32) + Math.floor(k / 32)]! : 0);
    for (let m = 0; m < M; m++)
      for (let n = 0; n < N; n++) {
        let want = 0;
        for (let k = 0; k < K; k++) want += x[m * K + k]! * (w[n * K + k]! - minOf(n, k));
        expect(Math.abs(y[m * N + n]! - want)).toBeLessThan(1e-4);
      }
  });

  // The formats of more than 4 bits are one 8-bit product on int8 activations (two 4-bit ones
  // exactly): a wrong zero point or a value out of place would be off by nats, not hundredths.
  it.each(['Q8_0', 'Q5_K', 'Q6_K'] as const)('%s: one 8-bit MatMulNBits a product, near the exact values as the 4-bit formats are', async (type) => {
    const fx = makeFixture(WIDE);
    const { file, reference } = convertToGguf(fx, path.join(fx.dir, `model-int8-act-${type}.gguf`), { dtype: type });
    const opened = openCheckpoint(file);
    const bits = (activations: 'int8' | 'float32') =>
      onnx.ModelProto.decode(buildDecoderGraph(opened.config, opened.weights, 'float32', undefined, 'cpu', { quantizedActivations: activations }).model)
        .graph!.node!.filter((n) => n.opType === 'MatMulNBits')
        .map((n) => Number(n.attribute!.find((a) => a.name === 'bits')!.i));
    // Seven products a layer and the head.
    expect(bits('int8')).toEqual(new Array(2 * 7 + 1).fill(8));
    expect(bits('float32')).toEqual(new Array(2 * 2 * 7 + 2).fill(4));
    const { mean } = await int8Distance(file, reference, 6);
    expect(mean).toBeGreaterThan(1e-6);
    expect(mean).toBeLessThan(0.05);
  });
});

describe('--quantize at load', () => {
  /** The model a float checkpoint becomes under --quantize: each matrix through the format. */
  const quantizedReference = (fx: { config: Record<string, any>; tensors: Map<string, { shape: number[]; data: Float32Array }> }, type: QuantTypeName, stored: (x: number) => number) => ({
    config: fx.config,
    tensors: new Map(
      [...fx.tensors].map(([name, t]) => {
        if (t.shape.length !== 2) return [name, { shape: t.shape, data: t.data.map(stored) }];
        const [rows, cols] = t.shape as [number, number];
        return [name, { shape: t.shape, data: dequantizeRows(type, quantizeRows(type, t.data.map(stored), rows, cols), rows, cols) }];
      }),
    ),
  });

  it.each([
    ['q4_k', 'float32', 'Q4_K'],
    ['q8_0', 'bfloat16', 'Q8_0'],
  ] as const)('%s of a %s checkpoint scores as the float64 reference over the quantized values, and says it is approximate', async (quantize, dtype, type) => {
    const fx = makeFixture(WIDE, dtype === 'bfloat16' ? { dtype } : {});
    const e = await Engine.load(fx.dir, { threads: 1, quantize });
    engines.push(e);
    expect(e.info.weights).toMatch(new RegExp(`matrices quantized at load to ${quantize} \\(approximate\\)`));
    const tokens = randomTokens(8, 20, e.config.vocabSize);
    const ref = referenceForward(quantizedReference(fx, type, dtype === 'bfloat16' ? (x) => bf16ToF32(f32ToBf16(x)) : (x) => x), tokens);
    const exact = referenceForward(fx, tokens);
    const [got] = await rowLogprobs(e, [tokens]);
    got!.forEach((lp, i) => expect(Math.abs(lp - ref.logprobs[i]![tokens[i + 1]!]!)).toBeLessThan(1e-4));
    // And not the checkpoint's own numbers.
    expect(got!.some((lp, i) => Math.abs(lp - exact.logprobs[i]![tokens[i + 1]!]!) > 1e-3)).toBe(true);
  });
});
