// Llama GGUF files as llama.cpp writes them, for the peer benchmark (bench/gguf.ts writes
// ctxprobe's weights into one) and for models of real shapes whose weights are zeros
// (writeZeroLlamaGguf: the tensors are holes in a sparse file, so an 8B Q4_K_M file costs no
// disk, and a zero block of any ggml type dequantizes to zeros). The vocabulary is a
// SentencePiece-style placeholder of the right size: specials, the 256 byte tokens, then
// placeholders (benchmarks feed token ids, never text).
import fs from 'node:fs';
import { GGML_TYPES, type GgufValue } from '../checkpoint/gguf.js';
import { meta as v, writeGguf } from '../checkpoint/gguf-write.js';

/** A llama shape as config.json says it (the keys llama.cpp's converter reads). */
export interface LlamaShape {
  hidden_size: number;
  num_hidden_layers: number;
  num_attention_heads: number;
  num_key_value_heads?: number;
  intermediate_size: number;
  vocab_size: number;
  max_position_embeddings: number;
  rms_norm_eps: number;
  rope_theta?: number;
  head_dim?: number;
}

/** A `llama` GGUF's metadata for `shape`, with a placeholder vocabulary. */
/** Llama-3-8B's shape (config.json's keys): the benchmarks' and tests' model at a real size. */
export const LLAMA3_8B: LlamaShape = {
  hidden_size: 4096,
  num_hidden_layers: 32,
  num_attention_heads: 32,
  num_key_value_heads: 8,
  intermediate_size: 14336,
  vocab_size: 128256,
  max_position_embeddings: 8192,
  rms_norm_eps: 1e-5,
  rope_theta: 500000,
};

export function llamaGgufMetadata(shape: LlamaShape, name: string, fileType = 0): [string, GgufValue][] {
  const heads = shape.num_attention_heads;
  const vocab = shape.vocab_size;
  const byte = (i: number) => i >= 3 && i < 259;
  const tokens = Array.from({ length: vocab }, (_, i) =>
    i === 0 ? '<s>' : i === 1 ? '</s>' : i === 2 ? '<unk>' : byte(i) ? `<0x${(i - 3).toString(16).toUpperCase().padStart(2, '0')}>` : `<t${i}>`,
  );
  return [
    ['general.architecture', v.str('llama')],
    ['general.name', v.str(name)],
    ['general.file_type', v.u32(fileType)],
    ['llama.context_length', v.u32(shape.max_position_embeddings)],
    ['llama.embedding_length', v.u32(shape.hidden_size)],
    ['llama.block_count', v.u32(shape.num_hidden_layers)],
    ['llama.feed_forward_length', v.u32(shape.intermediate_size)],
    ['llama.attention.head_count', v.u32(heads)],
    ['llama.attention.head_count_kv', v.u32(shape.num_key_value_heads ?? heads)],
    ['llama.attention.layer_norm_rms_epsilon', v.f32(shape.rms_norm_eps)],
    ['llama.rope.freq_base', v.f32(shape.rope_theta ?? 10000)],
    ['llama.rope.dimension_count', v.u32(shape.head_dim ?? shape.hidden_size / heads)],
    ['llama.vocab_size', v.u32(vocab)],
    ['tokenizer.ggml.model', v.str('llama')],
    ['tokenizer.ggml.tokens', v.strings(tokens)],
    ['tokenizer.ggml.scores', v.f32s(tokens.map(() => 0))],
    ['tokenizer.ggml.token_type', v.i32s(tokens.map((_, i) => (i < 2 ? 3 : i === 2 ? 2 : byte(i) ? 6 : 1)))],
    ['tokenizer.ggml.bos_token_id', v.u32(0)],
    ['tokenizer.ggml.eos_token_id', v.u32(1)],
    ['tokenizer.ggml.unknown_token_id', v.u32(2)],
  ];
}

/** Each llama tensor by llama.cpp's name and its ggml dims (innermost first). */
export function llamaGgufTensors(shape: LlamaShape): { name: string; dims: number[] }[] {
  const h = shape.hidden_size;
  const heads = shape.num_attention_heads;
  const d = shape.head_dim ?? h / heads;
  const kv = (shape.num_key_value_heads ?? heads) * d;
  const ff = shape.intermediate_size;
  const out: { name: string; dims: number[] }[] = [{ name: 'token_embd.weight', dims: [h, shape.vocab_size] }];
  for (let l = 0; l < shape.num_hidden_layers; l++) {
    out.push(
      { name: `blk.${l}.attn_norm.weight`, dims: [h] },
      { name: `blk.${l}.attn_q.weight`, dims: [h, heads * d] },
      { name: `blk.${l}.attn_k.weight`, dims: [h, kv] },
      { name: `blk.${l}.attn_v.weight`, dims: [h, kv] },
      { name: `blk.${l}.attn_output.weight`, dims: [heads * d, h] },
      { name: `blk.${l}.ffn_norm.weight`, dims: [h] },
      { name: `blk.${l}.ffn_gate.weight`, dims: [h, ff] },
      { name: `blk.${l}.ffn_up.weight`, dims: [h, ff] },
      { name: `blk.${l}.ffn_down.weight`, dims: [ff, h] },
    );
  }
  out.push({ name: 'output_norm.weight', dims: [h] }, { name: 'output.weight', dims: [h, shape.vocab_size] });
  return out;
}

const F32 = 0;
const Q4_K = 12;
const Q6_K = 14;
/** llama.cpp's LLAMA_FTYPE_MOSTLY_Q4_K_M. */
const FTYPE_Q4_K_M = 15;

/** llama.cpp's use_more_bits (llama-quant.cpp): the first and last eighth of the layers and
 * every third one between them. */
const moreBits = (i: number, n: number) => i < n / 8 || i >= (7 * n) / 8 || (i - Math.floor(n / 8)) % 3 === 2;

/** The ggml type llama.cpp's Q4_K_M recipe gives a llama tensor (llama_tensor_get_type):
 * vectors F32, the output head Q6_K, attn_v and ffn_down Q6_K in the layers use_more_bits
 * picks, everything else Q4_K. */
export function q4KMType(name: string, layers: number): number {
  if (name.endsWith('norm.weight')) return F32;
  if (name === 'output.weight') return Q6_K;
  const layer = /^blk\.(\d+)\.(attn_v|ffn_down)\.weight$/.exec(name);
  if (layer && moreBits(Number(layer[1]), layers)) return Q6_K;
  return Q4_K;
}

/** Bytes of a tensor of ggml type `type` and dims `dims`. */
export function ggmlBytes(type: number, dims: number[]): number {
  const t = GGML_TYPES[type];
  if (!t?.block || !t.bytes) throw new Error(`ggml type ${type}: no block size`);
  const n = dims.reduce((a, b) => a * b, 1);
  if (n % t.block) throw new Error(`${n} elements are not whole ${t.name} blocks of ${t.block}`);
  return (n / t.block) * t.bytes;
}

/** A llama GGUF of `shape` whose weights are zeros, as Q4_K_M (llama.cpp's recipe) or F32;
 * sparse on disk. Returns the file's size in bytes. */
export function writeZeroLlamaGguf(file: string, shape: LlamaShape, fileType: 'q4_k_m' | 'f32'): number {
  const type = (name: string) => (fileType === 'f32' ? F32 : q4KMType(name, shape.num_hidden_layers));
  writeGguf(
    file,
    llamaGgufMetadata(shape, `zeros-${fileType}`, fileType === 'f32' ? 0 : FTYPE_Q4_K_M),
    llamaGgufTensors(shape).map((t) => ({ ...t, type: type(t.name), data: { zeros: ggmlBytes(type(t.name), t.dims) } })),
  );
  return fs.statSync(file).size;
}
