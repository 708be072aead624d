// GGUF checkpoints: the container read back as written (every value type, versions 2 and
// 3, another alignment); every family fixture written as llama.cpp's converter writes it
// (test/gguf-convert.ts) scores as its safetensors twin (F32: the same bits) and as the
// float64 reference over the values the file holds (F16, BF16); its byte-level BPE
// tokenizer built from the metadata tokenises as the fixture's tokenizer.json, for each
// pre-tokenizer against the tokenizer.json that uses its regex.
import fs from 'node:fs';
import path from 'node:path';
import { Tokenizer } from '@huggingface/tokenizers';
import { afterAll, describe, expect, it } from 'vitest';
import { Engine } from '../src/engine/engine.js';
import { GGUF_TYPE, readGguf, type GgufValue } from '../src/checkpoint/gguf.js';
import { writeGguf, meta as v } from '../src/checkpoint/gguf-write.js';
import { ggufTokenizer } from '../src/text/gguf-tokenizer.js';
import { rng, type SyntheticSpec } from '../src/model/synthetic.js';
import { FAMILY_FIXTURES, makeFixture, tempDir, type Fixture } from './fixtures.js';
import { convertToGguf, GGUF_FAMILIES, type GgufDtype } from './gguf-convert.js';
import { referenceForward } from './reference.js';
import { chatText } from '../src/requests/segments.js';
import { loadModel, readRepository } from '../src/serving/repository.js';

const engines: Engine[] = [];
afterAll(async () => Promise.all(engines.map((e) => e.release())));
async function load(p: string): Promise<Engine> {
  const e = await Engine.load(p, { threads: 1 });
  engines.push(e);
  return e;
}

async function logprobsOf(e: Engine, tokens: number[]): Promise<number[]> {
  const out = await e.forward({
    rows: [{ tokens, startPosition: 0, pastRow: 0 }],
    scored: tokens.slice(1).map((target, index) => ({ row: 0, index, target })),
    topK: 0,
    keepPresent: false,
  });
  return Array.from(out.logprobs);
}

function randomTokens(seed: number, n: number, vocab: number): number[] {
  const r = rng(seed);
  return Array.from({ length: n }, () => 3 + Math.floor(r() * (vocab - 3)));
}

describe('the container', () => {
  const values: [string, GgufValue][] = [
    ['t.u8', { type: GGUF_TYPE.UINT8, value: 200 }],
    ['t.i8', { type: GGUF_TYPE.INT8, value: -100 }],
    ['t.u16', { type: GGUF_TYPE.UINT16, value: 60000 }],
    ['t.i16', { type: GGUF_TYPE.INT16, value: -30000 }],
    ['t.u32', { type: GGUF_TYPE.UINT32, value: 4000000000 }],
    ['t.i32', { type: GGUF_TYPE.INT32, value: -2000000000 }],
    ['t.f32', { type: GGUF_TYPE.FLOAT32, value: Math.fround(0.1) }],
    ['t.bool', { type: GGUF_TYPE.BOOL, value: true }],
    ['t.string', { type: GGUF_TYPE.STRING, value: 'ünïcödé ▁ 🦙' }],
    ['t.u64', { type: GGUF_TYPE.UINT64, value: 2n ** 63n + 5n }],
    ['t.i64', { type: GGUF_TYPE.INT64, value: -(2n ** 62n) }],
    ['t.f64', { type: GGUF_TYPE.FLOAT64, value: 0.1 }],
    ['t.strings', v.strings(['a', '', 'c d'])],
    ['t.f32s', v.f32s([1.5, -2])],
    ['t.bools', v.bools([true, false])],
    ['t.u64s', { type: GGUF_TYPE.ARRAY, of: GGUF_TYPE.UINT64, value: BigUint64Array.from([1n, 2n ** 64n - 1n]) }],
    [
      't.nested',
      {
        type: GGUF_TYPE.ARRAY,
        of: GGUF_TYPE.ARRAY,
        value: [v.i32s([1, 2]), v.strings(['x']), { type: GGUF_TYPE.ARRAY, of: GGUF_TYPE.ARRAY, value: [v.f32s([3])] }],
      },
    ],
  ];
  const data = new Uint8Array(Float32Array.from([1, 2, 3, 4, 5, 6]).buffer);

  it.each([
    [2, 32],
    [3, 32],
    [3, 64],
  ])('reads back every value type, nested arrays and tensor infos (version %i, alignment %i)', (version, alignment) => {
    const file = path.join(tempDir('gguf'), 'all.gguf');
    writeGguf(
      file,
      values,
      [
        { name: 'a', dims: [3, 2], type: 0, data },
        { name: 'b', dims: [2], type: 0, data: data.subarray(0, 8) },
      ],
      { version, alignment },
    );
    const g = readGguf(file);
    expect([g.version, g.alignment]).toEqual([version, alignment]);
    for (const [key, value] of values) expect(g.metadata.get(key), key).toEqual(value);
    const [a, b] = [g.tensors.get('a')!, g.tensors.get('b')!];
    expect([a.dims, a.type, a.bytes, a.offset % alignment]).toEqual([[3, 2], 0, 24, 0]);
    expect(b.offset).toBe(a.offset + Math.ceil(24 / alignment) * alignment);
    expect(fs.readFileSync(file).subarray(a.offset, a.offset + 24)).toEqual(Buffer.from(data));
  });
});

/** The fixtures as GGUF expresses them: a setting llama.cpp's format has no key for is set
 * to what llama.cpp computes (and the fixture twin made with it). */
const GGUF_FIXTURES: Record<string, SyntheticSpec> = Object.fromEntries(
  Object.entries(FAMILY_FIXTURES)
    // Qwen2's window needs use_sliding_window and max_window_layers: no GGUF key (llama.cpp windows no Qwen2).
    .filter(([name, spec]) => GGUF_FAMILIES.includes(spec.family) && name !== 'qwen2-window')
    .map(([name, spec]) => {
      const extra = spec.extraConfig ?? {};
      // Gemma: llama.cpp scales queries by head_dim^-½ (query_pre_attn_scalar has no key).
      if (spec.family.startsWith('gemma')) return [name, { ...spec, extraConfig: { ...extra, query_pre_attn_scalar: spec.headDim } }];
      // Qwen3-MoE: llama.cpp's qwen3moe renormalises its experts and has no dense layers.
      if (spec.family === 'qwen3_moe') return [name, { ...spec, extraConfig: { ...extra, norm_topk_prob: true, mlp_only_layers: [] } }];
      return [name, spec];
    }),
);

const TEXTS = [
  'Hello world',
  ' leading  spaces and\ttabs\n\nnew lines',
  "it's 2024: 3.14159, 1000000!",
  'ünïcödé — 日本語 🦙🦙',
  '<s>in</s>side',
  '   ',
];

describe.each(Object.keys(GGUF_FIXTURES))('%s as GGUF', (name) => {
  const spec = GGUF_FIXTURES[name]!;
  let fx: Fixture;
  const fixture = () => (fx ??= makeFixture(spec));

  it('F32 scores as its safetensors twin, bit for bit, and tokenises as its tokenizer.json', async () => {
    const fx = fixture();
    const { file } = convertToGguf(fx, path.join(fx.dir, 'model-f32.gguf'));
    const [st, gg] = [await load(fx.dir), await load(file)];
    expect(gg.config.spec.family).toBe(st.config.spec.family);
    const tokens = randomTokens(7, 24, st.config.vocabSize);
    const [a, b] = [await logprobsOf(st, tokens), await logprobsOf(gg, tokens)];
    // Llama 3's rope scaling comes as llama.cpp's per-frequency divisors, rounded to float32:
    // its middle band's frequencies may differ by an ulp from transformers' formula.
    if (spec.ropeScaling?.rope_type === 'llama3') a.forEach((x, i) => expect(Math.abs(x - b[i]!)).toBeLessThan(1e-5));
    else expect(b).toEqual(a);
    for (const text of TEXTS)
      for (const special of [false, true]) expect(gg.tokenizer.encode(text, special), text).toEqual(st.tokenizer.encode(text, special));
    expect(gg.tokenizer.chatTemplate).toBe(st.tokenizer.chatTemplate);
  });

  it.each(['float16', 'bfloat16'] as GgufDtype[])('%s scores as the reference over the values it holds, within 1e-4', async (dtype) => {
    const fx = fixture();
    const { file, reference } = convertToGguf(fx, path.join(fx.dir, `model-${dtype}.gguf`), { dtype });
    const e = await load(file);
    const tokens = randomTokens(9, 20, e.config.vocabSize);
    const ref = referenceForward(reference, tokens);
    const got = await logprobsOf(e, tokens);
    got.forEach((lp, i) => expect(Math.abs(lp - ref.logprobs[i]![tokens[i + 1]!]!)).toBeLessThan(1e-4));
  });
});

describe('pre-tokenizers', () => {
  const fx = makeFixture(FAMILY_FIXTURES.qwen2!);
  const json = JSON.parse(fs.readFileSync(path.join(fx.dir, 'tokenizer.json'), 'utf8'));
  const cfg = JSON.parse(fs.readFileSync(path.join(fx.dir, 'tokenizer_config.json'), 'utf8'));
  const split = (regex: string) => ({
    type: 'Sequence',
    pretokenizers: [
      { type: 'Split', pattern: { Regex: regex }, behavior: 'Isolated', invert: false },
      { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: false },
    ],
  });
  // The regexes of the models' own tokenizer.json files (Llama 3, Qwen2, Mistral Nemo's tekken).
  const HF: Record<string, { pre: object; ignoreMerges?: boolean }> = {
    'gpt-2': { pre: { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: true } },
    'llama-bpe': {
      pre: split(
        "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
      ),
      ignoreMerges: true,
    },
    qwen2: {
      pre: split(
        "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
      ),
    },
    tekken: {
      pre: split(
        '[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+',
      ),
      ignoreMerges: true,
    },
  };
  const texts = [
    ...TEXTS,
    "I'VE been 'told he's THERE, 'Re you sure? 'M not sure I'll make it, 'D you like tea?",
    '3 33 333 3333 33333 333333 1234567',
    'CamelCaseWords and snake_case, x/y\\z; a+b=c <html></html>',
    '\n \n\n \t\t  \n',
    'Ελληνικά, русский, العربية, हिन्दी, 中文标点，。',
  ];

  it.each(Object.keys(HF))('%s: the GGUF tokenizer gives the ids of the tokenizer.json with that regex', (pre) => {
    const { file } = convertToGguf(fx, path.join(fx.dir, `pre-${pre}.gguf`), { pre });
    const ours = ggufTokenizer(readGguf(file));
    const hf = new Tokenizer(
      { ...json, pre_tokenizer: HF[pre]!.pre, model: { ...json.model, ignore_merges: HF[pre]!.ignoreMerges ?? false } },
      cfg,
    );
    const gg = new Tokenizer(ours.json, ours.config);
    for (const text of texts)
      expect(gg.encode(text, { add_special_tokens: false }).ids, `${pre}: ${text}`).toEqual(
        hf.encode(text, { add_special_tokens: false }).ids,
      );
  });

  it('default (no tokenizer.ggml.pre): llama.cpp splits punctuation, digits and GPT-2 words in turn', () => {
    const { file } = convertToGguf(fx, path.join(fx.dir, 'pre-default.gguf'), { metadata: { 'tokenizer.ggml.pre': null } });
    const ours = ggufTokenizer(readGguf(file));
    const gg = new Tokenizer(ours.json, ours.config);
    const hf = new Tokenizer(json, cfg);
    // GPT-2's regex keeps " ," together; the default splits punctuation out first, and
    // digits in threes.
    const ids = (t: Tokenizer, text: string) => t.encode(text, { add_special_tokens: false }).ids;
    expect(ids(gg, 'a ,b')).toEqual([...ids(hf, 'a'), ...ids(hf, ' '), ...ids(hf, ','), ...ids(hf, 'b')]);
    expect(ids(hf, 'a ,b')).toEqual([...ids(hf, 'a'), ...ids(hf, ' ,'), ...ids(hf, 'b')]);
    expect(ids(gg, '12345')).toEqual([...ids(hf, '123'), ...ids(hf, '45')]);
  });
});

describe('special tokens and the chat template', () => {
  it("a ChatML template renders through the contained renderer as the safetensors twin's; eot ends generation", async () => {
    const fx = makeFixture({ ...FAMILY_FIXTURES.qwen2!, chatTemplate: 'chatml' });
    const { file } = convertToGguf(fx, path.join(fx.dir, 'chat.gguf'), { metadata: { 'tokenizer.ggml.eot_token_id': v.u32(1) } });
    const [st, gg] = [await load(fx.dir), await load(file)];
    const messages = [
      { role: 'user', content: 'When was it built?' },
      { role: 'assistant', content: 'In 1889.' },
    ];
    expect(gg.tokenizer.chatTemplate).toBe(st.tokenizer.chatTemplate);
    const [a, b] = [await chatText(st.tokenizer, messages), await chatText(gg.tokenizer, messages)];
    expect(b).toBe(a);
    expect(gg.tokenizer.encode(b)).toEqual(st.tokenizer.encode(a));
    // <|im_end|> is the EOS (a control token llama.cpp also knows by its text), then the eot id.
    expect(st.config.eosTokenIds).toEqual([gg.tokenizer.encode('<|im_end|>')[0]]);
    expect(gg.config.eosTokenIds).toEqual([st.config.eosTokenId, 1]);
  });
});

describe('a model repository', () => {
  it("serves a GGUF file named by a model config's path (relative to the repository)", async () => {
    const fx = makeFixture(FAMILY_FIXTURES.gemma3_text!);
    const repo = tempDir('gguf-repo');
    convertToGguf(fx, path.join(repo, 'gemma.gguf'));
    fs.writeFileSync(path.join(repo, 'gemma.json'), JSON.stringify({ path: 'gemma.gguf', threads: 1 }));
    const [entry] = readRepository(repo);
    const model = await loadModel(entry!);
    engines.push(model.engine);
    expect([entry!.name, model.engine.info.family, model.engine.info.layers]).toEqual(['gemma', 'gemma3_text', 2]);
  });
});
