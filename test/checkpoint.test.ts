// Checkpoint loading: bf16 / f16 / sharded twins agree with their f32 single-file
// twin, weights stay in the safetensors files, bad checkpoints fail naming file and tensor.
import fs from 'node:fs';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { Engine } from '../src/engine/engine.js';
import { Scorer } from '../src/core/scorer.js';
import { SafetensorsCheckpoint } from '../src/checkpoint/safetensors.js';
import { bf16ToF32, f16ToF32, f32ToBf16, f32ToF16 } from '../src/common/dtypes.js';
import { widenHalves } from '../src/common/floats.js';
import { readModelConfig } from '../src/model/config.js';
import { buildDecoderGraph } from '../src/model/decoder.js';
import { chooseDtype, resolveDevice } from '../src/engine/device.js';
import { DeviceError } from '../src/common/errors.js';
import { writeSyntheticCheckpoint } from '../src/model/synthetic.js';
import { FAMILY_FIXTURES, makeFixture, tempDir } from './fixtures.js';
import { directScoring } from '../src/requests/scoring.js';

const engines: Engine[] = [];
afterAll(async () => Promise.all(engines.map((e) => e.release())));
async function load(dir: string) {
  const e = await Engine.load(dir, { threads: 1 });
  engines.push(e);
  return e;
}

async function logprobsOf(e: Engine, tokens: number[]) {
  const out = await e.forward({
    rows: [{ tokens, startPosition: 0, pastRow: 0 }],
    scored: tokens.slice(1).map((target, index) => ({ row: 0, index, target })),
    topK: 0,
    keepPresent: false,
  });
  return Array.from(out.logprobs);
}

describe('number formats', () => {
  it('round-trips bf16 and f16 with round-to-nearest-even', () => {
    for (const v of [0, 1, -2.5, 3.140625, 65504, 1e-3, -7.5e-5]) {
      expect(f16ToF32(f32ToF16(v))).toBeCloseTo(v, Math.abs(v) < 1 ? 6 : 1);
      expect(Math.abs(bf16ToF32(f32ToBf16(v)) - v)).toBeLessThanOrEqual(Math.abs(v) / 128);
    }
    expect(f32ToBf16(1 + 2 ** -8)).toBe(0x3f80); // tie → even
    expect(f32ToBf16(1 + 3 * 2 ** -8)).toBe(0x3f82);
    expect(f16ToF32(f32ToF16(1 + 2 ** -11))).toBe(1); // tie → even
  });

  it('widens every 16-bit pattern at once to the bits of a value at a time (what --quantize reads)', () => {
    const every = Uint16Array.from({ length: 65536 }, (_, h) => h);
    for (const [dtype, one] of [
      ['bfloat16', bf16ToF32],
      ['float16', f16ToF32],
    ] as const) {
      const wide = widenHalves(every, dtype);
      const bits = new Uint32Array(wide.buffer);
      const mismatched = [...every].filter((h) => {
        const v = one(h);
        return Number.isNaN(v) ? !Number.isNaN(wide[h]!) : bits[h] !== new Uint32Array(Float32Array.of(v).buffer)[0];
      });
      expect(mismatched, dtype).toEqual([]);
    }
  });
});

describe.each(['bfloat16', 'float16'] as const)('%s checkpoint', (dtype) => {
  it('gives the answers of its f32 twin holding the same rounded values', async () => {
    const spec = FAMILY_FIXTURES.qwen2!;
    const half = makeFixture(spec, { dtype });
    // The twin: the same checkpoint in f32, holding the values the half file rounds to.
    const ckpt = new SafetensorsCheckpoint(half.dir);
    const twinDir = tempDir('twin');
    writeSyntheticCheckpoint(twinDir, spec);
    const { writeSafetensors } = await import('../src/checkpoint/safetensors.js');
    const rounded = new Map([...half.tensors.keys()].map((n) => [n, { shape: half.tensors.get(n)!.shape, data: ckpt.readFloat32(n) }]));
    writeSafetensors(path.join(twinDir, 'model.safetensors'), rounded);
    const a = await load(half.dir);
    const b = await load(twinDir);
    const tokens = [5, 80, 123, 7, 250, 33, 99, 1, 17];
    const la = await logprobsOf(a, tokens);
    const lb = await logprobsOf(b, tokens);
    la.forEach((v, i) => expect(Math.abs(v - lb[i]!)).toBeLessThan(1e-5));
    // And the rounding really happened: the half file differs from the unrounded one.
    const original = await load(makeFixture(spec).dir);
    const lo = await logprobsOf(original, tokens);
    expect(Math.max(...lo.map((v, i) => Math.abs(v - la[i]!)))).toBeGreaterThan(1e-6);
  });
});

describe('sharded checkpoints', () => {
  it('load through model.safetensors.index.json and agree with the single file', async () => {
    const spec = FAMILY_FIXTURES.llama!;
    const single = makeFixture(spec);
    const sharded = makeFixture(spec, { shards: 3 });
    expect(fs.existsSync(path.join(sharded.dir, 'model.safetensors.index.json'))).toBe(true);
    expect(fs.readdirSync(sharded.dir).filter((f) => f.endsWith('.safetensors'))).toHaveLength(3);
    const tokens = [9, 8, 7, 200, 100, 50, 25];
    const la = await logprobsOf(await load(single.dir), tokens);
    const lb = await logprobsOf(await load(sharded.dir), tokens);
    la.forEach((v, i) => expect(Math.abs(v - lb[i]!)).toBeLessThan(1e-6));
  });

  it('follows Hugging Face cache symlinks to the real blobs folder', async () => {
    const src = makeFixture(FAMILY_FIXTURES.gpt2!);
    // The cache's layout: models--org--name/snapshots/<rev>/<file> → ../../blobs/<hash>.
    const repo = path.join(tempDir('hub'), 'models--org--gpt2');
    const snapshot = path.join(repo, 'snapshots', 'abc123');
    fs.mkdirSync(path.join(repo, 'blobs'), { recursive: true });
    fs.mkdirSync(snapshot, { recursive: true });
    fs.readdirSync(src.dir).forEach((f, i) => {
      fs.copyFileSync(path.join(src.dir, f), path.join(repo, 'blobs', `blob${i}`));
      fs.symlinkSync(`../../blobs/blob${i}`, path.join(snapshot, f));
    });
    const tokens = [3, 4, 5, 6];
    const la = await logprobsOf(await load(snapshot), tokens);
    const lb = await logprobsOf(await load(src.dir), tokens);
    expect(la).toEqual(lb);
  });
});

describe('tensor names', () => {
  it('reads GPT-2 checkpoints that store tensors without the transformer. prefix', async () => {
    const spec = FAMILY_FIXTURES.gpt2!;
    const prefixed = makeFixture(spec);
    const bare = makeFixture(spec);
    const renamed = new Map([...bare.tensors].map(([n, t]) => [n.replace(/^transformer\./, ''), t]));
    expect([...renamed.keys()].some((n) => n.startsWith('transformer.'))).toBe(false);
    const { writeSafetensors } = await import('../src/checkpoint/safetensors.js');
    writeSafetensors(path.join(bare.dir, 'model.safetensors'), renamed);
    const tokens = [5, 6, 7, 8, 9];
    expect(await logprobsOf(await load(bare.dir), tokens)).toEqual(await logprobsOf(await load(prefixed.dir), tokens));
  });
});

describe('the graph references weights in place', () => {
  it('serialises to a model far smaller than its weights', () => {
    const fx = makeFixture({ ...FAMILY_FIXTURES.llama!, hidden: 128, intermediate: 256 });
    const ckpt = new SafetensorsCheckpoint(fx.dir);
    const weightBytes = fs.statSync(path.join(fx.dir, 'model.safetensors')).size;
    const graph = buildDecoderGraph(readModelConfig(fx.dir), ckpt);
    expect(graph.model.byteLength).toBeLessThan(weightBytes / 10);
  });
});

describe('bad checkpoints', () => {
  it('names an unknown model_type', () => {
    const fx = makeFixture(FAMILY_FIXTURES.llama!);
    const cfg = JSON.parse(fs.readFileSync(path.join(fx.dir, 'config.json'), 'utf8'));
    fs.writeFileSync(path.join(fx.dir, 'config.json'), JSON.stringify({ ...cfg, model_type: 'mamba' }));
    expect(() => readModelConfig(fx.dir)).toThrow(
      /config\.json: model_type "mamba" is not supported \(supported: llama, mistral, qwen2, qwen3, olmo2, phi3, gemma2, gemma3_text, mixtral, qwen3_moe, gpt2\)/,
    );
  });

  it('names a missing tensor and the folder', async () => {
    const fx = makeFixture(FAMILY_FIXTURES.llama!);
    const { writeSafetensors } = await import('../src/checkpoint/safetensors.js');
    fx.tensors.delete('model.layers.1.mlp.up_proj.weight');
    writeSafetensors(path.join(fx.dir, 'model.safetensors'), fx.tensors);
    await expect(Engine.load(fx.dir)).rejects.toThrow(`${fx.dir}: tensor model.layers.1.mlp.up_proj.weight is missing`);
  });

  it('names a tensor whose shape disagrees with the config, and its file', async () => {
    const fx = makeFixture(FAMILY_FIXTURES.mistral!);
    const cfg = JSON.parse(fs.readFileSync(path.join(fx.dir, 'config.json'), 'utf8'));
    fs.writeFileSync(path.join(fx.dir, 'config.json'), JSON.stringify({ ...cfg, intermediate_size: 41 }));
    await expect(Engine.load(fx.dir)).rejects.toThrow(
      /model\.safetensors: tensor model\.layers\.0\.mlp\.gate_proj\.weight has shape \[40,32\], config says \[41,32\]/,
    );
  });

  it('refuses a truncated weights file', () => {
    const fx = makeFixture(FAMILY_FIXTURES.gpt2!);
    const file = path.join(fx.dir, 'model.safetensors');
    fs.truncateSync(file, fs.statSync(file).size - 10);
    expect(() => new SafetensorsCheckpoint(fx.dir)).toThrow(
      /model\.safetensors: tensor .*: data ends at byte \d+ of \d+: the file is truncated/,
    );
  });

  it('names the file and the fault of a broken config, tokenizer or safetensors header', async () => {
    const { Engine } = await import('../src/engine/engine.js');
    const cases: [string, (dir: string) => void, RegExp][] = [
      ['config.json', (d) => fs.writeFileSync(path.join(d, 'config.json'), '{"model_type": "llama",'), /config\.json: not valid JSON/],
      ['tokenizer.json', (d) => fs.writeFileSync(path.join(d, 'tokenizer.json'), 'not json'), /tokenizer\.json: not valid JSON/],
      ['tokenizer.json', (d) => fs.writeFileSync(path.join(d, 'tokenizer.json'), '{"model": 3}'), /tokenizer\.json: not a tokenizer/],
      [
        'tokenizer_config.json',
        (d) => fs.writeFileSync(path.join(d, 'tokenizer_config.json'), '[]'),
        /tokenizer_config\.json: a JSON object is required/,
      ],
    ];
    for (const [, breakIt, message] of cases) {
      const fx = makeFixture(FAMILY_FIXTURES.llama!);
      breakIt(fx.dir);
      await expect(Engine.load(fx.dir, { threads: 1 })).rejects.toThrow(message);
    }
    // Safetensors headers, rewritten field by field.
    const rewrite = (edit: (header: Record<string, any>) => void) => {
      const fx = makeFixture(FAMILY_FIXTURES.llama!);
      const file = path.join(fx.dir, 'model.safetensors');
      const buf = fs.readFileSync(file);
      const len = Number(buf.readBigUInt64LE(0));
      const header = JSON.parse(buf.subarray(8, 8 + len).toString('utf8'));
      edit(header);
      const text = Buffer.from(JSON.stringify(header));
      const prefix = Buffer.alloc(8);
      prefix.writeBigUInt64LE(BigInt(text.length));
      fs.writeFileSync(file, Buffer.concat([prefix, text, buf.subarray(8 + len)]));
      return () => new SafetensorsCheckpoint(fx.dir);
    };
    const first = (h: Record<string, any>) => h[Object.keys(h).find((k) => k !== '__metadata__')!];
    expect(rewrite((h) => (first(h).shape = 'wide'))).toThrow(/tensor .*: shape "wide" is not a list of sizes/);
    expect(rewrite((h) => (first(h).data_offsets = [-8, first(h).data_offsets[1] - 8]))).toThrow(
      /data_offsets \[-8,.*\] are not \[begin, end\]/,
    );
    expect(rewrite((h) => (first(h).dtype = 'I8'))).toThrow(/dtype "I8" is not supported/);
    expect(rewrite((h) => (first(h).shape = [1, 2]))).toThrow(/disagrees with shape \[1,2\] F32/);
  });
});

describe('devices', () => {
  it('runs on cpu by default and refuses unknown devices', () => {
    expect(resolveDevice().kind).toBe('cpu');
    expect(() => resolveDevice({ device: 'tpu' })).toThrow(DeviceError);
    expect(() => resolveDevice({ device: 'cpu', dtype: 'bfloat16' })).toThrow(/bfloat16 needs device cuda/);
  });

  it('chooses the compute dtype and says why: bfloat16 on CUDA for a bfloat16 checkpoint, float16 otherwise, float32 on the CPU', () => {
    expect(chooseDtype('cuda', undefined, 'bfloat16').dtype).toBe('bfloat16');
    expect(chooseDtype('cuda', undefined, 'bfloat16').reason).toMatch(/bfloat16 checkpoint/);
    expect(chooseDtype('cuda', undefined, 'float16').dtype).toBe('float16');
    expect(chooseDtype('cuda', undefined, undefined).dtype).toBe('float16');
    expect(chooseDtype('cpu', undefined, 'bfloat16')).toEqual({ dtype: 'float32', reason: 'CPU default' });
    expect(chooseDtype('cuda', 'float32', 'bfloat16')).toEqual({ dtype: 'float32', reason: 'asked for (--dtype or the model config)' });
  });

  it('says how to install the CUDA build when CUDA is asked for and absent', () => {
    let cudaInstalled = true;
    try {
      resolveDevice({ device: 'cuda:0' });
    } catch (e) {
      cudaInstalled = false;
      expect((e as Error).message).toMatch(/cuda:0: the CUDA build of onnxruntime-node is not installed.*ONNXRUNTIME_NODE_INSTALL=cuda12/);
    }
    if (cudaInstalled)
      expect(resolveDevice({ device: 'cuda:0' }).sessionOptions.executionProviders).toEqual([{ name: 'cuda', deviceId: 0 }]);
  });

  it('computes in float16 (the CUDA dtype) within half-precision tolerance of float32', async () => {
    const fx = makeFixture(FAMILY_FIXTURES.llama!);
    const f32 = await load(fx.dir);
    const f16 = await Engine.load(fx.dir, { dtype: 'float16', threads: 1 });
    engines.push(f16);
    const tokens = [10, 20, 30, 40, 50, 60];
    const a = await logprobsOf(f32, tokens);
    const b = await logprobsOf(f16, tokens);
    a.forEach((v, i) => expect(Math.abs(v - b[i]!)).toBeLessThan(0.05));
    // The float16 KV cache crosses the graph boundary when a prefix is shared.
    const requests = [{ context: [5, 6, 7, 8, 9], continuations: [[10, 11], [12]] }];
    const [shared] = await directScoring(new Scorer(f16)).loglikelihood(requests);
    const [reference] = await directScoring(new Scorer(f32, { prefixSharing: false })).loglikelihood(requests);
    shared!.forEach((c, j) =>
      c.tokenLogprobs.forEach((lp, k) => expect(Math.abs(lp - reference![j]!.tokenLogprobs[k]!)).toBeLessThan(0.05)),
    );
  });
});
