// A Llama checkpoint of ours (safetensors, Hugging Face layout) written as an F32 GGUF
// file, so llama.cpp runs the very same weights in the peer benchmark (bench/peer.ts).
// What llama.cpp's own converter does for `llama`, done here: the same metadata keys, the
// tensor names, dimensions innermost first, and q/k rows permuted from Hugging Face's
// rotate-half layout to GGML's interleaved pairs. The metadata and placeholder vocabulary
// are src/model/synthetic-gguf.ts's (the benchmark feeds token ids, never text).
import fs from 'node:fs';
import path from 'node:path';
import { SafetensorsCheckpoint } from '../src/checkpoint/safetensors.js';
import { writeGguf } from '../src/checkpoint/gguf-write.js';
import { llamaGgufMetadata } from '../src/model/synthetic-gguf.js';

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

  const meta = llamaGgufMetadata(config, path.basename(dir));
  const asBytes = (d: Float32Array) => new Uint8Array(d.buffer, d.byteOffset, d.byteLength);
  writeGguf(
    file,
    meta,
    tensors.map((t) => ({ name: t.name, dims: t.dims, type: 0, data: asBytes(t.data) })),
  );
  return file;
}
