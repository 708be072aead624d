// A GGUF file's tokenizer, as the tokenizer.json (and tokenizer_config.json) that
// @huggingface/tokenizers reads, built from the metadata so that token ids are llama.cpp's
// for the same file and text (src/llama-vocab.cpp), as transformers' GGUF loader does
// (integrations/ggml.py):
//   `llama` — SentencePiece BPE: every token's splits into two pieces are merges, ranked
//     by the merged token's score (llama.cpp merges the pair of highest score first),
//     unknown pieces fall back to <0xNN> byte tokens; a space prefix (add_space_prefix)
//     and spaces as ▁ by the normalizer, on each stretch of text between special tokens
//     as llama.cpp does;
//   `gpt2` — byte-level BPE with the file's merges, pre-tokenized by the regexes llama.cpp
//     uses for `tokenizer.ggml.pre`.
// Control and unknown tokens are special tokens, user-defined ones added tokens: both are
// matched in the text before anything else (llama.cpp with parse_special).
import { CheckpointError } from '../common/errors.js';
import { GgufMeta } from '../checkpoint/gguf-meta.js';
import type { GgufFile } from '../checkpoint/gguf.js';
import { checkTokenLengths } from './token-caps.js';

const TOKEN_TYPE = { normal: 1, unknown: 2, control: 3, userDefined: 4, unused: 5, byte: 6 } as const;

const GPT2 = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)";
const LLAMA3 =
  "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const QWEN2 =
  "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
// Mistral's tekken, as its tokenizer.json writes it (llama.cpp rewrites the same classes with lookaheads).
const TEKKEN =
  '[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+';

/** llama.cpp's pre-tokenizers (llm_tokenizer_bpe): the regexes applied one after another,
 * and the settings each name implies. */
interface PreTokenizer {
  regexes: string[];
  ignoreMerges?: boolean;
  addBos?: boolean;
  cleanSpaces: boolean;
}
const LLAMA3_PRE: PreTokenizer = { regexes: [LLAMA3], ignoreMerges: true, addBos: true, cleanSpaces: true };
const QWEN2_PRE: PreTokenizer = { regexes: [QWEN2], cleanSpaces: false };
const GPT2_PRE: PreTokenizer = { regexes: [GPT2], cleanSpaces: true };
const STARCODER_PRE: PreTokenizer = { regexes: ['\\p{N}', GPT2], cleanSpaces: true };
const PRE_TOKENIZERS: Record<string, PreTokenizer> = {
  default: { regexes: ['[\\p{P}\\$\\+<=>\\^~\\|]+', GPT2, '\\p{N}+', '[0-9][0-9][0-9]'], cleanSpaces: true },
  llama3: LLAMA3_PRE,
  'llama-v3': LLAMA3_PRE,
  'llama-bpe': LLAMA3_PRE,
  falcon3: LLAMA3_PRE,
  qwen2: QWEN2_PRE,
  'deepseek-r1-qwen': QWEN2_PRE,
  stablelm2: { ...QWEN2_PRE, cleanSpaces: true },
  'gpt-2': GPT2_PRE,
  'phi-2': GPT2_PRE,
  mpt: GPT2_PRE,
  olmo: GPT2_PRE,
  starcoder: STARCODER_PRE,
  refact: STARCODER_PRE,
  smollm: { ...STARCODER_PRE, cleanSpaces: false },
  tekken: { regexes: [TEKKEN], ignoreMerges: true, addBos: true, cleanSpaces: false },
};

/** The `tokenizer.ggml.pre` names ctxprobe reads. */
export const GGUF_PRE_TOKENIZERS = Object.keys(PRE_TOKENIZERS);

export interface GgufTokenizer {
  /** tokenizer.json and tokenizer_config.json, in memory. */
  json: Record<string, any>;
  config: Record<string, any>;
}

/** The tokenizer of `g`'s metadata, refused by name when its model or pre-tokenizer is
 * not one llama.cpp's ids can be reproduced for here. */
export function ggufTokenizer(g: GgufFile): GgufTokenizer {
  const m = new GgufMeta(g);
  const model = m.string('tokenizer.ggml.model');
  if (model !== 'llama' && model !== 'gpt2')
    throw new CheckpointError(
      `${g.file}: tokenizer.ggml.model ${model === undefined ? 'is missing' : JSON.stringify(model.slice(0, 40))}${model === undefined ? '' : ' is not supported'} (llama: SentencePiece, gpt2: byte-level BPE)`,
    );
  const tokens = m.strings('tokenizer.ggml.tokens');
  if (!tokens || tokens.length === 0) throw new CheckpointError(`${g.file}: tokenizer.ggml.tokens is missing or empty`);
  const types = m.numbers('tokenizer.ggml.token_type') ?? tokens.map(() => TOKEN_TYPE.normal);
  checkTokenLengths(g.file, 'tokenizer.ggml.tokens', tokens, (i) => isAdded(types[i]));
  const scores = m.numbers('tokenizer.ggml.scores') ?? tokens.map(() => 0);
  for (const [key, list] of [
    ['tokenizer.ggml.token_type', types],
    ['tokenizer.ggml.scores', scores],
  ] as const)
    if (list.length !== tokens.length)
      throw new CheckpointError(`${g.file}: ${key} has ${list.length} entries for ${tokens.length} tokens`);
  const id = (key: string, fallback?: number) => {
    const v = m.tokenId(key, fallback);
    if (v !== undefined && (v < 0 || v >= tokens.length))
      throw new CheckpointError(`${g.file}: ${key} = ${v} is not a token id in [0, ${tokens.length})`);
    return v;
  };
  const spm = model === 'llama';
  const ids = {
    bos: id('tokenizer.ggml.bos_token_id', spm ? 1 : undefined),
    eos: id('tokenizer.ggml.eos_token_id', spm ? 2 : undefined),
    unk: id('tokenizer.ggml.unknown_token_id', spm ? 0 : undefined),
    pad: id('tokenizer.ggml.padding_token_id'),
  };
  const preName = spm ? undefined : (m.string('tokenizer.ggml.pre') ?? 'default');
  const pre = preName === undefined ? undefined : PRE_TOKENIZERS[preName];
  if (preName !== undefined && !pre)
    throw new CheckpointError(
      `${g.file}: tokenizer.ggml.pre ${JSON.stringify(preName.slice(0, 40))} is not supported (${GGUF_PRE_TOKENIZERS.join(', ')})`,
    );
  const addBos = m.bool('tokenizer.ggml.add_bos_token') ?? (spm || (pre?.addBos ?? false));
  const addEos = m.bool('tokenizer.ggml.add_eos_token') ?? false;
  if (addBos && ids.bos === undefined)
    throw new CheckpointError(`${g.file}: tokenizer.ggml.add_bos_token is true but there is no tokenizer.ggml.bos_token_id`);
  if (addEos && ids.eos === undefined)
    throw new CheckpointError(`${g.file}: tokenizer.ggml.add_eos_token is true but there is no tokenizer.ggml.eos_token_id`);
  const spacePrefix = spm && (m.bool('tokenizer.ggml.add_space_prefix') ?? true);
  const vocab: Record<string, number> = Object.create(null);
  tokens.forEach((t, i) => (vocab[t] = i));
  const json = {
    version: '1.0',
    truncation: null,
    padding: null,
    added_tokens: addedTokens(tokens, types, (m.string('general.name') ?? '').toLowerCase()),
    normalizer: spm ? spmNormalizer(spacePrefix) : null,
    pre_tokenizer: pre ? bpePreTokenizer(pre) : null,
    post_processor: postProcessor(tokens, addBos ? ids.bos : undefined, addEos ? ids.eos : undefined),
    decoder: spm ? spmDecoder(spacePrefix) : { type: 'ByteLevel', add_prefix_space: true, trim_offsets: true, use_regex: true },
    model: {
      type: 'BPE',
      dropout: null,
      unk_token: ids.unk === undefined ? null : tokens[ids.unk],
      continuing_subword_prefix: null,
      end_of_word_suffix: null,
      fuse_unk: spm,
      byte_fallback: spm,
      ignore_merges: pre?.ignoreMerges ?? false,
      vocab,
      merges: spm ? spmMerges(tokens, types, scores) : bpeMerges(m),
    },
  };
  const name = (i: number | undefined) => (i === undefined ? undefined : tokens[i]);
  const config: Record<string, any> = {
    ...(ids.bos !== undefined && { bos_token: name(ids.bos) }),
    ...(ids.eos !== undefined && { eos_token: name(ids.eos) }),
    ...(ids.unk !== undefined && { unk_token: name(ids.unk) }),
    ...(ids.pad !== undefined && { pad_token: name(ids.pad) }),
    add_bos_token: addBos,
    add_eos_token: addEos,
    clean_up_tokenization_spaces: pre?.cleanSpaces ?? false,
    ...chatTemplates(m),
  };
  return { json, config };
}

/** Tokens matched in the text before anything else (added tokens, special or not). */
const isAdded = (type: number | undefined) => type === TOKEN_TYPE.control || type === TOKEN_TYPE.unknown || type === TOKEN_TYPE.userDefined;

/** Control and unknown tokens as special tokens, user-defined ones as added tokens, each
 * matched as it is written (llama.cpp stores them normalized). Phi-3's strip the spaces
 * after them, as llama.cpp sets for a model named so. */
function addedTokens(tokens: string[], types: number[], modelName: string) {
  const phi3 = modelName.includes('phi-3') || modelName.includes('phi3');
  const added = [];
  for (let i = 0; i < tokens.length; i++) {
    const type = types[i];
    if (!isAdded(type)) continue;
    const content = tokens[i]!;
    const rstrip = phi3 && (content === '</s>' || !['<unk>', '<s>', '<|endoftext|>'].includes(content));
    added.push({ id: i, content, single_word: false, lstrip: false, rstrip, normalized: false, special: type !== TOKEN_TYPE.userDefined });
  }
  return added;
}

/** SentencePiece's merges: each pair of pieces a token splits into (a piece may also be a
 * single character outside the vocabulary, as llama.cpp merges by text), ranked by the
 * token's score, highest first, then by id. */
function spmMerges(tokens: string[], types: number[], scores: number[]): [string, string][] {
  const known = new Set(tokens);
  const piece = (s: string) => known.has(s) || s.length === 1 || (s.length === 2 && s.codePointAt(0)! > 0xffff);
  // Ranked by score, highest first, then id: indices sorted once, their splits in that order.
  const ids = Array.from(tokens.keys()).filter((id) => types[id] === TOKEN_TYPE.normal || types[id] === TOKEN_TYPE.unused);
  ids.sort((a, b) => scores[b]! - scores[a]! || a - b);
  const merges: [string, string][] = [];
  for (const id of ids) {
    const text = tokens[id]!;
    // Split only between code points (a surrogate pair is one character).
    for (let k = text.codePointAt(0)! > 0xffff ? 2 : 1; k < text.length; k += text.codePointAt(k)! > 0xffff ? 2 : 1) {
      const [left, right] = [text.slice(0, k), text.slice(k)];
      if (piece(left) && piece(right)) merges.push([left, right]);
    }
  }
  return merges;
}

/** `tokenizer.ggml.merges` ("left right", split at the first space after the first byte). */
function bpeMerges(m: GgufMeta): [string, string][] {
  const merges = m.strings('tokenizer.ggml.merges');
  if (!merges) throw new CheckpointError(`${m.file}: tokenizer.ggml.merges is missing (a gpt2 tokenizer needs its merges)`);
  return merges.map((merge, i) => {
    const at = merge.indexOf(' ', 1);
    if (at < 0)
      throw new CheckpointError(`${m.file}: tokenizer.ggml.merges[${i}] ${JSON.stringify(merge.slice(0, 40))} is not "left right"`);
    return [merge.slice(0, at), merge.slice(at + 1)];
  });
}

const spmNormalizer = (spacePrefix: boolean) => {
  const replace = { type: 'Replace', pattern: { String: ' ' }, content: '▁' };
  return spacePrefix ? { type: 'Sequence', normalizers: [{ type: 'Prepend', prepend: '▁' }, replace] } : replace;
};

const spmDecoder = (spacePrefix: boolean) => ({
  type: 'Sequence',
  decoders: [
    { type: 'Replace', pattern: { String: '▁' }, content: ' ' },
    { type: 'ByteFallback' },
    { type: 'Fuse' },
    ...(spacePrefix ? [{ type: 'Strip', content: ' ', start: 1, stop: 0 }] : []),
  ],
});

const bpePreTokenizer = (pre: PreTokenizer) => ({
  type: 'Sequence',
  pretokenizers: [
    ...pre.regexes.map((regex) => ({ type: 'Split', pattern: { Regex: regex }, behavior: 'Isolated', invert: false })),
    { type: 'ByteLevel', add_prefix_space: false, trim_offsets: false, use_regex: false },
  ],
});

/** BOS before and EOS after the text, as llama.cpp adds them (add_bos_token, add_eos_token). */
function postProcessor(tokens: string[], bos: number | undefined, eos: number | undefined) {
  if (bos === undefined && eos === undefined) return null;
  const special = (i: number) => ({ SpecialToken: { id: tokens[i]!, type_id: 0 } });
  const around = (seq: object[]) => [...(bos !== undefined ? [special(bos)] : []), ...seq, ...(eos !== undefined ? [special(eos)] : [])];
  const specials = [bos, eos].filter((i): i is number => i !== undefined);
  return {
    type: 'TemplateProcessing',
    single: around([{ Sequence: { id: 'A', type_id: 0 } }]),
    pair: [...around([{ Sequence: { id: 'A', type_id: 0 } }]), ...around([{ Sequence: { id: 'B', type_id: 1 } }])],
    special_tokens: Object.fromEntries(specials.map((i) => [tokens[i]!, { id: tokens[i]!, ids: [i], tokens: [tokens[i]!] }])),
  };
}

/** tokenizer.chat_template, and the named ones (tokenizer.chat_templates lists their names). */
function chatTemplates(m: GgufMeta): { chat_template?: string | { name: string; template: string }[] } {
  const main = m.string('tokenizer.chat_template');
  const names = m.strings('tokenizer.chat_templates') ?? [];
  if (names.length === 0) return main === undefined ? {} : { chat_template: main };
  const named = names
    .map((name) => ({ name, template: m.string(`tokenizer.chat_template.${name}`) ?? '' }))
    .filter((t) => t.template !== '');
  return { chat_template: [...(main !== undefined ? [{ name: 'default', template: main }] : []), ...named] };
}
