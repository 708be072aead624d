// Defects found by trying ctxprobe as an attacker and as a new user would: each reproduced
// with a file or folder written here and driven through `ctxprobe serve` (or the library
// where the CLI adds nothing), each failing before its fix.
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { GGUF_TYPE, MAX_HEADER_VALUES, MAX_TENSORS, type GgufValue } from '../src/checkpoint/gguf.js';
import { meta as v } from '../src/checkpoint/gguf-write.js';
import { writeSafetensors, type TensorData } from '../src/checkpoint/safetensors.js';
import { writeZeroCheckpoint } from '../src/model/synthetic.js';
import { TOKEN_CAPS } from '../src/text/token-caps.js';
import { FAMILY_FIXTURES, makeFixture, tempDir } from './fixtures.js';
import { convertToGguf, ggufFixture, rewrite } from './gguf-convert.js';
import { serveCli, type Served } from './cli-serve.js';
import { postJson } from './helpers.js';

const F32 = 0;
const running: Served[] = [];
afterAll(async () => Promise.all(running.map((s) => s.stop())));

async function serve(model: string, args: string[] = [], env: Record<string, string> = {}): Promise<Served> {
  const s = await serveCli(model, ['--metrics-port', '-1', ...args], env);
  running.push(s);
  return s;
}

/** `ctxprobe serve --model MODEL` must exit at load with a message matching `message`, within
 * `seconds` (what took minutes and gigabytes before, or ended in a signal). */
async function refusedAtLoad(model: string, message: RegExp, args: string[] = [], seconds = 60): Promise<string> {
  const started = performance.now();
  const err: Error = await serveCli(model, ['--metrics-port', '-1', ...args]).then(
    (s) => (running.push(s), new Error('it served')),
    (e) => e,
  );
  expect(err.message).toMatch(message);
  expect((performance.now() - started) / 1000).toBeLessThan(seconds);
  return err.message;
}

const f32Bytes = (values: ArrayLike<number>) => new Uint8Array(Float32Array.from(values).buffer);
/** A tensor's bytes as written (the rewrite hands them as views of the file). */
const bytesOf = (data: Uint8Array | { zeros: number }) => Uint8Array.from(data as Uint8Array);

describe('work a GGUF file declares is bounded before it is done', () => {
  it('a zero-byte stacked expert tensor declaring 2^40 experts is refused at once; a repository keeps serving its good model', async () => {
    // Before: the name loop ran once per declared expert on the main thread (5 GB, heap OOM after 189 s).
    const bad = rewrite(ggufFixture(), (_, t) =>
      t.push({ name: 'blk.0.ffn_gate_exps.weight', dims: [0, 0, 2 ** 40], type: F32, data: new Uint8Array(0) }),
    );
    await refusedAtLoad(
      bad,
      /tensor blk\.0\.ffn_gate_exps\.weight is an expert tensor, but the file declares no experts \(llama\.expert_count is absent or 0\)/,
    );
    const repo = tempDir('repo-expert');
    fs.writeFileSync(path.join(repo, 'a-good.json'), JSON.stringify({ path: makeFixture(FAMILY_FIXTURES.llama!).dir }));
    fs.writeFileSync(path.join(repo, 'b-bad.json'), JSON.stringify({ path: bad }));
    const s = await serve('', ['--models', repo]);
    expect(s.lines.find((l) => l.event === 'serving')).toMatchObject({ models: ['a-good'], failedModels: ['b-bad'] });
    const { status } = await postJson(`http://127.0.0.1:${s.httpPort}`, '/v1/score', {
      model: 'a-good',
      items: [{ contextIds: { ids: [5, 6] }, continuationsIds: [{ ids: [7, 8] }] }],
    });
    expect(status).toBe(200);
  });

  it("a stack that holds more experts than the file's expert_count, or an expert_count past the cap, is refused naming it", async () => {
    const stacked = rewrite(ggufFixture('mixtral'), (_, t) => {
      const up = t.find((x) => x.name === 'blk.0.ffn_up_exps.weight')!;
      [up.dims, up.data] = [[0, 0, 2 ** 40], new Uint8Array(0)];
    });
    await refusedAtLoad(
      stacked,
      /tensor blk\.0\.ffn_up_exps\.weight has dims \[0,0,1099511627776\], not \[in, out, 4\] for the 4 experts of llama\.expert_count/,
    );
    const count = rewrite(ggufFixture('mixtral'), (m) => m.set('llama.expert_count', v.u32(2 ** 31)));
    await refusedAtLoad(count, /llama\.expert_count \(num_local_experts\) is 2147483648, more than the 4096 experts any model has/);
  });

  it('a dense llama file with a real stacked expert tensor is refused by name (it loaded and served)', async () => {
    const file = rewrite(ggufFixture(), (_, t) => {
      const up = t.find((x) => x.name === 'blk.0.ffn_up.weight')!;
      t.push({ name: 'blk.0.ffn_up_exps.weight', dims: [...up.dims, 2], type: F32, data: new Uint8Array(bytesOf(up.data).length * 2) });
    });
    await refusedAtLoad(file, /tensor blk\.0\.ffn_up_exps\.weight is an expert tensor, but the file declares no experts/);
  });

  it('one key holding more values than the cap (empty arrays: 1.8 GB for 4M before) is refused naming it', async () => {
    const n = MAX_HEADER_VALUES + 1;
    const empty: GgufValue = { type: GGUF_TYPE.ARRAY, of: GGUF_TYPE.UINT8, value: new Uint8Array(0) };
    const file = rewrite(ggufFixture(), (m) =>
      m.set('general.unused', { type: GGUF_TYPE.ARRAY, of: GGUF_TYPE.ARRAY, value: new Array<GgufValue>(n).fill(empty) }),
    );
    await refusedAtLoad(
      file,
      new RegExp(`metadata general\\.unused: ${n} more strings, booleans or arrays take the header past ${MAX_HEADER_VALUES}`),
      [],
      30,
    );
  });

  it('more tensor entries than the cap (2M empty ones took 58 s and 2.4 GB to refuse) are refused by their count', async () => {
    const file = rewrite(ggufFixture(), (_, t) => {
      for (let i = t.length; i <= MAX_TENSORS; i++) t.push({ name: `x.${i}`, dims: [0], type: F32, data: new Uint8Array(0) });
    });
    await refusedAtLoad(file, new RegExp(`tensor count is ${MAX_TENSORS + 1}, more than the ${MAX_TENSORS} any model has`), [], 30);
  });
});

describe('token lengths are bounded before a tokenizer is built', () => {
  // The tokenizer library builds a trie node per character of an added token (~200 bytes a
  // character): a 100 MB control token ended the server (4.3 GB, heap OOM after 96 s).
  const long = 'x'.repeat(TOKEN_CAPS.tokenChars + 1);

  it('a control token (SentencePiece-less gpt2 vocabulary) and a user-defined one longer than the cap are refused naming the key', async () => {
    for (const type of [3, 4]) {
      const file = rewrite(ggufFixture(), (m) => {
        const tokens = [...((m.get('tokenizer.ggml.tokens')!.value as string[]) ?? [])];
        const types = Int32Array.from(m.get('tokenizer.ggml.token_type')!.value as Int32Array);
        const at = tokens.length - 1;
        [tokens[at], types[at]] = [long, type];
        m.set('tokenizer.ggml.tokens', v.strings(tokens));
        m.set('tokenizer.ggml.token_type', v.i32s(types));
      });
      await refusedAtLoad(
        file,
        new RegExp(`tokenizer\\.ggml\\.tokens\\[\\d+\\] is a token of ${long.length} characters, more than the ${TOKEN_CAPS.tokenChars}`),
      );
    }
  });

  it('an added token of a tokenizer.json longer than the cap is refused naming it', async () => {
    const fx = makeFixture(FAMILY_FIXTURES.llama!);
    const file = path.join(fx.dir, 'tokenizer.json');
    const json = JSON.parse(fs.readFileSync(file, 'utf8'));
    json.added_tokens[0].content = long;
    fs.writeFileSync(file, JSON.stringify(json));
    await refusedAtLoad(fx.dir, new RegExp(`tokenizer\\.json: added_tokens\\[0\\] is a token of ${long.length} characters`));
  });
});

describe('a model whose arithmetic overflows is refused at load, and a request that overflows fails by name', () => {
  it('a norm weight of 3e38 (finite) in an F32 GGUF is refused at load naming the layer (it served NaN as SERVING)', async () => {
    const file = rewrite(ggufFixture(), (_, t) => {
      const norm = t.find((x) => x.name === 'blk.0.attn_norm.weight')!;
      norm.data = f32Bytes(new Array(norm.dims[0]!).fill(3e38));
    });
    await refusedAtLoad(
      file,
      /the model's log-probs are not finite \(NaN or infinity\) on a short check pass at load — layer 0 is the first whose attention is not finite/,
    );
  });

  it('a final norm of 3e38 is refused naming what comes after the last layer', async () => {
    const file = rewrite(ggufFixture(), (_, t) => {
      const norm = t.find((x) => x.name === 'output_norm.weight')!;
      norm.data = f32Bytes(new Array(norm.dims[0]!).fill(3e38));
    });
    await refusedAtLoad(
      file,
      /every layer's attention is finite, so the last layer's MLP, the final norm \(model\.norm\) or the output head makes it/,
    );
  });

  it.each([
    [
      '1e-45 (finite, positive: it scored null)',
      1e-45,
      /rope_freqs\.weight\[3\] is 1\.401298464324817e-45: each factor must be finite, positive and give a finite rotary angle/,
    ],
    ['negative (reported as "not 32" values)', -2, /rope_freqs\.weight\[3\] is -2: each factor must be finite, positive/],
  ])('a rope_freqs factor of %s is refused naming its index', async (_, factor, message) => {
    const file = rewrite(ggufFixture(), (_, t) => {
      const rope = t.find((x) => x.name === 'rope_freqs.weight')!;
      const values = new Float32Array(bytesOf(rope.data).buffer);
      values[3] = factor;
      rope.data = new Uint8Array(values.buffer);
    });
    await refusedAtLoad(file, message);
  });

  it('a token whose row overflows float32 fails its own request with a status naming it; another request in the same round is answered as alone', async () => {
    // A one-hot embedding row normalises to √hidden in its one dimension; an up_proj row
    // reading only that dimension with a weight of 7e37 overflows for that token alone (other
    // tokens' normalised values there stay under 4.8: finite). The load's check pass
    // never feeds it; a request that does must not be answered with NaN.
    const fx = makeFixture(FAMILY_FIXTURES.llama!);
    const tensors = new Map<string, TensorData>(fx.tensors);
    const H = 32;
    const t = 5;
    const edit = (name: string, f: (data: Float32Array) => void) => {
      const data = Float32Array.from(tensors.get(name)!.data);
      f(data);
      tensors.set(name, { shape: tensors.get(name)!.shape, data });
    };
    edit('model.embed_tokens.weight', (d) => {
      d.fill(0, t * H, (t + 1) * H);
      d[t * H] = 1000;
    });
    edit('model.layers.0.post_attention_layernorm.weight', (d) => (d[0] = 1));
    edit('model.layers.0.mlp.up_proj.weight', (d) => {
      d.fill(0, 0, H);
      d[0] = 7e37;
    });
    writeSafetensors(path.join(fx.dir, 'model.safetensors'), tensors);
    const s = await serve(fx.dir);
    const base = `http://127.0.0.1:${s.httpPort}`;
    const completions = (prompt: number[]) => postJson(base, '/v1/completions', { prompt, max_tokens: 0, echo: true, logprobs: 0 });
    const clean = [7, 9, 11, 13, 17];
    const [alone, overflowing, beside] = await Promise.all([completions(clean), completions([7, t, 11, 13]), completions(clean)]);
    expect(alone.status).toBe(200);
    expect(alone.body.choices[0].logprobs.token_logprobs.slice(1).every(Number.isFinite)).toBe(true);
    expect(overflowing.status).toBe(500);
    expect(overflowing.body.error.message).toMatch(
      /the model computed a log-prob that is not a finite number \(NaN or infinity\) for this request/,
    );
    expect(beside.body).toMatchObject({ choices: [{ logprobs: { token_logprobs: alone.body.choices[0].logprobs.token_logprobs } }] });
  });
});

describe('the memory plan decides for every setting', () => {
  // Before, --weights-at-rest skipped the plan: a model refused without it was scanned and
  // widened until the kernel killed the process.
  it.each([['compute'], ['stored']])(
    '--weights-at-rest %s on a Llama-3-70B shape in BF16 is refused at load naming the need',
    async (how) => {
      const dir = tempDir('llama3-70b-forced');
      writeZeroCheckpoint(
        dir,
        {
          family: 'llama',
          hidden: 8192,
          layers: 80,
          heads: 64,
          kvHeads: 8,
          intermediate: 28672,
          vocab: 384,
          vocabSize: 128256,
          maxPositions: 8192,
        },
        'bfloat16',
        4,
      );
      try {
        const message = await refusedAtLoad(
          dir,
          /needs about \d+\.\d GiB of memory — weights \d+\.\d GiB/,
          ['--weights-at-rest', how!],
          60,
        );
        expect(message).toContain(how === 'stored' ? '(as stored)' : '(as computed)');
      } finally {
        fs.rmSync(dir, { recursive: true, force: true });
      }
    },
    120_000,
  );
});

describe('a port in use is named by its flag', () => {
  it.each([['--port'], ['--http-port'], ['--metrics-port']])('%s', async (flag) => {
    const taken = net.createServer();
    await new Promise<void>((r) => taken.listen(0, '127.0.0.1', () => r()));
    const port = (taken.address() as net.AddressInfo).port;
    try {
      const fx = makeFixture(FAMILY_FIXTURES.llama!);
      const err: Error = await serveCli(fx.dir, [flag!, String(port), ...(flag === '--metrics-port' ? [] : ['--metrics-port', '-1'])]).then(
        (s) => (running.push(s), new Error('it served')),
        (e) => e,
      );
      expect(err.message).toContain(
        `${flag}: 127.0.0.1:${port} is in use (another process listens there): stop it, or give ${flag} another port`,
      );
    } finally {
      taken.close();
    }
  });
});

/** The llama fixture's GGUF with a SentencePiece vocabulary (tokenizer.ggml.model `llama`):
 * <unk> <s> </s>, the 256 byte tokens, ▁ and a–z, and merges up to the file's vocabulary,
 * ranked by score as llama.cpp ranks them. Capitals and é fall back to bytes. */
function sentencePieceGguf(): string {
  return rewrite(ggufFixture(), (m, t) => {
    const rows = t.find((x) => x.name === 'token_embd.weight')!.dims[1]!;
    const merged = [
      '▁t',
      'he',
      '▁the',
      '▁a',
      'on',
      'up',
      '▁up',
      '▁upon',
      '▁f',
      'ox',
      '▁fox',
      'ti',
      'me',
      '▁ti',
      '▁time',
      'nc',
      'nce',
      'ce',
    ];
    const pieces = ['▁', ...'abcdefghijklmnopqrstuvwxyz', ...merged];
    const bytes = Array.from({ length: 256 }, (_, b) => `<0x${b.toString(16).toUpperCase().padStart(2, '0')}>`);
    const tokens = ['<unk>', '<s>', '</s>', ...bytes, ...pieces];
    expect(tokens.length).toBeLessThanOrEqual(rows);
    while (tokens.length < rows) tokens.push(`<unused${tokens.length}>`);
    const types = tokens.map((tok, i) => (i === 0 ? 2 : i < 3 ? 3 : i < 259 ? 6 : tok.startsWith('<unused') ? 5 : 1));
    for (const key of ['tokenizer.ggml.merges', 'tokenizer.ggml.pre', 'tokenizer.chat_template']) m.delete(key);
    m.set('tokenizer.ggml.model', v.str('llama'));
    m.set('tokenizer.ggml.tokens', v.strings(tokens));
    m.set('tokenizer.ggml.token_type', v.i32s(types));
    m.set('tokenizer.ggml.scores', v.f32s(tokens.map((_, i) => -i)));
    m.set('tokenizer.ggml.bos_token_id', v.u32(1));
    m.set('tokenizer.ggml.eos_token_id', v.u32(2));
    m.set('tokenizer.ggml.unknown_token_id', v.u32(0));
  });
}

describe('token strings are the text of each token where it stands', () => {
  // SentencePiece token strings lost their spaces ("Once","upon"; Probe 'f','the'): a token
  // decoded alone drops ▁ at a text's start. They must join back into the text.
  let s: Served;
  let base: string;
  const prompt = 'Once upon a time the fox: café';
  const setup = async () => {
    if (!s) {
      s = await serve(sentencePieceGguf());
      base = `http://127.0.0.1:${s.httpPort}`;
    }
  };

  it('completions echo: the tokens join into the prompt, words with their spaces; Tokenize keeps the vocabulary pieces', async () => {
    await setup();
    const { body } = await postJson(base, '/v1/completions', { prompt, max_tokens: 0, echo: true, logprobs: 0 });
    const tokens: string[] = body.choices[0].logprobs.tokens;
    // The encoding's BOS reads as itself; the rest is the prompt.
    expect(tokens[0]).toBe('<s>');
    expect(tokens.slice(1).join('')).toBe(prompt);
    expect(tokens).toContain(' upon');
    expect(tokens).toContain(' fox');
    // é is two byte tokens: the first adds nothing yet, the second the character.
    expect(tokens.slice(-2)).toEqual(['', 'é']);
    const tokenized = await postJson(base, '/v1/tokenize', { texts: [prompt] });
    expect(tokenized.body.results[0].tokens).toContain('▁upon');
    expect(tokenized.body.results[0].tokens).toContain('<0xC3>');
  });

  it('top log-probs: each alternative is the text it would add in that place (as /detokenize of the prefix and it says)', async () => {
    await setup();
    const ids = (await postJson(base, '/tokenize', { prompt: 'the fox upon', add_special_tokens: true })).body.tokens as number[];
    const { body } = await postJson(base, '/v1/completions', { prompt: ids, max_tokens: 0, echo: true, logprobs: 20 });
    const tops: (Record<string, number> | null)[] = body.choices[0].logprobs.top_logprobs;
    const byId = await postJson(base, '/v1/completions', {
      prompt: ids,
      max_tokens: 0,
      echo: true,
      logprobs: 20,
      return_tokens_as_token_ids: true,
    });
    const spaced: string[] = [];
    const detok = async (t: number[]) => (await postJson(base, '/detokenize', { tokens: t })).body.prompt as string;
    for (let k = 2; k < ids.length; k++) {
      const before = await detok(ids.slice(0, k));
      const keys = Object.keys(tops[k]!);
      const altIds = Object.keys(byId.body.choices[0].logprobs.top_logprobs[k]).map((x) => Number(x.slice('token_id:'.length)));
      const expected = await Promise.all(altIds.map(async (a) => (await detok([...ids.slice(0, k), a])).slice(before.length)));
      spaced.push(...expected.filter((e) => e.startsWith(' ')));
      // Keys are distinct texts: each alternative's text is among them (byte tokens' U+FFFD aside).
      for (const e of expected) if (!e.includes('\uFFFD')) expect(keys).toContain(e);
    }
    // Words that start with ▁ read with their space (alone they decode without it).
    expect(spaced.length).toBeGreaterThan(0);
  });

  it("Probe withTokens: the sample's tokens join into its text", async () => {
    await setup();
    const chunks = [
      { label: 'knowledge', text: 'the fox' },
      { label: 'response', text: ' upon a time' },
    ];
    const { status, body } = await postJson(base, '/v1/probe', { samples: [{ id: 'a', chunks }], withTokens: true });
    expect(status).toBe(200);
    const tokens: string[] = body.samples[0].tokens;
    const text = (await postJson(base, '/detokenize', { tokens: body.samples[0].tokenIds })).body.prompt;
    expect(tokens.join('')).toBe(text);
    expect(text).toContain('the fox upon a time');
    expect(tokens).toContain(' fox');
  });

  it('generation: the logprobs tokens join into the generated text', async () => {
    await setup();
    const { body } = await postJson(base, '/v1/completions', {
      prompt: 'the fox',
      max_tokens: 6,
      logprobs: 1,
      temperature: 0,
      ignore_eos: true,
    });
    expect(body.choices[0].logprobs.tokens.join('')).toBe(body.choices[0].text);
  });
});

describe('a checkpoint folder of symlinks is read as transformers reads it', () => {
  /** A folder whose files link into `target`'s (a --local-dir download into the hub cache),
   * with `replace` written as real files. */
  function linkedFolder(target: string, replace: Record<string, string> = {}): string {
    const dir = tempDir('linked');
    for (const f of fs.readdirSync(target)) if (!(f in replace)) fs.symlinkSync(path.join(target, f), path.join(dir, f));
    for (const [f, text] of Object.entries(replace)) fs.writeFileSync(path.join(dir, f), text);
    return dir;
  }

  it('serves a folder whose files link elsewhere, a variant with its own tokenizer_config.json, alike', async () => {
    const fx = makeFixture(FAMILY_FIXTURES.llama!);
    const config = JSON.parse(fs.readFileSync(path.join(fx.dir, 'tokenizer_config.json'), 'utf8'));
    const variant = linkedFolder(fx.dir, {
      'tokenizer_config.json': JSON.stringify({ ...config, chat_template: '{{ messages[0].content }}' }),
    });
    const score = async (dir: string) => {
      const s = await serve(dir);
      const { status, body } = await postJson(`http://127.0.0.1:${s.httpPort}`, '/v1/score', {
        items: [{ contextIds: { ids: [5, 6, 7] }, continuationsIds: [{ ids: [8, 9] }] }],
      });
      expect(status).toBe(200);
      await s.stop();
      return body.items[0].continuations[0].tokenLogprobs;
    };
    expect(await score(variant)).toEqual(await score(fx.dir));
  });

  it('serves shards that link into several folders (a DVC cache: content-addressed, a folder each)', async () => {
    const fx = makeFixture(FAMILY_FIXTURES.llama!, { shards: 2 });
    const cache = tempDir('dvc-cache');
    const dir = tempDir('dvc-checkout');
    for (const [i, f] of fs.readdirSync(fx.dir).entries()) {
      const blob = path.join(cache, `${i}${i}`, `${f}.blob`);
      fs.mkdirSync(path.dirname(blob), { recursive: true });
      fs.copyFileSync(path.join(fx.dir, f), blob);
      fs.symlinkSync(blob, path.join(dir, f));
    }
    const s = await serve(dir);
    const { status } = await postJson(`http://127.0.0.1:${s.httpPort}`, '/v1/score', {
      items: [{ contextIds: { ids: [5, 6] }, continuationsIds: [{ ids: [7] }] }],
    });
    expect(status).toBe(200);
  });

  it('--checkpoint-links contain refuses a link out of the folder; no byte of a linked file reaches a message either way', async () => {
    const fx = makeFixture(FAMILY_FIXTURES.llama!);
    await refusedAtLoad(linkedFolder(fx.dir), /config\.json: leads to .*, outside the checkpoint folder \(checkpointLinks contain\)/, [
      '--checkpoint-links',
      'contain',
    ]);
    const secret = path.join(tempDir('secret'), 'secret.txt');
    fs.writeFileSync(secret, 'TOPSECRET-42 {not json');
    const dir = linkedFolder(fx.dir);
    fs.rmSync(path.join(dir, 'config.json'));
    fs.symlinkSync(secret, path.join(dir, 'config.json'));
    const message = await refusedAtLoad(dir, /config\.json: not valid JSON \(Unexpected character at position 0\)/);
    expect(message).not.toContain('TOPSECRET');
  });
});

describe('smaller field findings', () => {
  it('--quantize on a GGUF whose matrices are all quantized is refused, not logged as quantized', async () => {
    // Rows of 32 and 64 values: every matrix takes Q8_0 blocks.
    const fx = makeFixture({ ...FAMILY_FIXTURES.llama!, intermediate: 64 });
    const file = rewrite(convertToGguf(fx, path.join(fx.dir, 'model.gguf')).file, (_, t) => {
      for (const x of t.filter((x) => x.dims.length === 2)) [x.type, x.data] = [8, new Uint8Array((x.dims[0]! / 32) * x.dims[1]! * 34)];
    });
    await refusedAtLoad(
      file,
      /quantize: q8_0: edited-model\.gguf has no float matrices to quantize \(its matrices are quantized already: (F32\/Q8_0|Q8_0\/F32) GGUF\)/,
      ['--quantize', 'q8_0'],
    );
  });

  it('a 1-D Q8_0 norm is refused naming the file and its tensor', async () => {
    const file = rewrite(ggufFixture(), (_, t) => {
      const norm = t.find((x) => x.name === 'blk.0.attn_norm.weight')!;
      [norm.type, norm.data] = [8, new Uint8Array((norm.dims[0]! / 32) * 34)];
    });
    await refusedAtLoad(
      file,
      /edited-model\.gguf: tensor blk\.0\.attn_norm\.weight \(model\.layers\.0\.input_layernorm\.weight\): a Q8_0 tensor where the graph needs float values/,
    );
  });
});
