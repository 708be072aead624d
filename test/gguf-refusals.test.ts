// GGUF files from an attacker or a broken download: each is a valid fixture file
// (test/gguf-convert.ts) broken one way, and each must be refused at load naming the file
// and the key or tensor — never served, never a hang, never an allocation sized by a
// forged count. Whatever could hang (a FIFO) runs in a child process with a deadline.
import { execFileSync, spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { Engine } from '../src/engine/engine.js';
import { CheckpointError } from '../src/common/errors.js';
import { ggufModel } from '../src/checkpoint/gguf-arch.js';
import { GgufCheckpoint } from '../src/checkpoint/gguf-weights.js';
import { readGguf } from '../src/checkpoint/gguf.js';
import { meta as v } from '../src/checkpoint/gguf-write.js';
import { tempDir } from './fixtures.js';
import { ggufFixture, rewrite } from './gguf-convert.js';
import { ROOT } from './cli-serve.js';

const loaded: Engine[] = [];
afterAll(async () => Promise.all(loaded.map((e) => e.release())));

/** Engine.load must reject with a CheckpointError containing `message`, within `ms`. */
async function refused(file: string, message: string | RegExp, ms = 20_000): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  const deadline = new Promise<never>(
    (_, reject) => (timer = setTimeout(() => reject(new Error(`Engine.load(${file}) still running after ${ms} ms`)), ms)),
  );
  try {
    loaded.push(await Promise.race([Engine.load(file, { threads: 1 }), deadline]));
  } catch (e) {
    expect(e).toBeInstanceOf(CheckpointError);
    if (typeof message === 'string') expect((e as Error).message).toContain(message);
    else expect((e as Error).message).toMatch(message);
    return;
  } finally {
    clearTimeout(timer);
  }
  throw new Error(`${file} loaded; expected a refusal with ${message}`);
}

/** The first bytes of a GGUF file: magic, version, tensor and key/value counts. */
function header(version: number, tensors: bigint, kvs: bigint): Buffer {
  const b = Buffer.alloc(24);
  b.write('GGUF', 0, 'latin1');
  b.writeUInt32LE(version, 4);
  b.writeBigUInt64LE(tensors, 8);
  b.writeBigUInt64LE(kvs, 16);
  return b;
}

describe('tensor types', () => {
  it('an unknown ggml type (Q2_K = 10) is refused at load naming the tensor and the type', async () => {
    const file = rewrite(ggufFixture(), (_, t) => (t.find((x) => x.name === 'blk.0.attn_q.weight')!.type = 10));
    await refused(file, 'tensor blk.0.attn_q.weight has ggml type Q2_K (10), which ctxprobe does not read');
  });

  it('an id ggml does not have is refused as unknown', async () => {
    const file = rewrite(ggufFixture(), (_, t) => (t.find((x) => x.name === 'output_norm.weight')!.type = 77));
    await refused(file, 'tensor output_norm.weight has ggml type unknown (77)');
  });

  it('a quantized tensor (Q8_0) among float ones is served, and the load names the types', async () => {
    const file = rewrite(ggufFixture(), (_, t) => {
      const q = t.find((x) => x.name === 'blk.1.ffn_up.weight')!;
      [q.type, q.data] = [8, new Uint8Array((q.dims[0]! / 32) * q.dims[1]! * 34)];
    });
    expect(readGguf(file).tensors.get('blk.1.ffn_up.weight')!.bytes).toBe((32 / 32) * 48 * 34);
    const e = await Engine.load(file, { threads: 1 });
    try {
      expect(e.info.weights).toMatch(/^F32\/Q8_0 GGUF|^Q8_0\/F32 GGUF/);
    } finally {
      await e.release();
    }
  });

  it('a quantized tensor is handed on as its ggml type, raw byte range and dims (with its row order) when the graph takes them', () => {
    const file = rewrite(ggufFixture('mixtral'), (_, t) => {
      for (const name of ['blk.0.attn_q.weight', 'blk.1.ffn_up_exps.weight']) {
        const q = t.find((x) => x.name === name)!;
        [q.type, q.data] = [8, new Uint8Array((q.dims[0]! / 32) * q.dims.slice(1).reduce((a, b) => a * b, 1) * 34)];
      }
    });
    const g = readGguf(file);
    const ckpt = new GgufCheckpoint(g, ggufModel(g));
    const q = ckpt.get('model.layers.0.self_attn.q_proj.weight', [32, 32]);
    expect([q.offset, q.length, q.location]).toEqual([g.tensors.get('blk.0.attn_q.weight')!.offset, 32 * 34, path.basename(file)]);
    expect(q.quantized).toEqual({ ggmlType: 8, typeName: 'Q8_0', dims: [32, 32], blockValues: 32, blockBytes: 34 });
    expect(q.rowOrder!.key).toBe('rope_pairs_4x8');
    // Expert 3 of 4 stacked [4, 24, 32]: its own rows of blocks.
    const up = ckpt.get('model.layers.1.block_sparse_moe.experts.3.w3.weight', [24, 32]);
    const stacked = g.tensors.get('blk.1.ffn_up_exps.weight')!;
    expect([up.offset, up.length, up.quantized!.dims]).toEqual([stacked.offset + 3 * 24 * 34, 24 * 34, [32, 24]]);
  });

  it('rows that split a quantized block are refused', async () => {
    const file = rewrite(ggufFixture(), (_, t) => {
      const q = t.find((x) => x.name === 'blk.0.ffn_down.weight')!; // ne[0] = 48
      [q.type, q.data] = [12, new Uint8Array(0)];
    });
    await refused(file, 'tensor blk.0.ffn_down.weight: rows of 48 values do not split into Q4_K blocks of 256');
  });
});

describe('metadata', () => {
  it.each([
    [
      'an unknown architecture',
      'general.architecture',
      v.str('mamba'),
      'general.architecture "mamba" is not supported (supported: llama, qwen2',
    ],
    [
      'an unknown tokenizer.ggml.pre',
      'tokenizer.ggml.pre',
      v.str('made-up-pre'),
      'tokenizer.ggml.pre "made-up-pre" is not supported (default, llama3',
    ],
    ['an unknown tokenizer model', 'tokenizer.ggml.model', v.str('bert'), 'tokenizer.ggml.model "bert" is not supported'],
    ['a yarn rope scaling', 'llama.rope.scaling.type', v.str('yarn'), 'llama.rope.scaling.type "yarn" is not supported'],
    ['a block count of 0', 'llama.block_count', v.u32(0), 'llama.block_count (num_hidden_layers) must be a positive integer (got 0)'],
    ['a string block count', 'llama.block_count', v.str('5'), 'llama.block_count must be an integer (got the string "5")'],
    ['a zero rope base', 'llama.rope.freq_base', v.f32(0), 'llama.rope.freq_base (rope_theta) must be a finite number > 0 (got 0)'],
    [
      'per-layer head counts that differ',
      'llama.attention.head_count',
      v.i32s([4, 2]),
      'llama.attention.head_count differs between layers',
    ],
    [
      'a BOS id past the vocabulary',
      'tokenizer.ggml.bos_token_id',
      v.u32(100000),
      'tokenizer.ggml.bos_token_id (bos_token_id) = 100000 is not a token id',
    ],
    ['a split file', 'split.count', v.u32(3), 'split.count is 3: a split GGUF'],
    [
      'a value head size apart from the key head size',
      'llama.attention.value_length',
      v.u32(4),
      'llama.attention.value_length 4 differs from key_length 8',
    ],
    ['an alignment that is not a power of two', 'general.alignment', v.u32(24), 'general.alignment must be a power of two'],
  ])('%s is refused naming the key', async (_, key, value, message) => {
    await refused(
      rewrite(ggufFixture(), (m) => m.set(key, value)),
      message,
    );
  });

  it('an MLP width that disagrees with the tensors is refused naming the tensor both ways', async () => {
    await refused(
      rewrite(ggufFixture(), (m) => m.set('llama.feed_forward_length', v.u32(40))),
      /tensor blk\.0\.ffn_gate\.weight \(model\.layers\.0\.mlp\.gate_proj\.weight\) has shape \[48,32\], config says \[40,32\]/,
    );
  });

  it('a head size the rotary dimensions disagree with is refused naming the key', async () => {
    await refused(
      rewrite(ggufFixture(), (m) => m.set('llama.embedding_length', v.u32(40))),
      'llama.rope.dimension_count (partial_rotary_factor) = 0.8 is not supported for this family',
    );
  });

  it('a tensor no such model has is refused by name', async () => {
    await refused(
      rewrite(ggufFixture(), (_, t) => t.push({ name: 'blk.0.mystery.weight', dims: [4], type: 0, data: new Uint8Array(16) })),
      'tensor blk.0.mystery.weight is not part of a llama model as llama.cpp writes it',
    );
  });

  it('a NaN in a weight is refused naming the GGUF tensor and element', async () => {
    await refused(
      rewrite(ggufFixture(), (_, t) => {
        const w = t.find((x) => x.name === 'blk.1.attn_v.weight')!;
        const data = new Float32Array((w.data as Uint8Array).slice().buffer);
        data[5] = NaN;
        w.data = new Uint8Array(data.buffer);
      }),
      'tensor blk.1.attn_v.weight holds a NaN or infinity at element 5',
    );
  });
});

describe('hostile files', () => {
  it('a file cut inside its header is refused as truncated', async () => {
    const file = ggufFixture();
    const cut = path.join(path.dirname(file), 'cut-header.gguf');
    fs.writeFileSync(cut, fs.readFileSync(file).subarray(0, 3000));
    // Here the tokens array's count is more than the bytes left could hold.
    await refused(
      cut,
      /metadata tokenizer\.ggml\.tokens's element count is \d+, more than the \d+ the rest of the file could hold: it is truncated/,
    );
    fs.writeFileSync(cut, fs.readFileSync(file).subarray(0, 12));
    await refused(
      cut,
      /the file ends inside its header \(tensor count at byte 8 needs 8 bytes; the file has 12\): it is truncated or not GGUF/,
    );
  });

  it('a file cut inside its data is refused naming the tensor', async () => {
    const file = ggufFixture();
    const g = readGguf(file);
    const last = [...g.tensors.values()].sort((a, b) => b.offset - a.offset)[0]!;
    const cut = path.join(path.dirname(file), 'cut-data.gguf');
    fs.writeFileSync(cut, fs.readFileSync(file).subarray(0, last.offset + 8));
    await refused(
      cut,
      `tensor ${last.name}: data ends at byte ${last.offset - g.dataOffset + last.bytes} of ${last.offset + 8 - g.dataOffset}: the file is truncated`,
    );
  });

  it('tensor data past the end of the file is refused naming the tensor', async () => {
    const file = rewrite(ggufFixture(), (_, t) => (t.find((x) => x.name === 'output_norm.weight')!.offset = 1 << 30));
    await refused(file, /tensor output_norm\.weight: data ends at byte \d+ of \d+: the file is truncated/);
  });

  it('overlapping tensors are refused naming both', async () => {
    const file = rewrite(ggufFixture(), (_, t) => (t.find((x) => x.name === 'blk.0.attn_norm.weight')!.offset = 0));
    await refused(
      file,
      /tensors (token_embd\.weight \(bytes 0–\d+\) and blk\.0\.attn_norm\.weight \(bytes 0–128\)|blk\.0\.attn_norm\.weight \(bytes 0–128\) and token_embd\.weight \(bytes 0–\d+\)) overlap/,
    );
  });

  it('a .gguf path that does not exist is refused saying what a model is', async () => {
    await refused(
      path.join(tempDir('gguf-missing'), 'missing.gguf'),
      /missing\.gguf: does not exist; a model is a Hugging Face checkpoint folder .* or a GGUF file/,
    );
  });

  it('an unaligned tensor offset is refused', async () => {
    const file = rewrite(ggufFixture(), (_, t) => (t.find((x) => x.name === 'output_norm.weight')!.offset = 4));
    await refused(file, 'tensor output_norm.weight: offset 4 is not a multiple of the alignment 32');
  });

  it.each([
    ['a tensor count of 2^40', header(3, 2n ** 40n, 0n), 'tensor count is 1099511627776, more than the'],
    ['a key/value count of 2^40', header(3, 0n, 2n ** 40n), 'metadata key/value count is 1099511627776, more than the'],
    [
      'a key length of 2^40',
      Buffer.concat([header(3, 0n, 1n), Buffer.from([0, 0, 0, 0, 0, 1, 0, 0])]),
      "metadata key 0's length is 1099511627776",
    ],
    ['GGUF version 1', header(1, 0n, 0n), 'GGUF version 1 (32-bit counts, 2023) is not supported'],
    [
      'a big-endian file',
      Buffer.concat([Buffer.from('GGUF'), Buffer.from([0, 0, 0, 3]), Buffer.alloc(16)]),
      'a big-endian file, which is not supported',
    ],
    ['another magic', Buffer.from('GGML\x01\x00\x00\x00'), 'not a GGUF file (magic "GGML", not "GGUF")'],
  ])('%s is refused at once, without allocating for it', async (_, bytes, message) => {
    const file = path.join(tempDir('gguf-forged'), 'forged.gguf');
    fs.writeFileSync(file, bytes);
    const before = process.memoryUsage().rss;
    await refused(file, message, 5000);
    expect(process.memoryUsage().rss - before).toBeLessThan(256 * 2 ** 20);
  });

  it('a 280 MiB string in a 300 MiB file is refused at the header cap, not read', async () => {
    const file = path.join(tempDir('gguf-forged'), 'long-string.gguf');
    const length = Buffer.alloc(8);
    length.writeBigUInt64LE(280n * 2n ** 20n);
    fs.writeFileSync(
      file,
      Buffer.concat([header(3, 0n, 1n), Buffer.from([1, 0, 0, 0, 0, 0, 0, 0]), Buffer.from('k'), Buffer.from([8, 0, 0, 0]), length]),
    );
    fs.truncateSync(file, 300 * 2 ** 20); // sparse: nothing written
    await refused(
      file,
      /: k's length is 293601280, more than the \d+ the rest of the file \(a header takes at most 268435456 bytes\) could hold/,
      5000,
    );
  });

  it('an array count of 2^40 is refused naming the key', async () => {
    const b = Buffer.concat([
      header(3, 0n, 1n),
      Buffer.from([4, 0, 0, 0, 0, 0, 0, 0]),
      Buffer.from('tk.x'),
      Buffer.from([9, 0, 0, 0, 8, 0, 0, 0]),
      Buffer.from([0, 0, 0, 0, 0, 1, 0, 0]),
    ]);
    const file = path.join(tempDir('gguf-forged'), 'array.gguf');
    fs.writeFileSync(file, b);
    await refused(file, "metadata tk.x's element count is 1099511627776, more than the", 5000);
  });
});

/** `ctxprobe ARGS` as a user runs it: exit code, stderr, and whether it had to be killed. */
function runCli(args: string[], ms: number): Promise<{ code: number | null; stderr: string; timedOut: boolean }> {
  const child = spawn(process.execPath, [path.join(ROOT, 'bin/ctxprobe.js'), ...args], { stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  child.stderr.on('data', (d) => (stderr += d));
  let timedOut = false;
  const timer = setTimeout(() => {
    timedOut = true;
    child.kill('SIGKILL');
  }, ms);
  return new Promise((resolve) =>
    child.on('exit', (code) => {
      clearTimeout(timer);
      resolve({ code, stderr, timedOut });
    }),
  );
}

describe('--model', () => {
  it('a .gguf FIFO is refused at once, no hang', async () => {
    const fifo = path.join(tempDir('gguf-fifo'), 'model.gguf');
    execFileSync('mkfifo', [fifo]);
    const run = await runCli(['score', '--model', fifo, '--continuation', 'x', '--threads', '1'], 30_000);
    expect(run.timedOut).toBe(false);
    expect(run.code).not.toBe(0);
    expect(run.stderr).toContain(`${fifo}: is a FIFO (named pipe), not a regular file`);
  });

  it('a path that is neither a checkpoint folder nor a GGUF file is refused saying what --model takes', async () => {
    const file = path.join(tempDir('not-a-model'), 'weights.bin');
    fs.writeFileSync(file, 'not a model');
    const run = await runCli(['score', '--model', file, '--continuation', 'x', '--threads', '1'], 30_000);
    expect(run.code).not.toBe(0);
    expect(run.stderr).toContain(
      `${file}: is neither a checkpoint folder nor a GGUF file; a model is a Hugging Face checkpoint folder (config.json, model.safetensors, tokenizer.json) or a GGUF file (.gguf)`,
    );
    const missing = path.join(path.dirname(file), 'missing');
    expect((await runCli(['score', '--model', missing, '--continuation', 'x'], 30_000)).stderr).toContain(
      `${missing}: does not exist; a model is`,
    );
  });

  it('serves a fixture GGUF through the real CLI, named after the file', async () => {
    const file = ggufFixture('qwen2');
    const child = spawn(
      process.execPath,
      [path.join(ROOT, 'bin/ctxprobe.js'), 'score', '--model', file, '--continuation', ' hello', '--threads', '1'],
      { stdio: ['ignore', 'pipe', 'pipe'] },
    );
    let out = '';
    child.stdout.on('data', (d) => (out += d));
    const code = await new Promise((resolve) => child.on('exit', resolve));
    expect(code).toBe(0);
    const answer = JSON.parse(out);
    expect(answer.model).toBe('model');
    expect(Number.isFinite(answer.results[0].logprob)).toBe(true);
  });
});
