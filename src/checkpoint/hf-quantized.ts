// Hugging Face GPTQ and AWQ 4-bit checkpoints (config.json's `quantization_config`), read as
// what they define and computed exactly: every linear layer a checkpoint quantized is one
// 4-bit MatMulNBits part (model/quantized.ts), its integers, zero points and scales those
// the checkpoint stores, each group of `group_size` input columns `group / block` blocks of
// the same scale and zero point. A weight is w[n, k] = scale[g, n] · (q[k, n] − zero[g, n]).
//
// How they are packed (int32 words, 4 bits a value, low nibble first):
// - GPTQ: `qweight` [K/8, N], nibble i of word [r, n] is q[8r + i, n]; `qzeros` [K/g, N/8],
//   nibble i of word [g, j] is column 8j + i; `scales` f16 [K/g, N]; `g_idx` [K] the group of
//   each input column (act-order, `desc_act`: groups in another order than the columns').
//   checkpoint_format "gptq" (v1) stores each zero point one less: the word plus 0x11111111
//   is the zero points' word (GPTQModel's v1 → v2 conversion: a stored 15 carries over);
//   "gptq_v2" stores them as they are.
// - AWQ (version "gemm"): `qweight` [K, N/8] and `qzeros` [K/g, N/8] packed along N, nibble p
//   of word j holding column 8j + [0, 2, 4, 6, 1, 3, 5, 7][p]; `scales` f16 [K/g, N].
// Embeddings, norms and the head stay float, as those checkpoints store them.
import { CheckpointError, shownValue } from '../common/errors.js';
import { f16ToF32 } from '../common/floats.js';
import type { ExactForm, RepackPart } from './ggml-blocks.js';

/** A GPTQ or AWQ 4-bit linear [N, K] as its checkpoint stores it: qweight (the weight's own
 * byte range), qzeros and scales (ranges in the same file). `block`: the MatMulNBits block
 * (a power of two dividing `group`, each group then `group / block` blocks of the same scale
 * and zero point). `v1Zeros`: GPTQ's checkpoint_format "gptq", zero points stored one less. */
export interface HfQuantized {
  method: 'gptq' | 'awq';
  group: number;
  block: number;
  v1Zeros: boolean;
  qzeros: ByteRange;
  scales: ByteRange;
  /** Act-order: input column j of the parts is the checkpoint's column `order[j]` (the
   * graph gathers the activations' columns alike); absent where g_idx is k / group. */
  order?: readonly number[];
}

/** Bytes of a tensor in the weight's file. */
export interface ByteRange {
  offset: number;
  length: number;
}

/** config.json's `quantization_config`, checked: what ctxprobe computes with. */
export interface HfQuantConfig {
  method: 'gptq' | 'awq';
  /** Input columns per scale; undefined: one group per row (GPTQ's group_size −1). */
  group?: number;
  v1Zeros: boolean;
  /** GPTQ's desc_act: act-order, each linear's g_idx says its groups' columns. */
  actOrder: boolean;
  /** In words, for the load log and ListModels. */
  label: string;
}

const KEY = 'quantization_config';

/** The `quantization_config` of a raw config.json, checked (undefined: a float checkpoint).
 * A setting ctxprobe does not compute exactly is refused naming its key. */
export function readQuantConfig(raw: Record<string, unknown>, file: string): HfQuantConfig | undefined {
  const q = raw[KEY];
  if (q === undefined || q === null) return undefined;
  if (typeof q !== 'object' || Array.isArray(q)) throw new CheckpointError(`${file}: ${KEY} is not an object`);
  const c = q as Record<string, unknown>;
  const refuse = (key: string, why: string) => new CheckpointError(`${file}: ${KEY}.${key} = ${shownValue(c[key])} is not supported (${why})`);
  const method = c.quant_method;
  if (method !== 'gptq' && method !== 'awq') throw refuse('quant_method', 'GPTQ and AWQ 4-bit checkpoints are: "gptq", "awq"');
  const bits = c.bits ?? c.w_bit;
  if (bits !== 4) throw refuse(c.bits === undefined && c.w_bit !== undefined ? 'w_bit' : 'bits', 'ctxprobe computes 4-bit GPTQ and AWQ weights');
  const groupSize = c.group_size ?? c.q_group_size;
  const groupKey = c.group_size === undefined && c.q_group_size !== undefined ? 'q_group_size' : 'group_size';
  if (!Number.isSafeInteger(groupSize) || (groupSize !== -1 && ((groupSize as number) < 16 || (groupSize as number) % 16 !== 0)))
    throw refuse(groupKey, `a group of columns per scale is a multiple of 16${method === 'gptq' ? ', or −1: one per row' : ''}`);
  const group = groupSize === -1 ? undefined : (groupSize as number);
  if (method === 'awq') {
    if (group === undefined) throw refuse(groupKey, 'AWQ groups are a multiple of 16 columns');
    const version = c.version ?? 'gemm';
    if (typeof version !== 'string' || version.toLowerCase() !== 'gemm')
      throw refuse('version', 'AWQ "gemm" checkpoints are computed; gemv, exllama, marlin and ipex pack their integers otherwise');
    if ((c.zero_point ?? true) !== true) throw refuse('zero_point', 'AWQ checkpoints with zero points are');
    return { method, group, v1Zeros: false, actOrder: false, label: `AWQ 4-bit (group ${group}, gemm)` };
  }
  const format = c.checkpoint_format ?? 'gptq';
  if (format !== 'gptq' && format !== 'gptq_v2') throw refuse('checkpoint_format', 'GPTQ "gptq" and "gptq_v2" checkpoints are');
  if (c.is_marlin_format === true) throw refuse('is_marlin_format', 'Marlin packs its integers otherwise');
  if (c.dynamic !== undefined && c.dynamic !== null && !(typeof c.dynamic === 'object' && Object.keys(c.dynamic).length === 0))
    throw refuse('dynamic', 'settings that differ by module are not read');
  if ((c.pack_dtype ?? 'int32') !== 'int32') throw refuse('pack_dtype', 'GPTQ packs 4-bit integers in int32 words here');
  const act = c.desc_act === true ? ', act-order' : '';
  return { method, group, v1Zeros: format === 'gptq', actOrder: c.desc_act === true, label: `GPTQ 4-bit (${group ? `group ${group}` : 'one group a row'}${act}, checkpoint_format ${format})` };
}

/** The MatMulNBits block of a group: the largest power of two up to 128 that divides it (each
 * group `group / block` blocks of its scale and zero point, exactly). */
export function blockOfGroup(group: number): number {
  let block = 16;
  while (block < 128 && group % (block * 2) === 0) block *= 2;
  return block;
}

/** The exact form of a GPTQ / AWQ weight: one 4-bit part, no mins. */
export const hfForm = (h: HfQuantized): ExactForm => ({ block: h.block, hi: false, loZero: 0, hiZero: 0, mins: false });

/** Act-order: the order of input columns that puts each group's columns together, group by
 * group (undefined: `g_idx` is the trivial k / group). Refused, naming g_idx and desc_act,
 * where the groups are not each `group` columns. */
export function actOrder(gIdx: Int32Array, group: number, tensor: string): number[] | undefined {
  const K = gIdx.length;
  if (gIdx.every((g, k) => g === Math.floor(k / group))) return undefined;
  const order = Array.from({ length: K }, (_, k) => k).sort((a, b) => gIdx[a]! - gIdx[b]! || a - b);
  if (!order.every((k, j) => gIdx[k] === Math.floor(j / group)))
    throw new CheckpointError(
      `${tensor}: g_idx does not give each group ${group} input columns (quantization_config.desc_act act-order is computed where it does)`,
    );
  return order;
}

/** AWQ's nibble of column 8j + c within word j. */
const AWQ_NIBBLE = [0, 4, 1, 5, 2, 6, 3, 7];

/** A copy of bytes (any alignment; a Buffer's slice() is a view into its pool) as words. */
const copied = (b: Uint8Array) => new Uint8Array(b).buffer;
const words = (b: Uint8Array) => new Uint32Array(copied(b), 0, b.length >> 2);

/**
 * A GPTQ / AWQ weight [N, K] as its form's parts in MatMulNBits' layout ('lo' [N, K/block,
 * block/2], 'scales' float32 [N·K/block], 'loZeros' [N·⌈(K/block)/2⌉]), input columns in
 * `h.order` where given. `nonFinite`: the first output row whose scale is NaN or infinite.
 */
export function repackHf(
  h: HfQuantized,
  N: number,
  K: number,
  bytes: { qweight: Uint8Array; qzeros: Uint8Array; scales: Uint8Array },
): { parts: Partial<Record<RepackPart, Uint8Array>>; nonFinite?: number } {
  const qw = words(bytes.qweight);
  const qz = words(bytes.qzeros);
  const half = new Uint16Array(copied(bytes.scales));
  const blocks = K / h.block;
  const perGroup = h.group / h.block;
  const lo = new Uint8Array((N * K) / 2);
  // Where original input column k goes.
  const at = new Int32Array(K);
  for (let k = 0; k < K; k++) at[k] = k;
  h.order?.forEach((k, j) => {
    at[k] = j;
  });
  const put = (n: number, k: number, q: number) => {
    const j = at[k]!;
    const i = n * (K / 2) + (j >> 1);
    lo[i] = lo[i]! | (q << ((j & 1) * 4));
  };
  if (h.method === 'gptq') {
    for (let r = 0; r < K / 8; r++)
      for (let n = 0; n < N; n++) {
        const w = qw[r * N + n]!;
        for (let i = 0; i < 8; i++) put(n, 8 * r + i, (w >>> (4 * i)) & 15);
      }
  } else {
    for (let k = 0; k < K; k++)
      for (let c = 0; c < N / 8; c++) {
        const w = qw[k * (N / 8) + c]!;
        for (let m = 0; m < 8; m++) put(8 * c + m, k, (w >>> (4 * AWQ_NIBBLE[m]!)) & 15);
      }
  }
  const scales = new Float32Array(N * blocks);
  const zeroBytes = Math.ceil(blocks / 2);
  const zeros = new Uint8Array(N * zeroBytes);
  let nonFinite: number | undefined;
  for (let g = 0; g < K / h.group; g++)
    for (let n = 0; n < N; n++) {
      const s = f16ToF32(half[g * N + n]!);
      if (!Number.isFinite(s)) nonFinite = Math.min(nonFinite ?? n, n);
      let word = qz[g * (N / 8) + (n >> 3)]!;
      if (h.v1Zeros) word = (word + 0x11111111) >>> 0;
      const z = (word >>> (4 * (h.method === 'gptq' ? n & 7 : AWQ_NIBBLE[n & 7]!))) & 15;
      for (let b = g * perGroup; b < (g + 1) * perGroup; b++) {
        scales[n * blocks + b] = s;
        const i = n * zeroBytes + (b >> 1);
        zeros[i] = zeros[i]! | (z << ((b & 1) * 4));
      }
    }
  return { parts: { lo, scales: new Uint8Array(scales.buffer), loZeros: zeros }, ...(nonFinite !== undefined && { nonFinite }) };
}
