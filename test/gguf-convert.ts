// A Hugging Face fixture written as llama.cpp's converter (convert_hf_to_gguf.py) writes a
// GGUF file, for the tests of the GGUF reader: written from llama.cpp's conventions here,
// never from the reader's tables (src/checkpoint/gguf-arch.ts), or the tests would check
// nothing. Per architecture: llama.cpp's tensor names, dims innermost first, q/k rows (and
// biases) permuted for llama-type rotary (LlamaModel.permute), Gemma's norm weights + 1,
// GPT-2's Conv1D weights transposed, experts stacked [experts, out, in], 1-D tensors,
// norms, routers and GPT-2's positions in F32 whatever the file type, Llama 3's rope
// scaling as rope_freqs and Phi-3's longrope as its factor tensors; metadata keys as the
// model classes write them. Where a fixture has a setting llama.cpp's converter drops but
// llama.cpp reads when present (a head_dim apart from hidden/heads as key_length for Phi-3,
// Mistral's window, Gemma 3's pattern), the key is written, as named below.
import fs from 'node:fs';
import path from 'node:path';
import { writeGguf, meta as v, type GgufTensorData } from '../src/checkpoint/gguf-write.js';
import { readGguf, type GgufValue } from '../src/checkpoint/gguf.js';
import { FAMILY_FIXTURES, makeFixture } from './fixtures.js';
import { f16ToF32, f32ToBf16, f32ToF16, bf16ToF32 } from '../src/common/dtypes.js';
import type { TensorData } from '../src/checkpoint/safetensors.js';
import type { ReferenceModel } from './reference.js';
import { BLOCKS, QUANT_TYPE_IDS, dequantizeRows, quantTypeOf, type QuantTypeName } from '../src/checkpoint/ggml-blocks.js';
import { quantizeRows } from '../src/checkpoint/ggml-quantize.js';

/** The file's type: a float type, or a quantized one for every matrix whose rows are whole
 * blocks of it (else Q8_0, else F32, as llama.cpp falls back). */
export type GgufDtype = 'float32' | 'float16' | 'bfloat16' | QuantTypeName;

const ARCH: Record<string, string> = {
  llama: 'llama',
  mistral: 'llama',
  mixtral: 'llama',
  qwen2: 'qwen2',
  qwen3: 'qwen3',
  qwen3_moe: 'qwen3moe',
  olmo2: 'olmo2',
  phi3: 'phi3',
  gemma2: 'gemma2',
  gemma3_text: 'gemma3',
  gpt2: 'gpt2',
};

/** Every fixture family llama.cpp has an architecture for. */
export const GGUF_FAMILIES = Object.keys(ARCH);

export interface ConvertOptions {
  dtype?: GgufDtype;
  /** tokenizer.ggml.pre (default `gpt-2`: the fixtures' ByteLevel regex is GPT-2's). */
  pre?: string;
  /** Metadata to add or replace (null: leave out). */
  metadata?: Record<string, GgufValue | null>;
  /** A type of its own for a tensor (by Hugging Face name), as llama.cpp's mixes (Q4_K_M) give. */
  typeOf?: (name: string) => GgufDtype | undefined;
}

export interface Converted {
  file: string;
  /** The model the file holds, in Hugging Face names and layout, each value as stored. */
  reference: ReferenceModel;
}

/** Write `fx` (a fixture folder and its tensors) as a GGUF file at `file`. */
export function convertToGguf(fx: ReferenceModel & { dir: string }, file: string, options: ConvertOptions = {}): Converted {
  const config = fx.config;
  const family: string = config.model_type;
  const arch = ARCH[family];
  if (!arch) throw new Error(`gguf-convert: no llama.cpp architecture for ${family}`);
  const dtype = options.dtype ?? 'float32';
  const tensors: GgufTensorData[] = [];
  const reference = new Map<string, TensorData>();
  const byLayerExperts = new Map<string, { shape: number[]; data: Float32Array }[]>();
  for (const [name, t] of fx.tensors) {
    let data = t.data;
    let shape = t.shape;
    const permuteHeads = arch === 'llama' ? permutedHeads(name, config) : undefined;
    if (permuteHeads) data = permute(data, permuteHeads, shape);
    if ((arch === 'gemma2' || arch === 'gemma3') && name.endsWith('norm.weight')) data = data.map((x) => Math.fround(x + 1));
    if (arch === 'gpt2' && /\.(c_attn|c_proj|c_fc)\.weight$/.test(name)) [data, shape] = [transpose(data, shape), [shape[1]!, shape[0]!]];
    const expert = /^(model\.layers\.\d+\.(?:block_sparse_moe|mlp)\.experts)\.(\d+)\.(\w+)\.weight$/.exec(name);
    const type = storedType(name, shape, options.typeOf?.(name) ?? dtype);
    const stored = roundAs(data, type, shape.at(-1)!);
    reference.set(name, { shape: t.shape, data: unconvert(name, stored, t.shape, shape, arch, permuteHeads) });
    if (expert) {
      const key = `${expert[1]}.${expert[3]}`;
      byLayerExperts.set(key, [...(byLayerExperts.get(key) ?? []), { shape, data }]);
      continue;
    }
    tensors.push({ name: ggufName(name, family), dims: [...shape].reverse(), type, data: encode(data, type, shape.at(-1)!) });
  }
  for (const [key, experts] of byLayerExperts) {
    const [out, inp] = experts[0]!.shape as [number, number];
    const type = storedType(`${key}.weight`, [experts.length, out, inp], options.typeOf?.(`${key}.weight`) ?? dtype);
    const stacked = new Float32Array(experts.length * out * inp);
    experts.forEach((e, i) => stacked.set(e.data, i * out * inp));
    tensors.push({ name: ggufName(`${key}.weight`, family), dims: [inp, out, experts.length], type, data: encode(stacked, type, inp) });
  }
  const ropeFreqs = llama3Factors(config);
  if (ropeFreqs) tensors.push({ name: 'rope_freqs.weight', dims: [ropeFreqs.length], type: 0, data: encode(ropeFreqs, 0, ropeFreqs.length) });
  const longrope = phi3Factors(config);
  for (const [name, f] of longrope ?? []) tensors.push({ name, dims: [f.length], type: 0, data: encode(Float32Array.from(f), 0, f.length) });
  const md = new Map<string, GgufValue>([
    ['general.architecture', v.str(arch)],
    ['general.name', v.str(path.basename(fx.dir))],
    ...modelMetadata(arch, config),
    ['general.file_type', v.u32({ float32: 0, float16: 1, bfloat16: 32, Q4_0: 2, Q4_1: 3, Q8_0: 7, Q4_K: 15, Q5_K: 17, Q6_K: 18 }[dtype])],
    ...tokenizerMetadata(fx.dir, config, options.pre ?? 'gpt-2'),
  ]);
  for (const [k, value] of Object.entries(options.metadata ?? {})) {
    if (value === null) md.delete(k);
    else md.set(k, value);
  }
  writeGguf(file, md, tensors);
  return { file, reference: { config, tensors: reference } };
}

// ---- tensors -------------------------------------------------------------------------

/** llama.cpp's tensor names (gguf-py's TensorNameMap), from the Hugging Face ones. */
function ggufName(name: string, family: string): string {
  const top: Record<string, string> = {
    'model.embed_tokens': 'token_embd',
    'model.norm': 'output_norm',
    lm_head: 'output',
    'transformer.wte': 'token_embd',
    'transformer.wpe': 'position_embd',
    'transformer.ln_f': 'output_norm',
  };
  const m = /^(.*)\.(weight|bias)$/.exec(name)!;
  if (top[m[1]!]) return `${top[m[1]!]}.${m[2]}`;
  const layer = /^(?:model\.layers|transformer\.h)\.(\d+)\.(.*)$/.exec(m[1]!)!;
  const sandwich = family === 'gemma2' || family === 'gemma3_text' || family === 'olmo2';
  const parts: Record<string, string> = {
    input_layernorm: 'attn_norm',
    'self_attn.q_proj': 'attn_q',
    'self_attn.k_proj': 'attn_k',
    'self_attn.v_proj': 'attn_v',
    'self_attn.o_proj': 'attn_output',
    'self_attn.qkv_proj': 'attn_qkv',
    'self_attn.q_norm': 'attn_q_norm',
    'self_attn.k_norm': 'attn_k_norm',
    post_attention_layernorm: sandwich ? 'post_attention_norm' : 'ffn_norm',
    pre_feedforward_layernorm: 'ffn_norm',
    post_feedforward_layernorm: 'post_ffw_norm',
    'mlp.gate_proj': 'ffn_gate',
    'mlp.up_proj': 'ffn_up',
    'mlp.down_proj': 'ffn_down',
    'mlp.gate_up_proj': 'ffn_up',
    'block_sparse_moe.gate': 'ffn_gate_inp',
    'mlp.gate': 'ffn_gate_inp',
    'block_sparse_moe.experts.w1': 'ffn_gate_exps',
    'block_sparse_moe.experts.w3': 'ffn_up_exps',
    'block_sparse_moe.experts.w2': 'ffn_down_exps',
    'mlp.experts.gate_proj': 'ffn_gate_exps',
    'mlp.experts.up_proj': 'ffn_up_exps',
    'mlp.experts.down_proj': 'ffn_down_exps',
    ln_1: 'attn_norm',
    'attn.c_attn': 'attn_qkv',
    'attn.c_proj': 'attn_output',
    ln_2: 'ffn_norm',
    'mlp.c_fc': 'ffn_up',
    'mlp.c_proj': 'ffn_down',
  };
  const part = parts[layer[2]!];
  if (!part) throw new Error(`gguf-convert: no llama.cpp name for ${name}`);
  return `blk.${layer[1]}.${part}.${m[2]}`;
}

/** The heads a q/k projection (or bias) is permuted within, for llama-type rotary. */
function permutedHeads(name: string, config: Record<string, any>): number | undefined {
  if (/self_attn\.q_proj\.(weight|bias)$/.test(name)) return config.num_attention_heads;
  if (/self_attn\.k_proj\.(weight|bias)$/.test(name)) return config.num_key_value_heads ?? config.num_attention_heads;
  return undefined;
}

/** LlamaModel.permute: rows reshaped (heads, 2, d/2, …), axes 1 and 2 swapped. */
function permute(data: Float32Array, heads: number, shape: number[]): Float32Array {
  const rows = shape[0]!;
  const cols = data.length / rows;
  const d = rows / heads;
  const out = new Float32Array(data.length);
  for (let h = 0; h < heads; h++)
    for (let i = 0; i < 2; i++)
      for (let j = 0; j < d / 2; j++)
        out.set(data.subarray((h * d + i * (d / 2) + j) * cols, (h * d + i * (d / 2) + j + 1) * cols), (h * d + 2 * j + i) * cols);
  return out;
}

function unpermute(data: Float32Array, heads: number, shape: number[]): Float32Array {
  const rows = shape[0]!;
  const cols = data.length / rows;
  const d = rows / heads;
  const out = new Float32Array(data.length);
  for (let h = 0; h < heads; h++)
    for (let i = 0; i < 2; i++)
      for (let j = 0; j < d / 2; j++)
        out.set(data.subarray((h * d + 2 * j + i) * cols, (h * d + 2 * j + i + 1) * cols), (h * d + i * (d / 2) + j) * cols);
  return out;
}

function transpose(data: Float32Array, [r, c]: number[]): Float32Array {
  const out = new Float32Array(data.length);
  for (let i = 0; i < r!; i++) for (let j = 0; j < c!; j++) out[j * r! + i] = data[i * c! + j]!;
  return out;
}

/** The stored values back in Hugging Face layout and meaning (the reference reads them). */
function unconvert(name: string, stored: Float32Array, hfShape: number[], shape: number[], arch: string, heads?: number): Float32Array {
  let data = stored;
  if (heads) data = unpermute(data, heads, hfShape);
  if ((arch === 'gemma2' || arch === 'gemma3') && name.endsWith('norm.weight')) data = data.map((x) => x - 1);
  if (arch === 'gpt2' && /\.(c_attn|c_proj|c_fc)\.weight$/.test(name)) data = transpose(data, shape);
  return data;
}

/** The converter's types: 1-D tensors, norms, routers and positions in F32, the rest as the file type. */
function storedType(name: string, shape: number[], dtype: GgufDtype): number {
  if (shape.length <= 1 || name.endsWith('norm.weight') || /\.(gate|wpe)\.weight$/.test(name) || !name.endsWith('.weight')) return 0;
  if (dtype in QUANT_TYPE_IDS) {
    const cols = shape.at(-1)!;
    const type = dtype as QuantTypeName;
    if (cols % BLOCKS[type].values === 0) return QUANT_TYPE_IDS[type];
    return cols % 32 === 0 ? QUANT_TYPE_IDS.Q8_0 : 0;
  }
  return { float32: 0, float16: 1, bfloat16: 30 }[dtype as 'float32' | 'float16' | 'bfloat16'];
}

function roundAs(data: Float32Array, type: number, cols: number): Float32Array {
  if (type === 1) return data.map((x) => f16ToF32(f32ToF16(x)));
  if (type === 30) return data.map((x) => bf16ToF32(f32ToBf16(x)));
  const q = quantTypeOf(type);
  if (q) return dequantizeRows(q, quantizeRows(q, data, data.length / cols, cols), data.length / cols, cols);
  return data;
}

function encode(data: Float32Array, type: number, cols: number): Uint8Array {
  if (type === 0) return new Uint8Array(Float32Array.from(data).buffer);
  const q = quantTypeOf(type);
  if (q) return quantizeRows(q, data, data.length / cols, cols);
  const out = new Uint16Array(data.length);
  for (let i = 0; i < data.length; i++) out[i] = type === 1 ? f32ToF16(data[i]!) : f32ToBf16(data[i]!);
  return new Uint8Array(out.buffer);
}

/** LlamaModel.generate_extra_tensors: Llama 3's scaling as a divisor per frequency. */
function llama3Factors(c: Record<string, any>): Float32Array | undefined {
  const r = c.rope_scaling;
  if (ARCH[c.model_type] !== 'llama' || (r?.rope_type ?? r?.type) !== 'llama3') return undefined;
  const dim = c.head_dim ?? c.hidden_size / c.num_attention_heads;
  const base = c.rope_theta ?? 10000;
  const [low, high, old] = [
    r.original_max_position_embeddings / r.low_freq_factor,
    r.original_max_position_embeddings / r.high_freq_factor,
    r.original_max_position_embeddings,
  ];
  return Float32Array.from({ length: dim / 2 }, (_, i) => {
    const freq = Math.fround(1 / Math.fround(base ** ((2 * i) / dim)));
    const wavelen = (2 * Math.PI) / freq;
    if (wavelen < high) return 1;
    if (wavelen > low) return r.factor;
    const smooth = (old / wavelen - r.low_freq_factor) / (r.high_freq_factor - r.low_freq_factor);
    return 1 / ((1 - smooth) / r.factor + smooth);
  });
}

/** Phi3MiniModel.generate_extra_tensors: longrope's factors as tensors. */
function phi3Factors(c: Record<string, any>): [string, number[]][] | undefined {
  const r = c.rope_scaling;
  if (c.model_type !== 'phi3' || !r?.long_factor) return undefined;
  return [
    ['rope_factors_long.weight', r.long_factor],
    ['rope_factors_short.weight', r.short_factor],
  ];
}

// ---- metadata ------------------------------------------------------------------------

/** The model's keys as its converter class writes them (TextModel.set_gguf_parameters and
 * the architecture's own). */
function modelMetadata(arch: string, c: Record<string, any>): [string, GgufValue][] {
  const k = (name: string) => `${arch}.${name}`;
  const out: [string, GgufValue][] = [];
  const u32 = (name: string, value: unknown) => value !== undefined && value !== null && out.push([k(name), v.u32(Number(value))]);
  const f32 = (name: string, value: unknown) => value !== undefined && value !== null && out.push([k(name), v.f32(Number(value))]);
  if (arch === 'gpt2') {
    // GPT2Model writes 4·n_embd as the MLP width; a fixture's own n_inner is written instead.
    u32('block_count', c.n_layer);
    u32('context_length', c.n_positions);
    u32('embedding_length', c.n_embd);
    u32('feed_forward_length', c.n_inner ?? 4 * c.n_embd);
    u32('attention.head_count', c.n_head);
    f32('attention.layer_norm_epsilon', c.layer_norm_epsilon);
    return out;
  }
  u32('block_count', c.num_hidden_layers);
  u32('context_length', c.max_position_embeddings);
  u32('embedding_length', c.hidden_size);
  u32('feed_forward_length', c.intermediate_size);
  u32('attention.head_count', c.num_attention_heads);
  u32('attention.head_count_kv', c.num_key_value_heads);
  f32('attention.layer_norm_rms_epsilon', c.rms_norm_eps);
  f32('rope.freq_base', c.rope_theta);
  const r = c.rope_scaling;
  if ((r?.rope_type ?? r?.type) === 'linear')
    out.push([k('rope.scaling.type'), v.str('linear')], [k('rope.scaling.factor'), v.f32(r.factor)]);
  f32('rope.freq_base_swa', c.rope_local_base_freq);
  u32('expert_count', c.num_local_experts ?? c.num_experts);
  u32('expert_used_count', c.num_experts_per_tok);
  // TextModel writes head_dim as key_length; Phi3MiniModel does not (its real models have
  // head_dim = hidden / heads), but llama.cpp reads it for every architecture.
  u32('attention.key_length', c.head_dim);
  u32('attention.value_length', c.head_dim);
  const headDim = c.head_dim ?? c.hidden_size / c.num_attention_heads;
  if (arch === 'llama') {
    u32('vocab_size', c.vocab_size);
    u32('rope.dimension_count', headDim);
    // llama.cpp's converter writes no window for Mistral or Mixtral; the fixtures' is written.
    u32('attention.sliding_window', c.sliding_window);
  }
  if (arch === 'qwen3moe') u32('expert_feed_forward_length', c.moe_intermediate_size);
  if (arch === 'phi3') {
    u32('rope.dimension_count', Math.floor(headDim * (c.partial_rotary_factor ?? 1)));
    u32('attention.sliding_window', c.sliding_window ?? 0);
    if (c.rope_scaling?.long_factor) {
      const scale = c.max_position_embeddings / c.original_max_position_embeddings;
      u32('rope.scaling.original_context_length', c.original_max_position_embeddings);
      f32('rope.scaling.attn_factor', scale > 1 ? Math.sqrt(1 + Math.log(scale) / Math.log(c.original_max_position_embeddings)) : 1);
    }
  }
  if (arch === 'gemma2') {
    f32('attn_logit_softcapping', c.attn_logit_softcapping);
    f32('final_logit_softcapping', c.final_logit_softcapping);
    u32('attention.sliding_window', c.sliding_window);
  }
  if (arch === 'gemma3') {
    f32('final_logit_softcapping', c.final_logit_softcapping);
    u32('attention.sliding_window', c.sliding_window);
    // Gemma3Model writes no pattern (llama.cpp assumes 6); another is written as one bool per layer.
    const pattern = c.sliding_window_pattern ?? 6;
    if (pattern !== 6)
      out.push([
        k('attention.sliding_window_pattern'),
        v.bools(Array.from({ length: c.num_hidden_layers }, (_, l) => (l + 1) % pattern !== 0)),
      ]);
  }
  return out;
}

/** The fixture's byte-level BPE vocabulary as `_set_vocab_gpt2` writes it: tokens by id,
 * added special tokens CONTROL and others USER_DEFINED, ids past the tokenizer [PADn] UNUSED. */
function tokenizerMetadata(dir: string, config: Record<string, any>, pre: string): [string, GgufValue][] {
  const json = JSON.parse(fs.readFileSync(path.join(dir, 'tokenizer.json'), 'utf8'));
  const cfg = JSON.parse(fs.readFileSync(path.join(dir, 'tokenizer_config.json'), 'utf8'));
  const size = config.vocab_size as number;
  const tokens = Array.from({ length: size }, (_, i) => `[PAD${i}]`);
  const types = new Array<number>(size).fill(5);
  for (const [t, id] of Object.entries(json.model.vocab as Record<string, number>)) [tokens[id], types[id]] = [t, 1];
  for (const a of json.added_tokens) [tokens[a.id], types[a.id]] = [a.content, a.special ? 3 : 4];
  const out: [string, GgufValue][] = [
    ['tokenizer.ggml.model', v.str('gpt2')],
    ['tokenizer.ggml.pre', v.str(pre)],
    ['tokenizer.ggml.tokens', v.strings(tokens)],
    ['tokenizer.ggml.token_type', v.i32s(types)],
    ['tokenizer.ggml.merges', v.strings((json.model.merges as [string, string][]).map(([a, b]) => `${a} ${b}`))],
  ];
  if (config.bos_token_id !== undefined) out.push(['tokenizer.ggml.bos_token_id', v.u32(config.bos_token_id)]);
  if (config.eos_token_id !== undefined) out.push(['tokenizer.ggml.eos_token_id', v.u32(config.eos_token_id)]);
  if (cfg.add_bos_token !== undefined) out.push(['tokenizer.ggml.add_bos_token', v.bool(cfg.add_bos_token)]);
  if (typeof cfg.chat_template === 'string') out.push(['tokenizer.chat_template', v.str(cfg.chat_template)]);
  return out;
}

/** A valid GGUF file of a fixture family. */
export function ggufFixture(family = 'llama'): string {
  const fx = makeFixture(FAMILY_FIXTURES[family]!);
  return convertToGguf(fx, path.join(fx.dir, 'model.gguf')).file;
}

/** `file` written again with its metadata and tensors edited (tensor data as read). */
export function rewrite(file: string, edit: (meta: Map<string, GgufValue>, tensors: GgufTensorData[]) => void): string {
  const g = readGguf(file);
  const bytes = fs.readFileSync(file);
  const tensors = [...g.tensors.values()].map((t) => ({
    name: t.name,
    dims: t.dims,
    type: t.type,
    data: bytes.subarray(t.offset, t.offset + t.bytes),
  }));
  const meta = new Map(g.metadata);
  edit(meta, tensors);
  const out = path.join(path.dirname(file), `edited-${path.basename(file)}`);
  writeGguf(out, meta, tensors);
  return out;
}

