// Quantized weights in the graph, computed exactly: each ggml format as the sum of its
// exact form's parts (checkpoint/ggml-blocks.ts), every product in float32 on float32
// activations. The parts are derived at load from the file's blocks by the session thread
// (graph/held-weights.ts) and held in the private copy; nothing is dequantized at rest.
//
// MatMulNBits runs at accuracy_level 1 (float32 products on dequantized blocks). Its
// default on WebGPU quantizes the activations to int8 (the DP4A path), which is what
// llama.cpp does and what this file exists not to do.
import type { GraphBuilder } from '../graph/builder.js';
import type { DerivedWeight } from '../graph/held-weights.js';
import { CheckpointError } from '../common/errors.js';
import { BLOCKS, EXACT_FORMS, formParts, quantTypeOf, type ExactForm, type QuantTypeName, type RepackPart } from '../checkpoint/ggml-blocks.js';
import { storedName, type StoredWeight } from '../checkpoint/weights.js';
import { hfForm } from '../checkpoint/hf-quantized.js';

/** What quantized products take: float32 activations (exact), or, on request, activations
 * quantized to int8 per block inside the product (MatMulNBits' accuracy_level 4: faster, as
 * llama.cpp computes; its error is bench/real-models.ts's). */
export const QUANTIZED_ACTIVATIONS = ['float32', 'int8'] as const;
export type QuantizedActivations = (typeof QUANTIZED_ACTIVATIONS)[number];

/** `--quantize`: float weights quantized at load to a ggml format (approximate: the
 * format's rounding), then computed exactly as a file of that format would be. */
export const QUANTIZE_AT_LOAD = ['q8_0', 'q4_0', 'q4_k'] as const;
export type QuantizeAtLoad = (typeof QUANTIZE_AT_LOAD)[number];

/** The format a [rows, cols] float weight takes under `--quantize to`: `to`'s where the rows are
 * whole blocks of it, else Q8_0 where they are whole blocks of 32 (as llama.cpp falls back),
 * else none (it stays float). */
export function quantizeTarget(to: QuantizeAtLoad, cols: number): QuantTypeName | undefined {
  const type = ({ q8_0: 'Q8_0', q4_0: 'Q4_0', q4_k: 'Q4_K' } as const)[to];
  if (cols % BLOCKS[type].values === 0) return type;
  return cols % 32 === 0 ? 'Q8_0' : undefined;
}

/** How a part is laid out: for MatMulNBits (`product`: blocks [N, K/block, block/2], scales
 * and zero points flat; `wideProduct`: alike, a format of more than 4 bits as one 8-bit part,
 * for int8 activations where ProviderProfile.wideQuantizedProducts) or GatherBlockQuantized
 * (`rows`: [N, K/2], [N, K/block]). */
type PartsLayout = 'product' | 'wideProduct' | 'rows';

/** A quantized [rows, cols] weight as initializers, one per part of its exact form. */
export interface QuantizedParts {
  /** The ggml type, or GPTQ / AWQ's one 4-bit part. */
  type: QuantTypeName | 'GPTQ' | 'AWQ';
  form: ExactForm;
  rows: number;
  cols: number;
  parts: Partial<Record<RepackPart, string>>;
  /** Act-order: the int64 constant [K] of the input columns in the parts' order. */
  columnOrder?: string;
}

/** The quantized type of a stored weight, checked against what the graph computes with. */
export function quantizedType(name: string, stored: StoredWeight): QuantTypeName {
  const q = stored.quantized!;
  const type = quantTypeOf(q.ggmlType);
  if (!type) throw new CheckpointError(`${storedName(name, stored)}: ${q.typeName} weights have no exact form here (Q8_0, Q4_0, Q4_1, Q4_K, Q5_K, Q6_K do)`);
  if (stored.shape.length !== 2)
    throw new CheckpointError(`${storedName(name, stored)}: a quantized tensor of shape [${stored.shape}] where a matrix was expected`);
  return type;
}

/** The parts of `stored` (a [rows, cols] quantized weight) as initializers in `layout`,
 * each derived at load from the weight's bytes. */
export function quantizedParts(g: GraphBuilder, name: string, stored: StoredWeight, layout: PartsLayout, from?: DerivedWeight['from']): QuantizedParts {
  const hf = stored.quantized?.hf;
  // GPTQ / AWQ quantize linear layers only (4 bits: one part, for either activations).
  if (hf && layout === 'rows') throw new CheckpointError(`${name}: a ${stored.quantized!.typeName} weight where a table of rows (an embedding) was expected`);
  const type = hf ? (stored.quantized!.typeName as 'GPTQ' | 'AWQ') : quantizedType(name, stored);
  const form = hf ? hfForm(hf) : EXACT_FORMS[type as QuantTypeName];
  const [rows, cols] = stored.shape as [number, number];
  const blocks = cols / form.block;
  const product = layout !== 'rows';
  const shapeOf = (part: RepackPart): { dtype: 'uint8' | 'float32'; shape: number[] } => {
    switch (part) {
      case 'lo':
      case 'hi':
        return { dtype: 'uint8', shape: product ? [rows, blocks, form.block / 2] : [rows, cols / 2] };
      case 'wide':
        return { dtype: 'uint8', shape: [rows, blocks, form.block] };
      case 'scales':
        return { dtype: 'float32', shape: product ? [rows * blocks] : [rows, blocks] };
      case 'loZeros':
      case 'hiZeros':
        return { dtype: 'uint8', shape: product ? [rows * Math.ceil(blocks / 2)] : [rows, Math.ceil(blocks / 2)] };
      case 'wideZeros':
        return { dtype: 'uint8', shape: [rows * blocks] };
      case 'mins':
        return { dtype: 'float32', shape: [rows, cols / 32] };
    }
  };
  const parts: QuantizedParts['parts'] = {};
  for (const part of formParts(form, layout === 'wideProduct')) {
    // mins are laid out alike for both: one initializer serves a tied head and embedding.
    const initName = part === 'mins' || product ? `${name}.${part}` : `${name}.rows.${part}`;
    const derived: DerivedWeight = {
      tensor: stored.label ?? name,
      ggmlType: stored.quantized!.ggmlType,
      rows,
      cols,
      part,
      ...(stored.rowOrder && { rowOrder: stored.rowOrder.order }),
      ...(from && { from }),
      ...(hf && { hf }),
    };
    parts[part] = g.hasInitializer(initName)
      ? initName
      : g.external(initName, { ...shapeOf(part), location: stored.location, offset: stored.offset, length: stored.length }, derived);
  }
  const order = hf?.order && g.namedConstant(`${name}.column_order`, 'int64', [cols], hf.order);
  return { type, form, rows, cols, parts, ...(order && { columnOrder: order }) };
}

// x · Wᵀ for a quantized W [N, K], in float32, as many rows as the provider needs for a row's
// bits not to depend on their number (ProviderProfile.quantizedMinRows), then the rows asked:
//   x [.., K] ─Reshape [M, K]─Concat(zeros [p, K])─► xp ─MatMulNBits(lo, or wide: 8 bits)─┐
//                                                   xp ─MatMulNBits(hi)─Mul(16)──────Add─┤ (Q8_0, Q5_K, Q6_K)
//   xp ─Reshape [M+p, K/32, 32]─MatMul(ones [32, 1])─► sums [M+p, K/32] ─·minsᵀ──Add─┤ (Q4_1, K-quants)
//                                                   ─Slice(first M rows)─Reshape [.., N]─► y
export function quantizedProduct(g: GraphBuilder, x: string, w: QuantizedParts, activations: QuantizedActivations = 'float32'): string {
  const { form, rows: N, cols: K, parts } = w;
  const pad = g.provider.quantizedMinRows - 1;
  // Act-order (GPTQ's g_idx): x's columns in the order the parts hold them.
  const ordered = w.columnOrder ? g.node('Gather', [x, w.columnOrder], { name: 'columns_in_order', attrs: { axis: -1 } }) : x;
  const flat = g.node('Reshape', [ordered, g.ints([-1, K])], { name: 'rows' });
  const padded = pad > 0 ? g.node('Concat', [flat, g.namedConstant(`/model/constants/FLOAT/zero_rows/${pad}x${K}`, 'float32', [pad, K], new Float32Array(pad * K))], { name: 'padded', attrs: { axis: 0 } }) : flat;
  const nbits = (part: 'lo' | 'hi' | 'wide') =>
    g.node('MatMulNBits', [padded, parts[part]!, parts.scales!, parts[`${part}Zeros`]!], {
      name: `${part}_bits`,
      domain: 'com.microsoft',
      attrs: { K, N, bits: part === 'wide' ? 8 : 4, block_size: form.block, accuracy_level: activations === 'int8' ? 4 : 1 },
    });
  let y = nbits(parts.wide ? 'wide' : 'lo');
  if (form.hi && !parts.wide) y = g.node('Add', [y, g.node('Mul', [nbits('hi'), g.scalar(16)], { name: 'hi_times_16' })], { name: 'lo_hi' });
  if (form.mins) {
    const grouped = g.node('Reshape', [padded, g.ints([-1, K / 32, 32])], { name: 'groups_of_32' });
    const sums = g.node('Reshape', [g.node('MatMul', [grouped, g.constant('float32', [32, 1], new Array<number>(32).fill(1))], { name: 'group_sums' }), g.ints([-1, K / 32])], {
      name: 'sums',
    });
    y = g.node('Add', [y, g.matMulT(sums, parts.mins!, { rank: 2, name: 'mins' })], { name: 'with_mins' });
  }
  if (pad > 0) {
    const M = g.node('Shape', [flat], { name: 'row_count', attrs: { start: 0, end: 1 } });
    y = g.node('Slice', [y, g.ints([0]), M, g.ints([0])], { name: 'asked_rows' });
  }
  const outer = g.node('Shape', [x], { name: 'outer_shape', attrs: { start: 0, end: -1 } });
  return g.node('Reshape', [y, g.node('Concat', [outer, g.ints([N])], { name: 'out_shape', attrs: { axis: 0 } })], { name: 'product' });
}

// Rows of a quantized table (an embedding), each part gathered and dequantized:
//   ids ─GatherBlockQuantized(lo)─(+ GatherBlockQuantized(hi)─Mul(16))──────────────Add─► rows [.., K]
//   ids ─Gather(mins)─Unsqueeze─Expand [.., K/32, 32]─Reshape [.., K]────────────────┘ (Q4_1, K-quants)
export function quantizedRows(g: GraphBuilder, ids: string, w: QuantizedParts): string {
  const { form, cols: K, parts } = w;
  const gather = (part: 'lo' | 'hi') =>
    g.node('GatherBlockQuantized', [parts[part]!, ids, parts.scales!, parts[part === 'lo' ? 'loZeros' : 'hiZeros']!], {
      name: `${part}_rows`,
      domain: 'com.microsoft',
      attrs: { bits: 4, block_size: form.block, gather_axis: 0, quantize_axis: 1 },
    });
  let rows = gather('lo');
  if (form.hi) rows = g.node('Add', [rows, g.node('Mul', [gather('hi'), g.scalar(16)], { name: 'hi_times_16' })], { name: 'lo_hi' });
  if (form.mins) {
    const mins = g.node('Unsqueeze', [g.node('Gather', [parts.mins!, ids], { name: 'min_rows', attrs: { axis: 0 } }), g.ints([-1])], { name: 'min_column' });
    const spread = g.node('Expand', [mins, g.ints([32])], { name: 'min_spread' });
    const shape = g.node('Concat', [g.node('Shape', [ids], { name: 'ids_shape' }), g.ints([K])], { name: 'rows_shape', attrs: { axis: 0 } });
    rows = g.node('Add', [rows, g.node('Reshape', [spread, shape], { name: 'min_values' })], { name: 'with_mins' });
  }
  return rows;
}
