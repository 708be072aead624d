// Checkpoints from an attacker or a broken download: each is a valid tiny checkpoint
// (test/fixtures.ts) broken one way, and each must be refused at load with the file and
// the key or tensor named — never served with NaN scores, never a hang, never a V8 abort.
// Whatever could hang (FIFOs, /dev/zero) runs in a child process with a deadline.
import { execFileSync, spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { Engine, type EngineOptions } from '../src/engine/engine.js';
import { CheckpointError } from '../src/common/errors.js';
import { readBounded } from '../src/checkpoint/files.js';
import { findNonFinite } from '../src/checkpoint/validate.js';
import { SafetensorsCheckpoint, writeSafetensors } from '../src/checkpoint/safetensors.js';
import { readModelConfig } from '../src/model/config.js';
import { checkTensorsAgainstConfig } from '../src/model/config-checks.js';
import { validateTokenizerJson } from '../src/text/tokenizer.js';
import { f32ToBf16, f32ToF16 } from '../src/common/dtypes.js';
import { FAMILY_FIXTURES, makeFixture, tempDir } from './fixtures.js';
import { ROOT } from './cli-serve.js';

const loaded: Engine[] = [];
afterAll(async () => Promise.all(loaded.map((e) => e.release())));

function fixture(family = 'llama', options: Parameters<typeof makeFixture>[1] = {}): string {
  return makeFixture(FAMILY_FIXTURES[family]!, options).dir;
}

function editConfig(dir: string, edit: (c: Record<string, any>) => void): void {
  const file = path.join(dir, 'config.json');
  const c = JSON.parse(fs.readFileSync(file, 'utf8'));
  edit(c);
  fs.writeFileSync(file, JSON.stringify(c));
}

/** Engine.load must reject with a CheckpointError matching `message`, within `ms`. */
async function refused(dir: string, message: RegExp | string, ms = 20_000, options: EngineOptions = {}): Promise<CheckpointError> {
  let timer: NodeJS.Timeout | undefined;
  const deadline = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`Engine.load(${dir}) still running after ${ms} ms`)), ms);
  });
  try {
    const engine = await Promise.race([Engine.load(dir, { threads: 1, ...options }), deadline]);
    loaded.push(engine);
  } catch (e) {
    expect(e).toBeInstanceOf(CheckpointError);
    expect((e as Error).message).toMatch(message);
    return e as CheckpointError;
  } finally {
    clearTimeout(timer);
  }
  throw new Error(`${dir} loaded; expected a refusal matching ${message}`);
}

const esc = (s: string) => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');

/** The header of model.safetensors and where its data starts. */
function header(file: string): { header: Record<string, any>; dataStart: number } {
  const buf = fs.readFileSync(file);
  const len = Number(buf.readBigUInt64LE(0));
  return { header: JSON.parse(buf.subarray(8, 8 + len).toString('utf8')), dataStart: 8 + len };
}

/** Write `bytes` over element `index` of tensor `name` in place. */
function poke(dir: string, name: string, index: number, bytes: Buffer): void {
  const file = path.join(dir, 'model.safetensors');
  const { header: h, dataStart } = header(file);
  const fd = fs.openSync(file, 'r+');
  fs.writeSync(fd, bytes, 0, bytes.length, dataStart + h[name].data_offsets[0] + index * bytes.length);
  fs.closeSync(fd);
}
const f32 = (v: number) => {
  const b = Buffer.alloc(4);
  b.writeFloatLE(v);
  return b;
};
const u16 = (v: number) => {
  const b = Buffer.alloc(2);
  b.writeUInt16LE(v);
  return b;
};

/** Rewrite model.safetensors' header, keeping the data. */
function rewriteHeader(dir: string, edit: (h: Record<string, any>) => void, length?: bigint): void {
  const file = path.join(dir, 'model.safetensors');
  const { header: h, dataStart } = header(file);
  edit(h);
  const text = Buffer.from(JSON.stringify(h));
  const prefix = Buffer.alloc(8);
  prefix.writeBigUInt64LE(length ?? BigInt(text.length));
  fs.writeFileSync(file, Buffer.concat([prefix, text, fs.readFileSync(file).subarray(dataStart)]));
}

/** `ctxprobe ARGS` as a user runs it: exit code, stderr, and whether it had to be killed. */
function runCli(args: string[], ms = 60_000): Promise<{ code: number | null; stderr: string; timedOut: boolean }> {
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
const scoreCli = (dir: string) => runCli(['score', '--model', dir, '--continuation', 'x', '--threads', '1'], 30_000);

describe('1. config values: type and range, named by key', () => {
  const cases: [string, string, (c: Record<string, any>) => void, string][] = [
    ['llama', 'rope_theta 0', (c) => (c.rope_theta = 0), 'rope_theta must be a finite number > 0 (got 0)'],
    ['llama', 'rope_theta -1', (c) => (c.rope_theta = -1), 'rope_theta must be a finite number > 0 (got -1)'],
    ['llama', 'rope_theta "abc"', (c) => (c.rope_theta = 'abc'), 'rope_theta must be a finite number > 0 (got "abc")'],
    ['llama', 'rms_norm_eps -1', (c) => (c.rms_norm_eps = -1), 'rms_norm_eps must be a finite number > 0 (got -1)'],
    ['gpt2', 'layer_norm_epsilon 0', (c) => (c.layer_norm_epsilon = 0), 'layer_norm_epsilon must be a finite number > 0'],
    [
      'llama',
      'linear rope_scaling without factor',
      (c) => (c.rope_scaling = { rope_type: 'linear' }),
      'rope_scaling.factor must be a finite number > 0',
    ],
    ...['factor', 'low_freq_factor', 'high_freq_factor', 'original_max_position_embeddings'].map(
      (key): [string, string, (c: Record<string, any>) => void, string] => [
        'llama',
        `llama3 rope_scaling without ${key}`,
        (c) => delete c.rope_scaling[key],
        `rope_scaling.${key} must be a finite number > 0 (got undefined)`,
      ],
    ),
    [
      'llama',
      'llama3 high_freq_factor = low_freq_factor',
      (c) => (c.rope_scaling.high_freq_factor = 1),
      'rope_scaling.high_freq_factor must be greater',
    ],
    ['mistral', 'sliding_window 0', (c) => (c.sliding_window = 0), 'sliding_window must be a positive integer or null (got 0)'],
    ['mistral', 'sliding_window -1', (c) => (c.sliding_window = -1), 'sliding_window must be a positive integer or null (got -1)'],
    ['mistral', 'sliding_window "abc"', (c) => (c.sliding_window = 'abc'), 'sliding_window must be a positive integer or null (got "abc")'],
    ['llama', 'eos_token_id -5', (c) => (c.eos_token_id = -5), 'eos_token_id = -5 is not a token id in [0, vocab_size 304)'],
    ['llama', 'eos_token_id "abc"', (c) => (c.eos_token_id = 'abc'), 'eos_token_id = "abc" is not a token id'],
    [
      'llama',
      'num_key_value_heads "abc"',
      (c) => (c.num_key_value_heads = 'abc'),
      'num_key_value_heads must be a positive integer (got "abc")',
    ],
    [
      'llama',
      'max_position_embeddings 1.5',
      (c) => (c.max_position_embeddings = 1.5),
      'max_position_embeddings must be a positive integer',
    ],
    ['llama', 'tie_word_embeddings "yes"', (c) => (c.tie_word_embeddings = 'yes'), 'tie_word_embeddings must be true or false'],
    ['llama', 'attention_bias 1', (c) => (c.attention_bias = 1), 'attention_bias must be true or false'],
    ['llama', 'hidden_act 7', (c) => (c.hidden_act = 7), 'hidden_act = 7 is not supported'],
    ['llama', 'rope_scaling "abc"', (c) => (c.rope_scaling = 'abc'), 'rope_scaling must be an object or null'],
    ['qwen2-window', 'max_window_layers -1', (c) => (c.max_window_layers = -1), 'max_window_layers must be an integer ≥ 0'],
    ['gemma2', 'query_pre_attn_scalar 0', (c) => (c.query_pre_attn_scalar = 0), 'query_pre_attn_scalar must be a finite number > 0'],
    [
      'gemma2',
      'attn_logit_softcapping "abc"',
      (c) => (c.attn_logit_softcapping = 'abc'),
      'attn_logit_softcapping must be a positive number or null',
    ],
    ['gemma3_text', 'rope_local_base_freq -1', (c) => (c.rope_local_base_freq = -1), 'rope_local_base_freq must be a finite number > 0'],
    ['gemma3_text', 'sliding_window_pattern 0', (c) => (c.sliding_window_pattern = 0), 'sliding_window_pattern must be a positive integer'],
    ['phi3', 'partial_rotary_factor "abc"', (c) => (c.partial_rotary_factor = 'abc'), 'partial_rotary_factor must be a finite number > 0'],
    ['qwen3_moe', 'mlp_only_layers [-1]', (c) => (c.mlp_only_layers = [-1]), 'mlp_only_layers must be a list of layer indices'],
  ];
  it.each(cases)('%s: %s', async (family, _what, edit, message) => {
    const dir = fixture(family);
    editConfig(dir, edit);
    await refused(dir, new RegExp(`^${esc(path.join(dir, 'config.json'))}: ${esc(message)}`));
  });

  it('rope_theta 1e999 (JSON for infinity) is refused, not turned into zero frequencies', async () => {
    const dir = fixture();
    const file = path.join(dir, 'config.json');
    fs.writeFileSync(file, fs.readFileSync(file, 'utf8').replace(/"rope_theta": [^,]+/, '"rope_theta": 1e999'));
    await refused(dir, 'rope_theta must be a finite number > 0 (got Infinity)');
  });

  it('num_hidden_layers must match the layers whose tensors the checkpoint holds', async () => {
    const dir = makeFixture({ ...FAMILY_FIXTURES.llama!, layers: 4 }).dir;
    editConfig(dir, (c) => (c.num_hidden_layers = 2));
    await refused(dir, new RegExp(`^${esc(dir)}: the checkpoint holds tensors of layers past num_hidden_layers 2: model\\.layers\\.2\\.`));
    editConfig(dir, (c) => (c.num_hidden_layers = 6));
    await refused(dir, `${dir}: num_hidden_layers is 6 but the checkpoint holds no tensor of layers 4, 5`);
    // GPT-2 checkpoints that name layers without the transformer. prefix are counted too.
    const gpt2 = makeFixture({ ...FAMILY_FIXTURES.gpt2!, layers: 3 });
    writeSafetensors(
      path.join(gpt2.dir, 'model.safetensors'),
      new Map([...gpt2.tensors].map(([n, t]) => [n.replace(/^transformer\./, ''), t])),
    );
    editConfig(gpt2.dir, (c) => (c.n_layer = 1));
    await refused(gpt2.dir, /tensors of layers past n_layer 1: h\.1\./);
  });
});

describe('2. absurd shapes: refused by arithmetic before anything is built', () => {
  it.each([
    ['hidden_size', 1e10, 'hidden_size must be a positive integer of at most 65536 (got 10000000000)'],
    ['hidden_size', 1e9, 'hidden_size must be a positive integer of at most 65536'],
    ['intermediate_size', 1e9, 'intermediate_size must be a positive integer of at most 1048576'],
    ['vocab_size', 2 ** 40, 'vocab_size must be a positive integer of at most 4194304'],
    ['num_hidden_layers', 1e6, 'num_hidden_layers must be a positive integer of at most 1024'],
    ['head_dim', 65536, 'head_dim (head_dim 65536) must be at most 1024'],
  ])('%s %d is refused at once, naming the key', async (key, value, message) => {
    const dir = fixture();
    editConfig(dir, (c) => (c[key] = value));
    const started = performance.now();
    await refused(dir, `${path.join(dir, 'config.json')}: ${message}`);
    expect(performance.now() - started).toBeLessThan(2000);
  });

  it('dims within the caps that disagree with the header shapes are refused before a rotary table or graph is made', async () => {
    const dir = fixture();
    // 65536 × 64 heads: a 1024-wide head would make 1 GiB of rotary tables at 131072 positions.
    editConfig(dir, (c) =>
      Object.assign(c, { hidden_size: 65536, num_attention_heads: 64, num_key_value_heads: 64, max_position_embeddings: 131072 }),
    );
    const started = performance.now();
    const before = process.memoryUsage().rss;
    await refused(
      dir,
      /model\.safetensors: tensor model\.embed_tokens\.weight has shape \[304,32\], config says \[304,65536\] \(vocab_size, hidden_size\)/,
    );
    expect(performance.now() - started).toBeLessThan(2000);
    expect(process.memoryUsage().rss - before).toBeLessThan(200 * 1024 * 1024);
    const heads = fixture();
    editConfig(heads, (c) => (c.head_dim = 1024));
    await refused(
      heads,
      /tensor model\.layers\.0\.self_attn\.o_proj\.weight has shape \[32,32\], config says \[32,4096\] \(hidden_size, num_attention_heads, num_key_value_heads, head_dim\)/,
    );
  });

  it('hidden_size not a multiple of the heads (no head_dim) is refused, not a fractional head', async () => {
    const dir = fixture();
    editConfig(dir, (c) => (c.num_attention_heads = 3));
    await refused(dir, 'hidden_size 32 is not a multiple of num_attention_heads 3');
  });

  it('every family fixture passes the header comparison as written', () => {
    for (const [name, spec] of Object.entries(FAMILY_FIXTURES)) {
      const dir = makeFixture(spec).dir;
      expect(() => checkTensorsAgainstConfig(readModelConfig(dir), new SafetensorsCheckpoint(dir).tensors, dir), name).not.toThrow();
    }
  });
});

describe('3. weights holding NaN or infinity', () => {
  it('a NaN in one weight is refused naming the tensor and the element', async () => {
    const dir = fixture();
    poke(dir, 'model.layers.1.mlp.down_proj.weight', 7, f32(NaN));
    await refused(
      dir,
      `${path.join(dir, 'model.safetensors')}: tensor model.layers.1.mlp.down_proj.weight holds a NaN or infinity at element 7`,
    );
  });

  it('an infinity in the embedding is refused', async () => {
    const dir = fixture('qwen2');
    poke(dir, 'model.embed_tokens.weight', 300, f32(-Infinity));
    await refused(dir, 'tensor model.embed_tokens.weight holds a NaN or infinity at element 300');
  });

  it.each([
    ['float16', 'NaN', 0x7e00],
    ['float16', 'infinity', 0x7c00],
    ['bfloat16', 'NaN', 0x7fc1],
    ['bfloat16', '-infinity', 0xff80],
  ] as const)('%s: a %s is found, also in the last element of an odd-length tensor', async (dtype, _what, bits) => {
    const dir = fixture('llama', { dtype });
    // Norm weights are [32]; the first layer's: poke its last element, then a matrix's.
    poke(dir, 'model.norm.weight', 31, u16(bits));
    await refused(dir, 'tensor model.norm.weight holds a NaN or infinity at element 31');
    const other = fixture('llama', { dtype });
    poke(other, 'model.layers.0.self_attn.q_proj.weight', 513, u16(bits));
    await refused(other, 'tensor model.layers.0.self_attn.q_proj.weight holds a NaN or infinity at element 513');
  });

  it('finds a NaN past the first 16 MiB chunk, at its index in the tensor, and lets finite values through', async () => {
    const dir = tempDir('big');
    const n = 10_000_000;
    const data = new Float32Array(n).map((_, i) => Math.sin(i));
    data[n - 3] = NaN;
    writeSafetensors(
      path.join(dir, 'model.safetensors'),
      new Map([
        ['a', { shape: [4], data: new Float32Array([1, 2, 3, 4]) }],
        ['big', { shape: [n], data }],
      ]),
    );
    const ckpt = () => [...new SafetensorsCheckpoint(dir).tensors].map(([name, t]) => ({ name, ...t }));
    await expect(findNonFinite(ckpt())).rejects.toThrow(`tensor big holds a NaN or infinity at element ${n - 3}`);
    data[n - 3] = 1;
    writeSafetensors(path.join(dir, 'model.safetensors'), new Map([['big', { shape: [n], data }]]));
    await expect(findNonFinite(ckpt())).resolves.toBeUndefined();
    // The largest finite halves are finite; the last half of an odd-length tensor lies
    // outside the 32-bit words the fast test reads, and is found.
    expect([f32ToF16(65504), f32ToBf16(3.0e38) & 0x7f80]).toEqual([0x7bff, 0x7f00]);
    for (const [dtype, top] of [
      ['float16', 65504],
      ['bfloat16', 3.0e38],
    ] as const) {
      writeSafetensors(
        path.join(dir, 'model.safetensors'),
        new Map([['odd', { shape: [3], data: new Float32Array([top, -top, top]) }]]),
        dtype,
      );
      await expect(findNonFinite(ckpt())).resolves.toBeUndefined();
      writeSafetensors(path.join(dir, 'model.safetensors'), new Map([['odd', { shape: [3], data: new Float32Array([1, 2, NaN]) }]]), dtype);
      await expect(findNonFinite(ckpt())).rejects.toThrow('tensor odd holds a NaN or infinity at element 2');
    }
  });
});

describe('4. token ids against vocab_size', () => {
  const editTokenizer = (dir: string, edit: (t: Record<string, any>) => void) => {
    const file = path.join(dir, 'tokenizer.json');
    const t = JSON.parse(fs.readFileSync(file, 'utf8'));
    edit(t);
    fs.writeFileSync(file, JSON.stringify(t));
  };

  it('a vocabulary token with an id at or past vocab_size is refused naming it', async () => {
    const dir = fixture();
    editTokenizer(dir, (t) => (t.model.vocab['zzz'] = 304));
    await refused(dir, `${path.join(dir, 'tokenizer.json')}: model.vocab token "zzz" has id 304, not a token id in [0, vocab_size 304)`);
  });

  it('an added token with an id past vocab_size, or negative, is refused naming it', async () => {
    const big = fixture();
    editTokenizer(big, (t) =>
      t.added_tokens.push({
        id: 100000,
        content: '<big>',
        special: true,
        single_word: false,
        lstrip: false,
        rstrip: false,
        normalized: false,
      }),
    );
    await refused(big, /tokenizer\.json: added_tokens\[2\] "<big>" has id 100000, not a token id in \[0, vocab_size 304\)/);
    const negative = fixture();
    editTokenizer(negative, (t) =>
      t.added_tokens.push({ id: -1, content: '<neg>', special: true, single_word: false, lstrip: false, rstrip: false, normalized: false }),
    );
    await refused(negative, /added_tokens\[2\] "<neg>" has id -1/);
  });

  it('a Unigram vocabulary (ids are list positions) longer than vocab_size is refused naming its first piece past it', () => {
    const vocab = Array.from({ length: 6 }, (_, i) => [`p${i}`, -i]);
    const json = { model: { type: 'Unigram', vocab, unk_id: 0 }, added_tokens: [] };
    expect(() => validateTokenizerJson(json, 'tokenizer.json', 6)).not.toThrow();
    expect(() => validateTokenizerJson(json, 'tokenizer.json', 4)).toThrow(
      'tokenizer.json: model.vocab[4] "p4" has id 4, not a token id in [0, vocab_size 4)',
    );
  });

  it.each([
    ['bos_token_id', 100000, 'bos_token_id = 100000 is not a token id in [0, vocab_size 304)'],
    ['eos_token_id', [1, 304], 'eos_token_id[1] = 304 is not a token id'],
    ['pad_token_id', -1, 'pad_token_id = -1 is not a token id'],
  ])('config %s %j is refused', async (key, value, message) => {
    const dir = fixture();
    editConfig(dir, (c) => (c[key] = value));
    await refused(dir, `${path.join(dir, 'config.json')}: ${message}`);
  });
});

describe('5. hostile files', () => {
  it('config.json, model.safetensors, tokenizer_config.json or chat_template.jinja as a FIFO: refused at once, no hang', async () => {
    for (const name of ['config.json', 'model.safetensors', 'tokenizer_config.json', 'chat_template.jinja']) {
      const dir = fixture();
      fs.rmSync(path.join(dir, name), { force: true });
      execFileSync('mkfifo', [path.join(dir, name)]);
      const run = await scoreCli(dir);
      expect(run.timedOut, name).toBe(false);
      expect(run.code, name).not.toBe(0);
      expect(run.stderr, name).toContain(`${path.join(dir, name)}: is a FIFO (named pipe), not a regular file`);
    }
  });

  it('tokenizer.json symlinked to /dev/zero is refused, not read', async () => {
    const dir = fixture();
    fs.rmSync(path.join(dir, 'tokenizer.json'));
    fs.symlinkSync('/dev/zero', path.join(dir, 'tokenizer.json'));
    const run = await scoreCli(dir);
    expect(run.timedOut).toBe(false);
    expect(run.code).not.toBe(0);
    // Links are followed, but only to a regular file.
    expect(run.stderr).toContain(`${path.join(dir, 'tokenizer.json')}: is a character device, not a regular file`);
    // And a device is refused by type wherever it is.
    expect(() => readBounded('/dev/zero', 1024)).toThrow('/dev/zero: is a character device, not a regular file');
  });

  it('a directory where a file is expected is named as one, not a bare EISDIR', async () => {
    const dir = fixture();
    fs.rmSync(path.join(dir, 'config.json'));
    fs.mkdirSync(path.join(dir, 'config.json'));
    await refused(dir, `${path.join(dir, 'config.json')}: is a directory, not a regular file`);
  });

  it('JSON files past their size caps are refused before they are read', async () => {
    const dir = fixture();
    fs.truncateSync(path.join(dir, 'tokenizer.json'), 300 * 1024 * 1024); // sparse: nothing written
    await refused(dir, `${path.join(dir, 'tokenizer.json')}: is 314572800 bytes, more than the 268435456 such a file may have`);
    const cfg = fixture();
    fs.appendFileSync(path.join(cfg, 'tokenizer_config.json'), ' '.repeat(9 * 1024 * 1024));
    await refused(cfg, /tokenizer_config\.json: is 94\d{5} bytes, more than the 8388608/);
  });

  it.each(['WordLevel', 'Foo'])(
    'a tokenizer model of type %s (not implemented by @huggingface/tokenizers) is refused naming it',
    async (type) => {
      const dir = fixture();
      const file = path.join(dir, 'tokenizer.json');
      const t = JSON.parse(fs.readFileSync(file, 'utf8'));
      fs.writeFileSync(file, JSON.stringify({ ...t, model: { ...t.model, type } }));
      await refused(
        dir,
        `${file}: not a tokenizer @huggingface/tokenizers can read (model.type "${type}" is not one of BPE, WordPiece, Unigram)`,
      );
    },
  );

  it('overlapping data_offsets are refused naming both tensors', async () => {
    const dir = fixture();
    rewriteHeader(dir, (h) => {
      const a = h['model.layers.0.mlp.up_proj.weight'].data_offsets;
      const b = h['model.layers.0.mlp.gate_proj.weight'];
      b.data_offsets = [a[0] + 4, a[0] + 4 + (b.data_offsets[1] - b.data_offsets[0])];
    });
    await refused(
      dir,
      /model\.safetensors: tensors model\.layers\.0\.mlp\.(up|gate)_proj\.weight \(bytes \d+–\d+\) and model\.layers\.0\.mlp\.(gate|up)_proj\.weight \(bytes \d+–\d+\) overlap/,
    );
  });

  it('offsets past the file, negative offsets and an absurd header length are refused', async () => {
    const past = fixture();
    rewriteHeader(past, (h) => {
      const t = h['model.norm.weight'];
      t.data_offsets = [t.data_offsets[0] + 1e9, t.data_offsets[1] + 1e9];
    });
    await refused(past, /tensor model\.norm\.weight: data ends at byte \d+ of \d+: the file is truncated/);
    const negative = fixture();
    rewriteHeader(negative, (h) => (h['model.norm.weight'].data_offsets = [-128, 0]));
    await refused(negative, /tensor model\.norm\.weight: data_offsets \[-128,0\] are not \[begin, end\] byte offsets/);
    const absurd = fixture();
    rewriteHeader(absurd, () => undefined, 2n ** 60n);
    await refused(absurd, /model\.safetensors: not a safetensors file \(header length 1152921504606847000/);
  });
});

describe('6. what held still holds', () => {
  it('a file that links out of the checkpoint folder is followed; with checkpointLinks contain it is refused, naming where it leads', async () => {
    const other = fixture();
    const dir = fixture();
    fs.rmSync(path.join(dir, 'config.json'));
    fs.symlinkSync(path.join(other, 'config.json'), path.join(dir, 'config.json'));
    const engine = await Engine.load(dir, { threads: 1 });
    loaded.push(engine);
    expect(engine.config.numLayers).toBeGreaterThan(0);
    await refused(
      dir,
      `${path.join(dir, 'config.json')}: leads to ${fs.realpathSync(path.join(other, 'config.json'))}, outside the checkpoint folder (checkpointLinks contain)`,
      20_000,
      { checkpointLinks: 'contain' },
    );
  });

  it('a shard index naming a file outside the folder is refused', async () => {
    const dir = fixture('llama', { shards: 2 });
    const index = path.join(dir, 'model.safetensors.index.json');
    const map = JSON.parse(fs.readFileSync(index, 'utf8'));
    map.weight_map['model.norm.weight'] = '../elsewhere.safetensors';
    fs.writeFileSync(index, JSON.stringify(map));
    await refused(dir, `${index}: weight_map must map tensor names to file names in the folder`);
  });

  it('a Hugging Face cache snapshot (symlinks into ../../blobs) loads', async () => {
    const src = fixture();
    const repo = path.join(tempDir('hub'), 'models--org--tiny');
    const snapshot = path.join(repo, 'snapshots', 'rev');
    fs.mkdirSync(path.join(repo, 'blobs'), { recursive: true });
    fs.mkdirSync(snapshot, { recursive: true });
    fs.readdirSync(src).forEach((f, i) => {
      fs.copyFileSync(path.join(src, f), path.join(repo, 'blobs', `sha${i}`));
      fs.symlinkSync(`../../blobs/sha${i}`, path.join(snapshot, f));
    });
    const engine = await Engine.load(snapshot, { threads: 1 });
    loaded.push(engine);
    expect(engine.info.layers).toBe(2);
  });
});

describe('the refusal as a user sees it', () => {
  it('ctxprobe serve --model with a NaN weight or a FIFO config exits non-zero, naming file and tensor, instead of serving or hanging', async () => {
    const nan = fixture();
    poke(nan, 'model.layers.0.self_attn.o_proj.weight', 3, f32(NaN));
    const fifo = fixture();
    fs.rmSync(path.join(fifo, 'config.json'));
    execFileSync('mkfifo', [path.join(fifo, 'config.json')]);
    for (const [dir, message] of [
      [nan, `${path.join(nan, 'model.safetensors')}: tensor model.layers.0.self_attn.o_proj.weight holds a NaN or infinity at element 3`],
      [fifo, `${path.join(fifo, 'config.json')}: is a FIFO (named pipe), not a regular file`],
    ] as const) {
      const run = await runCli(['serve', '--model', dir, '--port', '0', '--http-port', '0', '--metrics-port', '0', '--threads', '1']);
      expect(run.timedOut).toBe(false);
      expect(run.code).not.toBe(0);
      expect(run.stderr).toContain(message);
      expect(run.stderr).not.toContain('"event":"serving"');
    }
  });
});
