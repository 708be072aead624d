// A Llama checkpoint of ours (safetensors, Hugging Face layout) written as an F32 GGUF
// file, so llama.cpp runs the very same weights in the peer benchmark (bench/peer.ts).
// What llama.cpp's own converter does for `llama`, done here: the same metadata keys, the
// tensor names, dimensions innermost first, and q/k rows permuted from Hugging Face's
// rotate-half layout to GGML's interleaved pairs. The vocabulary is a placeholder of the
// right size (the benchmark feeds token ids, never text).
import fs from 'node:fs';
import path from 'node:path';
import { SafetensorsCheckpoint } from '../src/checkpoint/safetensors.js';

const ALIGNMENT = 32;
const T = { UINT32: 4, INT32: 5, FLOAT32: 6, STRING: 8, ARRAY: 9 } as const;

type Value =
  { type: 'u32' | 'f32' | 'str'; value: number | string } | { type: 'arr'; of: 'str' | 'f32' | 'i32'; values: (string | number)[] };

class Writer {
  private chunks: Buffer[] = [];
  size = 0;
  private push(b: Buffer) {
    this.chunks.push(b);
    this.size += b.length;
  }
  u32(v: number) {
    const b = Buffer.alloc(4);
    b.writeUInt32LE(v);
    this.push(b);
  }
  i32(v: number) {
    const b = Buffer.alloc(4);
    b.writeInt32LE(v);
    this.push(b);
  }
  u64(v: number) {
    const b = Buffer.alloc(8);
    b.writeBigUInt64LE(BigInt(v));
    this.push(b);
  }
  f32(v: number) {
    const b = Buffer.alloc(4);
    b.writeFloatLE(v);
    this.push(b);
  }
  str(s: string) {
    const b = Buffer.from(s, 'utf8');
    this.u64(b.length);
    this.push(b);
  }
  bytes(b: Buffer) {
    this.push(b);
  }
  pad() {
    const n = (ALIGNMENT - (this.size % ALIGNMENT)) % ALIGNMENT;
    if (n) this.push(Buffer.alloc(n));
  }
  value(v: Value) {
    switch (v.type) {
      case 'u32':
        this.u32(T.UINT32);
        return this.u32(v.value as number);
      case 'f32':
        this.u32(T.FLOAT32);
        return this.f32(v.value as number);
      case 'str':
        this.u32(T.STRING);
        return this.str(v.value as string);
      case 'arr':
        this.u32(T.ARRAY);
        this.u32(v.of === 'str' ? T.STRING : v.of === 'f32' ? T.FLOAT32 : T.INT32);
        this.u64(v.values.length);
        for (const x of v.values) {
          if (v.of === 'str') this.str(x as string);
          else if (v.of === 'f32') this.f32(x as number);
          else this.i32(x as number);
        }
    }
  }
  buffer() {
    return Buffer.concat(this.chunks);
  }
}

/** Hugging Face q/k rows (per head: first halves, then second halves of each rotary pair)
 * → GGML's (per head: the two members of each pair side by side). */
function permuteRows(data: Float32Array, heads: number, cols: number): Float32Array {
  const rows = data.length / cols;
  const hd = rows / heads;
  const out = new Float32Array(data.length);
  for (let h = 0; h < heads; h++)
    for (let i = 0; i < 2; i++)
      for (let j = 0; j < hd / 2; j++) {
        const from = h * hd + i * (hd / 2) + j;
        const to = h * hd + 2 * j + i;
        out.set(data.subarray(from * cols, (from + 1) * cols), to * cols);
      }
  return out;
}

/** Write `dir`'s Llama checkpoint as `file` (F32). Returns the file. */
export function writeLlamaGguf(dir: string, file: string): string {
  const config = JSON.parse(fs.readFileSync(path.join(dir, 'config.json'), 'utf8'));
  const ckpt = new SafetensorsCheckpoint(dir);
  const heads: number = config.num_attention_heads;
  const kvHeads: number = config.num_key_value_heads ?? heads;
  const hidden: number = config.hidden_size;
  const vocab: number = config.vocab_size;
  const tensors: { name: string; dims: number[]; data: Float32Array }[] = [];
  // [out, in] row-major is GGML's ne = [in, out]: the same bytes, the dims reversed.
  const add = (name: string, hf: string, permute?: number) => {
    const t = ckpt.get(hf);
    let data = ckpt.readFloat32(hf);
    if (permute) data = permuteRows(data, permute, t.shape.at(-1)!);
    tensors.push({ name, dims: [...t.shape].reverse(), data });
  };
  add('token_embd.weight', 'model.embed_tokens.weight');
  for (let l = 0; l < config.num_hidden_layers; l++) {
    const p = `model.layers.${l}`;
    add(`blk.${l}.attn_norm.weight`, `${p}.input_layernorm.weight`);
    add(`blk.${l}.attn_q.weight`, `${p}.self_attn.q_proj.weight`, heads);
    add(`blk.${l}.attn_k.weight`, `${p}.self_attn.k_proj.weight`, kvHeads);
    add(`blk.${l}.attn_v.weight`, `${p}.self_attn.v_proj.weight`);
    add(`blk.${l}.attn_output.weight`, `${p}.self_attn.o_proj.weight`);
    add(`blk.${l}.ffn_norm.weight`, `${p}.post_attention_layernorm.weight`);
    add(`blk.${l}.ffn_gate.weight`, `${p}.mlp.gate_proj.weight`);
    add(`blk.${l}.ffn_up.weight`, `${p}.mlp.up_proj.weight`);
    add(`blk.${l}.ffn_down.weight`, `${p}.mlp.down_proj.weight`);
  }
  add('output_norm.weight', 'model.norm.weight');
  add('output.weight', ckpt.has('lm_head.weight') ? 'lm_head.weight' : 'model.embed_tokens.weight');

  // SentencePiece-style, as llama.cpp expects of a `llama` vocabulary: specials, the 256
  // byte tokens, then placeholders.
  const byte = (i: number) => i >= 3 && i < 259;
  const tokens = Array.from({ length: vocab }, (_, i) =>
    i === 0
      ? '<s>'
      : i === 1
        ? '</s>'
        : i === 2
          ? '<unk>'
          : byte(i)
            ? `<0x${(i - 3).toString(16).toUpperCase().padStart(2, '0')}>`
            : `<t${i}>`,
  );
  const meta: [string, Value][] = [
    ['general.architecture', { type: 'str', value: 'llama' }],
    ['general.name', { type: 'str', value: path.basename(dir) }],
    ['general.file_type', { type: 'u32', value: 0 }],
    ['llama.context_length', { type: 'u32', value: config.max_position_embeddings }],
    ['llama.embedding_length', { type: 'u32', value: hidden }],
    ['llama.block_count', { type: 'u32', value: config.num_hidden_layers }],
    ['llama.feed_forward_length', { type: 'u32', value: config.intermediate_size }],
    ['llama.attention.head_count', { type: 'u32', value: heads }],
    ['llama.attention.head_count_kv', { type: 'u32', value: kvHeads }],
    ['llama.attention.layer_norm_rms_epsilon', { type: 'f32', value: config.rms_norm_eps }],
    ['llama.rope.freq_base', { type: 'f32', value: config.rope_theta ?? 10000 }],
    ['llama.rope.dimension_count', { type: 'u32', value: config.head_dim ?? hidden / heads }],
    ['llama.vocab_size', { type: 'u32', value: vocab }],
    ['tokenizer.ggml.model', { type: 'str', value: 'llama' }],
    ['tokenizer.ggml.tokens', { type: 'arr', of: 'str', values: tokens }],
    ['tokenizer.ggml.scores', { type: 'arr', of: 'f32', values: tokens.map(() => 0) }],
    ['tokenizer.ggml.token_type', { type: 'arr', of: 'i32', values: tokens.map((_, i) => (i < 2 ? 3 : i === 2 ? 2 : byte(i) ? 6 : 1)) }],
    ['tokenizer.ggml.bos_token_id', { type: 'u32', value: 0 }],
    ['tokenizer.ggml.eos_token_id', { type: 'u32', value: 1 }],
    ['tokenizer.ggml.unknown_token_id', { type: 'u32', value: 2 }],
  ];
  const w = new Writer();
  w.bytes(Buffer.from('GGUF'));
  w.u32(3);
  w.u64(tensors.length);
  w.u64(meta.length);
  for (const [key, v] of meta) {
    w.str(key);
    w.value(v);
  }
  let offset = 0;
  for (const t of tensors) {
    w.str(t.name);
    w.u32(t.dims.length);
    for (const d of t.dims) w.u64(d);
    w.u32(0); // F32
    w.u64(offset);
    offset += Math.ceil((t.data.length * 4) / ALIGNMENT) * ALIGNMENT;
  }
  w.pad();
  const fd = fs.openSync(file, 'w');
  try {
    fs.writeSync(fd, w.buffer());
    for (const t of tensors) {
      const bytes = Buffer.from(t.data.buffer, t.data.byteOffset, t.data.byteLength);
      fs.writeSync(fd, bytes);
      const pad = (ALIGNMENT - (bytes.length % ALIGNMENT)) % ALIGNMENT;
      if (pad) fs.writeSync(fd, Buffer.alloc(pad));
    }
  } finally {
    fs.closeSync(fd);
  }
  return file;
}
