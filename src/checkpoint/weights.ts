// What a weight source hands the decoder for one Hugging Face tensor: where its bytes lie
// (referenced in place), and what must be done to them to be that tensor — rows to take
// in another order, blocks to dequantize. Safetensors weights need neither; GGUF's may.
import type { ExternalTensor } from '../graph/builder.js';
import type { HfQuantized } from './hf-quantized.js';

/** Rows of the stored tensor in another order: Hugging Face row r is stored row
 * `order[r]` (along the first dimension of the Hugging Face shape, [out, in] or a bias).
 * The graph takes them with a Gather of the initializer, which onnxruntime folds at load
 * into a rewritten copy (llama.cpp's q/k rotary permutation). `key` names the order, so
 * tensors permuted alike share one index table. */
export interface RowOrder {
  key: string;
  order: readonly number[];
}

/** A quantized tensor, handed on as it lies: its ggml type, its dims as ggml counts them
 * (innermost first: [in, out] for a Hugging Face [out, in] weight), and the block layout;
 * the bytes are the weight's `location` / `offset` / `length`, one block row per
 * Hugging Face row (blocks never cross rows). */
export interface QuantizedTensor {
  ggmlType: number;
  typeName: string;
  dims: number[];
  /** Values per block, bytes per block. */
  blockValues: number;
  blockBytes: number;
  /** A Hugging Face GPTQ / AWQ linear (checkpoint/hf-quantized.ts): its parts are made from
   * three tensors, `location` / `offset` / `length` naming its qweight. */
  hf?: HfQuantized;
}

/** One weight as the decoder reads it: `shape` is the Hugging Face shape it asked for;
 * for a quantized weight `dtype` is what its values dequantize to (float32). */
export interface StoredWeight extends ExternalTensor {
  rowOrder?: RowOrder;
  quantized?: QuantizedTensor;
  /** How messages name it where the file's name differs (`blk.0.ffn_up.weight (model.layers.0.mlp.up_proj.weight)`). */
  label?: string;
  /** The checkpoint file it lies in, as messages name it. */
  file?: string;
}

/** A weight as a refusal names it: its file and its name there (`x.gguf: tensor blk.0.attn_norm.weight`). */
export const storedName = (name: string, s: Pick<StoredWeight, 'file' | 'label'>): string =>
  s.file ? `${s.file}: tensor ${s.label ?? name}` : (s.label ?? name);
