// Small deterministic checkpoints in Hugging Face layout, for every supported family:
// the default model `npm start` serves on a fresh machine, the test fixtures and the
// benchmark models. Weights are random (seeded); the tokenizer is a real byte-level BPE
// learned from a small corpus, written as tokenizer.json.
import fs from 'node:fs';
import path from 'node:path';
import { familySpec } from './families.js';
import { parseModelConfig } from './config.js';
import { buildDecoderGraph, type WeightSource } from './decoder.js';
import { writeSafetensors, writeShardedSafetensors, type TensorData } from '../checkpoint/safetensors.js';
import type { ExternalTensor } from '../graph/builder.js';
import { TOKENIZER_CORPUS } from './corpus.js';

export interface SyntheticSpec {
  /** A family of families.ts (`llama`, `mistral`, `qwen2`, `phi3`, `gpt2`). */
  family: string;
  hidden: number;
  layers: number;
  heads: number;
  kvHeads: number;
  intermediate: number;
  /** Tokenizer vocabulary target (bytes + specials + merges; a chat template's tokens come
   * on top). The corpus gives 124 merges at most: a larger target stops there. */
  vocab: number;
  /** Embedding rows, padded above the tokenizer's vocabulary (default: next multiple of 8). */
  vocabSize?: number;
  maxPositions: number;
  tied?: boolean;
  seed?: number;
  /** Weight scale: larger than a trained model's init so tiny models have peaked outputs. */
  scale?: number;
  ropeTheta?: number;
  ropeScaling?: Record<string, unknown>;
  slidingWindow?: number;
  headDim?: number;
  /** More config.json keys as given (e.g. `attention_bias: true`). */
  extraConfig?: Record<string, unknown>;
  /** A chat template for the tokenizer: `chatml` adds `<|im_start|>` and `<|im_end|>` as
   * special tokens after the merges (as Qwen's tokenizers do), ends turns and the sequence
   * with `<|im_end|>` (its EOS, as Qwen instruct models), and writes ChatML's template. */
  chatTemplate?: 'chatml';
}

export interface WriteOptions {
  dtype?: 'float32' | 'float16' | 'bfloat16';
  shards?: number;
}

import { rng } from '../common/random.js';

export { rng };

/** A weight source that hands the decoder nothing but records what it asks for: the
 * tensors a checkpoint of this config must hold, with their shapes, in build order. */
class RecordingSource implements WeightSource {
  readonly weightsDir = '.';
  readonly shapes = new Map<string, number[]>();

  has(): boolean {
    return true;
  }

  get(name: string, shape: number[]): ExternalTensor {
    this.shapes.set(name, shape);
    return { dtype: 'float32', shape, location: 'model.safetensors', offset: 0, length: 4 * shape.reduce((a, b) => a * b, 1) };
  }
}

/** The tensors (names and shapes) the decoder reads for a config.json. */
export function requiredTensors(config: Record<string, unknown>): Map<string, number[]> {
  const recorder = new RecordingSource();
  buildDecoderGraph(parseModelConfig(config), recorder);
  return recorder.shapes;
}

/** Random tensors for every weight the decoder reads, named and laid out as the family's
 * HF checkpoints: 1-D `.bias` near 0, other 1-D tensors (norm weights) near 1, matrices
 * scaled by 1/√fan_in. */
export function syntheticTensors(s: SyntheticSpec, config: Record<string, unknown>): Map<string, TensorData> {
  const rand = rng(s.seed ?? 1234);
  const scale = s.scale ?? 0.25;
  const tensors = new Map<string, TensorData>();
  for (const [name, shape] of requiredTensors(config)) {
    const n = shape.reduce((a, b) => a * b, 1);
    const fanIn = shape[shape.length - 1]!;
    const kind = shape.length > 1 ? 'weight' : name.endsWith('.bias') ? 'bias' : 'norm';
    const data = new Float32Array(n);
    for (let i = 0; i < n; i++) {
      const u = rand() * 2 - 1;
      data[i] = kind === 'norm' ? 1 + 0.1 * u : kind === 'bias' ? 0.05 * u : (u * scale * 4) / Math.sqrt(fanIn);
    }
    tensors.set(name, { shape, data });
  }
  return tensors;
}

// Families whose tokenizers have no BOS: <|endoftext|> is their only special token.
const NO_BOS = new Set(['gpt2']);

const ARCHITECTURES: Record<string, string> = {
  llama: 'LlamaForCausalLM',
  mistral: 'MistralForCausalLM',
  qwen2: 'Qwen2ForCausalLM',
  phi3: 'Phi3ForCausalLM',
  qwen3: 'Qwen3ForCausalLM',
  olmo2: 'Olmo2ForCausalLM',
  gemma2: 'Gemma2ForCausalLM',
  gemma3_text: 'Gemma3ForCausalLM',
  mixtral: 'MixtralForCausalLM',
  qwen3_moe: 'Qwen3MoeForCausalLM',
  gpt2: 'GPT2LMHeadModel',
};

function isTied(s: SyntheticSpec): boolean {
  return s.tied ?? familySpec(s.family).defaults.tied;
}

/** config.json in the family's own key names (families.ts `keys`). */
export function hfConfig(s: SyntheticSpec, vocabSize: number, ids: { bos?: number; eos: number }): Record<string, unknown> {
  const spec = familySpec(s.family);
  const k = spec.keys;
  return {
    architectures: [ARCHITECTURES[s.family] ?? 'ForCausalLM'],
    model_type: s.family,
    [k.hidden]: s.hidden,
    [k.intermediate]: s.intermediate,
    [k.layers]: s.layers,
    [k.heads]: s.heads,
    ...(k.kvHeads ? { [k.kvHeads]: s.kvHeads } : {}),
    ...(k.headDim && s.headDim ? { [k.headDim]: s.headDim } : {}),
    [k.activation]: spec.defaults.activation,
    [k.maxPositions]: s.maxPositions,
    [k.normEps]: 1e-5,
    ...(spec.positions.kind === 'rope' ? { rope_theta: s.ropeTheta ?? 10000 } : {}),
    ...(s.ropeScaling ? { rope_scaling: s.ropeScaling } : {}),
    ...(s.slidingWindow !== undefined ? { sliding_window: s.slidingWindow } : {}),
    [k.vocab]: vocabSize,
    bos_token_id: ids.bos ?? ids.eos,
    eos_token_id: ids.eos,
    [k.tied]: isTied(s),
    torch_dtype: 'float32',
    ...s.extraConfig,
  };
}

/** Write a complete checkpoint directory: config, weights, tokenizer. Returns its tensors. */
export function writeSyntheticCheckpoint(dir: string, s: SyntheticSpec, options: WriteOptions = {}): Map<string, TensorData> {
  fs.mkdirSync(dir, { recursive: true });
  const tok = byteLevelBpe(s.vocab, !NO_BOS.has(s.family), s.chatTemplate);
  // Real checkpoints often pad the embedding rows above the tokenizer's vocabulary.
  const vocabSize = Math.max(s.vocabSize ?? 0, Math.ceil(tok.size / 8) * 8);
  const config = hfConfig(s, vocabSize, tok.ids);
  const tensors = syntheticTensors(s, config);
  fs.writeFileSync(path.join(dir, 'config.json'), JSON.stringify(config, null, 2));
  fs.writeFileSync(path.join(dir, 'tokenizer.json'), JSON.stringify(tok.json));
  fs.writeFileSync(path.join(dir, 'tokenizer_config.json'), JSON.stringify(tok.config, null, 2));
  for (const f of fs.readdirSync(dir)) if (f.endsWith('.safetensors') || f.endsWith('.index.json')) fs.rmSync(path.join(dir, f));
  if ((options.shards ?? 1) > 1) writeShardedSafetensors(dir, tensors, options.shards!, options.dtype);
  else writeSafetensors(path.join(dir, 'model.safetensors'), tensors, options.dtype);
  return tensors;
}

/** A checkpoint of a real model's shape whose weights are all zeros, written as sparse files
 * (a header, then a hole of the tensors' size): a Llama-3-8B shape in BF16 is 16 GB on
 * paper and costs no disk, for tests and benchmarks of loading at the size users run
 * (bench/real-models.ts). `shards` files, as large checkpoints come. */
export function writeZeroCheckpoint(dir: string, s: SyntheticSpec, dtype: 'float32' | 'float16' | 'bfloat16', shards = 1): void {
  fs.mkdirSync(dir, { recursive: true });
  const tok = byteLevelBpe(s.vocab, !NO_BOS.has(s.family), s.chatTemplate);
  const vocabSize = Math.max(s.vocabSize ?? 0, Math.ceil(tok.size / 8) * 8);
  const config = { ...hfConfig(s, vocabSize, tok.ids), torch_dtype: dtype };
  fs.writeFileSync(path.join(dir, 'config.json'), JSON.stringify(config, null, 2));
  fs.writeFileSync(path.join(dir, 'tokenizer.json'), JSON.stringify(tok.json));
  fs.writeFileSync(path.join(dir, 'tokenizer_config.json'), JSON.stringify(tok.config, null, 2));
  const names = [...requiredTensors(config)];
  const bytes = dtype === 'float32' ? 4 : 2;
  const perShard = Math.ceil(names.length / shards);
  const weightMap: Record<string, string> = {};
  for (let k = 0; k < shards; k++) {
    const file = shards === 1 ? 'model.safetensors' : `model-${String(k + 1).padStart(5, '0')}-of-${String(shards).padStart(5, '0')}.safetensors`;
    const header: Record<string, unknown> = { __metadata__: { format: 'pt' } };
    let offset = 0;
    for (const [name, shape] of names.slice(k * perShard, (k + 1) * perShard)) {
      const length = shape.reduce((a, b) => a * b, 1) * bytes;
      header[name] = { dtype: { float32: 'F32', float16: 'F16', bfloat16: 'BF16' }[dtype], shape, data_offsets: [offset, offset + length] };
      weightMap[name] = file;
      offset += length;
    }
    let json = JSON.stringify(header);
    json += ' '.repeat((8 - (json.length % 8)) % 8);
    const len = Buffer.alloc(8);
    len.writeBigUInt64LE(BigInt(Buffer.byteLength(json)));
    const target = path.join(dir, file);
    fs.writeFileSync(target, Buffer.concat([len, Buffer.from(json)]));
    fs.truncateSync(target, 8 + Buffer.byteLength(json) + offset);
  }
  if (shards > 1) fs.writeFileSync(path.join(dir, 'model.safetensors.index.json'), JSON.stringify({ metadata: {}, weight_map: weightMap }, null, 2));
}

// ---- a byte-level BPE tokenizer, learned from the corpus -------------------------------

const CHATML_TOKENS = ['<|im_start|>', '<|im_end|>'];
/** ChatML, as Qwen2.5's instruct tokenizers write it (without their default system prompt
 * and tools): each message `<|im_start|>role\ncontent<|im_end|>\n`. */
const CHATML_TEMPLATE =
  "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}{% endfor %}" +
  "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

/** GPT-2's map from bytes to printable characters. */
export function bytesToUnicode(): string[] {
  const printable: number[] = [];
  for (let b = 33; b <= 126; b++) printable.push(b);
  for (let b = 161; b <= 172; b++) printable.push(b);
  for (let b = 174; b <= 255; b++) printable.push(b);
  const map: string[] = new Array(256);
  let extra = 0;
  for (let b = 0; b < 256; b++) map[b] = String.fromCodePoint(printable.includes(b) ? b : 256 + extra++);
  return map;
}

const GPT2_SPLIT = /'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+/gu;

function byteLevelBpe(vocabTarget: number, withBos: boolean, chatTemplate?: 'chatml') {
  const byteChars = bytesToUnicode();
  const specials = withBos ? ['<s>', '</s>'] : ['<|endoftext|>'];
  const vocab = new Map<string, number>();
  specials.forEach((t) => vocab.set(t, vocab.size));
  byteChars.forEach((c) => vocab.set(c, vocab.size));
  const enc = new TextEncoder();
  const words = new Map<string, number>();
  for (const m of TOKENIZER_CORPUS.match(GPT2_SPLIT) ?? []) {
    const w = Array.from(enc.encode(m), (b) => byteChars[b]).join('\u0000');
    words.set(w, (words.get(w) ?? 0) + 1);
  }
  let pieces = [...words].map(([w, count]) => ({ parts: w.split('\u0000'), count }));
  const merges: [string, string][] = [];
  while (vocab.size < vocabTarget) {
    const pairs = new Map<string, number>();
    for (const { parts, count } of pieces) {
      for (let i = 0; i + 1 < parts.length; i++) {
        const key = parts[i] + '\u0000' + parts[i + 1];
        pairs.set(key, (pairs.get(key) ?? 0) + count);
      }
    }
    let best: string | undefined;
    let bestCount = 0;
    for (const [k, c] of pairs) if (c > bestCount || (c === bestCount && best !== undefined && k < best)) [best, bestCount] = [k, c];
    if (!best || bestCount < 2) break;
    const [a, b] = best.split('\u0000') as [string, string];
    merges.push([a, b]);
    vocab.set(a + b, vocab.size);
    pieces = pieces.map(({ parts, count }) => {
      const out: string[] = [];
      for (let i = 0; i < parts.length; i++) {
        if (i + 1 < parts.length && parts[i] === a && parts[i + 1] === b) {
          out.push(a + b);
          i++;
        } else out.push(parts[i]!);
      }
      return { parts: out, count };
    });
  }
  const special = (content: string, id: number) => ({
    id,
    content,
    single_word: false,
    lstrip: false,
    rstrip: false,
    normalized: false,
    special: true,
  });
  const bos = withBos ? 0 : undefined;
  let eos = withBos ? 1 : 0;
  const added = specials.map((t, i) => special(t, i));
  if (chatTemplate === 'chatml') {
    for (const t of CHATML_TOKENS) {
      added.push(special(t, vocab.size));
      vocab.set(t, vocab.size);
    }
    eos = vocab.get('<|im_end|>')!;
  }
  const postProcessor = withBos
    ? {
        type: 'TemplateProcessing',
        single: [{ SpecialToken: { id: '<s>', type_id: 0 } }, { Sequence: { id: 'A', type_id: 0 } }],
        pair: [
          { SpecialToken: { id: '<s>', type_id: 0 } },
          { Sequence: { id: 'A', type_id: 0 } },
          { SpecialToken: { id: '<s>', type_id: 1 } },
          { Sequence: { id: 'B', type_id: 1 } },
        ],
        special_tokens: { '<s>': { id: '<s>', ids: [0], tokens: ['<s>'] } },
      }
    : { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: true };
  const json = {
    version: '1.0',
    truncation: null,
    padding: null,
    added_tokens: added,
    normalizer: null,
    pre_tokenizer: { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: true },
    post_processor: postProcessor,
    decoder: { type: 'ByteLevel', add_prefix_space: true, trim_offsets: true, use_regex: true },
    model: {
      type: 'BPE',
      dropout: null,
      unk_token: null,
      continuing_subword_prefix: null,
      end_of_word_suffix: null,
      fuse_unk: false,
      byte_fallback: false,
      ignore_merges: false,
      vocab: Object.fromEntries(vocab),
      merges,
    },
  };
  const config: Record<string, unknown> = withBos
    ? { tokenizer_class: 'PreTrainedTokenizerFast', bos_token: '<s>', eos_token: '</s>', add_bos_token: true, model_max_length: 2048 }
    : { tokenizer_class: 'GPT2TokenizerFast', bos_token: '<|endoftext|>', eos_token: '<|endoftext|>', model_max_length: 1024 };
  if (chatTemplate === 'chatml') Object.assign(config, { eos_token: '<|im_end|>', chat_template: CHATML_TEMPLATE });
  return { json, config, size: vocab.size, ids: { bos, eos } };
}
