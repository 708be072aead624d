// ggml's quantized block formats, read two ways:
// - `dequantizeRows`: each value as ggml's dequantize_row_* computes it, in float32 (the
//   definition of the model a file holds: the tests' float64 reference reads these);
// - `repackRows`: the same values in the exact form the graph computes with (model/quantized.ts):
//   one or two 4-bit parts in onnxruntime's MatMulNBits layout, each with float32 scales
//   and a zero point, and for the formats with mins a float32 term per 32 values.
//
// Every format is a sum of such parts, exactly: an integer u of up to 8 bits per value,
// split u = lo + 16·hi into nibbles, times a scale per block, plus (Q4_1, K-quants) a min:
//   w = s·(lo − zlo) + 16·(s·(hi − zhi)) + min
// The two nibble parts share their scales (the high part's product is times 16 after it:
// exact, a power of two), which keeps Q6_K at 10.5 bits a value at rest rather than 12.5.
// Why 4-bit parts: onnxruntime's CPU MatMulNBits has a float32 path for 4 bits only; its 2-
// and 8-bit paths at float32 accuracy dequantize the whole matrix every product (measured at
// K = N = 4096, one row: 4-bit 15.5 ms, 8-bit 242 ms, 2-bit 285 ms); and zero points are
// integers, so the K-quants' float mins are a term of their own (a [M, K/32] × [K/32, N]
// product of the sums of x over each 32 values).
// Where activations are quantized to int8 (on request: model/quantized.ts), the formats of
// more than 4 bits are one 8-bit part instead (`wide`: u itself, its zero point per block),
// which MatMulNBits multiplies as int8 in one product (measured, this machine, M = 512, K =
// 4096, N = 14336: 298 ms against 656 for the two 4-bit parts).
import { f16Values } from '../common/floats.js';

/** The quantized ggml types ctxprobe computes with. */
export type QuantTypeName = 'Q8_0' | 'Q4_0' | 'Q4_1' | 'Q4_K' | 'Q5_K' | 'Q6_K';

export const QUANT_TYPE_IDS: Record<QuantTypeName, number> = { Q4_0: 2, Q4_1: 3, Q8_0: 8, Q4_K: 12, Q5_K: 13, Q6_K: 14 };
const NAME_OF_ID = new Map(Object.entries(QUANT_TYPE_IDS).map(([n, id]) => [id, n as QuantTypeName]));

/** The quantized type of a ggml type id, if ctxprobe computes with it. */
export const quantTypeOf = (id: number): QuantTypeName | undefined => NAME_OF_ID.get(id);

/** A format's block: values and bytes. */
export const BLOCKS: Record<QuantTypeName, { values: number; bytes: number }> = {
  Q8_0: { values: 32, bytes: 34 },
  Q4_0: { values: 32, bytes: 18 },
  Q4_1: { values: 32, bytes: 20 },
  Q4_K: { values: 256, bytes: 144 },
  Q5_K: { values: 256, bytes: 176 },
  Q6_K: { values: 256, bytes: 210 },
};

/** A format as parts the graph computes with: the scales' block (16 or 32 values), a high
 * nibble part or not, each part's zero point, and a min per 32 values or not. */
export interface ExactForm {
  block: number;
  hi: boolean;
  loZero: number;
  hiZero: number;
  mins: boolean;
}

export const EXACT_FORMS: Record<QuantTypeName, ExactForm> = {
  // u = q + 128 (q int8): w = d·(u − 128) = d·lo + 16d·(hi − 8)
  Q8_0: { block: 32, hi: true, loZero: 0, hiZero: 8, mins: false },
  // w = d·(nibble − 8)
  Q4_0: { block: 32, hi: false, loZero: 8, hiZero: 0, mins: false },
  // w = d·nibble + m
  Q4_1: { block: 32, hi: false, loZero: 0, hiZero: 0, mins: true },
  // w = (d·sc)·nibble − dmin·m
  Q4_K: { block: 32, hi: false, loZero: 0, hiZero: 0, mins: true },
  // w = (d·sc)·(nibble + 16·bit) − dmin·m: the fifth bit is the high part
  Q5_K: { block: 32, hi: true, loZero: 0, hiZero: 0, mins: true },
  // u = q6 (0..63), w = (d·sc)·(u − 32) = (d·sc)·lo + 16(d·sc)·(hi − 2), a scale per 16 values
  Q6_K: { block: 16, hi: true, loZero: 0, hiZero: 2, mins: false },
};

/** The parts of a repacked tensor, each row-major over the tensor's rows. */
export type RepackPart = 'lo' | 'hi' | 'scales' | 'loZeros' | 'hiZeros' | 'mins' | 'wide' | 'wideZeros';

/** A part's bytes per row of `cols` values. */
export function partRowBytes(form: ExactForm, part: RepackPart, cols: number): number {
  const blocks = cols / form.block;
  switch (part) {
    case 'lo':
    case 'hi':
      return cols / 2;
    case 'wide':
      return cols;
    case 'scales':
      return blocks * 4;
    case 'loZeros':
    case 'hiZeros':
      return Math.ceil(blocks / 2);
    case 'wideZeros':
      return blocks;
    case 'mins':
      return (cols / 32) * 4;
  }
}

/** The parts a format's form has: its nibble parts, or (`wide`, a format with a high part)
 * its one 8-bit part. */
export function formParts(form: ExactForm, wide = false): RepackPart[] {
  return [
    ...(wide && form.hi ? (['wide', 'scales', 'wideZeros'] as const) : (['lo', 'scales', 'loZeros'] as const)),
    ...(form.hi && !wide ? (['hi', 'hiZeros'] as const) : []),
    ...(form.mins ? (['mins'] as const) : []),
  ];
}

/** Bytes at rest of a [rows, cols] tensor repacked (its parts together). */
export function repackedBytes(type: QuantTypeName, rows: number, cols: number): number {
  const form = EXACT_FORMS[type];
  return formParts(form).reduce((n, p) => n + rows * partRowBytes(form, p, cols), 0);
}

// Every f16 value by its bits: a load reads one or two per block.
const F16 = f16Values();
const f16 = (b: Uint8Array, at: number) => F16[b[at]! | (b[at + 1]! << 8)]!;

/** Q4_K / Q5_K: sub-block j's 6-bit scale (ggml's get_scale_min_k4). */
const scaleK4 = (j: number, s: Uint8Array, at: number) => (j < 4 ? s[at + j]! & 63 : (s[at + j + 4]! & 15) | ((s[at + j - 4]! >> 6) << 4));
/** …and its min. */
const minK4 = (j: number, s: Uint8Array, at: number) => (j < 4 ? s[at + j + 4]! & 63 : (s[at + j + 4]! >> 4) | ((s[at + j]! >> 6) << 4));

/**
 * One block decoded: `u` its unsigned integers (256 or 32), `scale` per form block (float32,
 * exact: an f16 times a small integer), `min` per 32 values (float32: ggml's own product).
 * The value ggml computes is fround(scale·(u − zero)) + min, rounded as ggml rounds (dequantize).
 */
function decodeBlock(type: QuantTypeName, b: Uint8Array, at: number, u: Uint8Array, scale: Float32Array, min: Float32Array): void {
  switch (type) {
    case 'Q8_0': {
      scale[0] = f16(b, at);
      for (let i = 0; i < 32; i++) u[i] = (b[at + 2 + i]! + 128) & 255; // int8 q + 128
      return;
    }
    case 'Q4_0':
    case 'Q4_1': {
      scale[0] = f16(b, at);
      const qs = at + (type === 'Q4_1' ? 4 : 2);
      if (type === 'Q4_1') min[0] = f16(b, at + 2);
      for (let j = 0; j < 16; j++) {
        u[j] = b[qs + j]! & 15;
        u[j + 16] = b[qs + j]! >> 4;
      }
      return;
    }
    case 'Q4_K':
    case 'Q5_K': {
      const d = f16(b, at);
      const dmin = f16(b, at + 2);
      const sc = at + 4;
      const qh = at + 16;
      const qs = type === 'Q4_K' ? at + 16 : at + 48;
      const five = type === 'Q5_K';
      for (let sub = 0; sub < 8; sub++) {
        scale[sub] = Math.fround(d * scaleK4(sub, b, sc));
        min[sub] = -Math.fround(dmin * minK4(sub, b, sc));
        const chunk = qs + 32 * (sub >> 1);
        const shift = sub & 1 ? 4 : 0;
        const bit = 1 << sub;
        const y = 32 * sub;
        for (let l = 0; l < 32; l++) u[y + l] = ((b[chunk + l]! >> shift) & 15) | (five && b[qh + l]! & bit ? 16 : 0);
      }
      return;
    }
    case 'Q6_K': {
      const ql = at;
      const qh = at + 128;
      const sc = at + 192;
      const d = f16(b, at + 208);
      for (let j = 0; j < 16; j++) scale[j] = Math.fround(d * ((b[sc + j]! << 24) >> 24));
      for (let half = 0; half < 2; half++) {
        const l0 = ql + 64 * half;
        const h0 = qh + 32 * half;
        const y = 128 * half;
        for (let l = 0; l < 32; l++) {
          const h = b[h0 + l]!;
          u[y + l] = (b[l0 + l]! & 15) | ((h & 3) << 4);
          u[y + l + 32] = (b[l0 + l + 32]! & 15) | (((h >> 2) & 3) << 4);
          u[y + l + 64] = (b[l0 + l]! >> 4) | (((h >> 4) & 3) << 4);
          u[y + l + 96] = (b[l0 + l + 32]! >> 4) | (((h >> 6) & 3) << 4);
        }
      }
      return;
    }
  }
}

/** Q4_K's and Q5_K's scales and (negated) mins of a block's eight sub-blocks, in float32. */
function k4ScalesMins(b: Uint8Array, at: number, scale: Float32Array, min: Float32Array): void {
  const d = f16(b, at);
  const dmin = f16(b, at + 2);
  for (let sub = 0; sub < 8; sub++) {
    scale[sub] = Math.fround(d * scaleK4(sub, b, at + 4));
    min[sub] = -Math.fround(dmin * minK4(sub, b, at + 4));
  }
}

/** The integer a format's u is offset by: w = scale·(u − zero) + min. */
const ZERO_OF: Record<QuantTypeName, number> = { Q8_0: 128, Q4_0: 8, Q4_1: 0, Q4_K: 0, Q5_K: 0, Q6_K: 32 };

/** ggml's dequantize_row_* over `rows` rows of `cols` values, in float32 as ggml rounds. */
export function dequantizeRows(type: QuantTypeName, src: Uint8Array, rows: number, cols: number): Float32Array {
  const { values, bytes } = BLOCKS[type];
  const form = EXACT_FORMS[type];
  const out = new Float32Array(rows * cols);
  const u = new Uint8Array(values);
  const scale = new Float32Array(values / form.block);
  const min = new Float32Array(values / 32);
  const zero = ZERO_OF[type];
  for (let blk = 0; blk < (rows * cols) / values; blk++) {
    decodeBlock(type, src, blk * bytes, u, scale, min);
    for (let i = 0; i < values; i++) {
      const s = scale[Math.floor(i / form.block)]!;
      // Q4_1 adds its min; the K-quants subtract dmin·m (min holds it negated); ggml rounds
      // the scaled integer first (Q6_K: (d·sc)·q), then adds.
      const scaled = Math.fround(s * (u[i]! - zero));
      out[blk * values + i] = form.mins ? Math.fround(scaled + min[Math.floor(i / 32)]!) : scaled;
    }
  }
  return out;
}

/** Q4_K's nibbles of one block, four bytes at a time: chunk c's 32 bytes (words from `w0`)
 * hold sub-block 2c (low nibbles) and 2c+1 (high), and each output byte packs two
 * neighbouring values, so four input bytes make two output bytes of each (16-bit `o0`). */
function q4kNibbles(words: Uint32Array, w0: number, lo16: Uint16Array, o0: number): void {
  for (let c = 0; c < 4; c++)
    for (let l = 0; l < 8; l++) {
      const w = words[w0 + 8 * c + l]!;
      const low = w & 0x0f0f0f0f;
      const high = (w >>> 4) & 0x0f0f0f0f;
      const a = low | (low >>> 4);
      const b = high | (high >>> 4);
      lo16[o0 + 16 * c + l] = (a & 0xff) | ((a >>> 8) & 0xff00);
      lo16[o0 + 16 * c + 8 + l] = (b & 0xff) | ((b >>> 8) & 0xff00);
    }
}

/**
 * `rows` rows of a tensor of `type` as its form's parts (formParts), each row-major. Scales
 * and mins are checked finite: a NaN or infinite f16 scale names nothing here, so the caller
 * names the tensor (`nonFinite`: the first such row).
 */
export function repackRows(
  type: QuantTypeName,
  src: Uint8Array,
  rows: number,
  cols: number,
  wide = false,
): { parts: Partial<Record<RepackPart, Uint8Array>>; nonFinite?: number } {
  const { values, bytes } = BLOCKS[type];
  const form = EXACT_FORMS[type];
  const parts: Partial<Record<RepackPart, Uint8Array>> = {};
  for (const p of formParts(form, wide)) parts[p] = new Uint8Array(rows * partRowBytes(form, p, cols));
  const { lo, hi, wide: whole } = parts;
  const scales = new Float32Array(parts.scales!.buffer);
  const mins = parts.mins && new Float32Array(parts.mins.buffer);
  parts.loZeros?.fill(form.loZero * 17);
  parts.hiZeros?.fill(form.hiZero * 17);
  parts.wideZeros?.fill(ZERO_OF[type]);
  const u = new Uint8Array(values);
  const scale = new Float32Array(values / form.block);
  const min = new Float32Array(values / 32);
  const blocksPerRow = cols / values;
  let nonFinite: number | undefined;
  // Q4_K's nibbles four bytes at a time where the rows allow 32-bit reads (little-endian, as
  // the files): 395 → 602 M values/s on one thread here (the bytes' path below: the same bits).
  const words =
    lo && type === 'Q4_K' && src.byteOffset % 4 === 0 ? new Uint32Array(src.buffer, src.byteOffset, src.byteLength >> 2) : undefined;
  const lo16 = words ? new Uint16Array(lo!.buffer, lo!.byteOffset, lo!.byteLength >> 1) : undefined;
  for (let blk = 0; blk < rows * blocksPerRow; blk++) {
    const v0 = blk * values;
    if (words) {
      k4ScalesMins(src, blk * bytes, scale, min);
      q4kNibbles(words, (blk * bytes + 16) >> 2, lo16!, (v0 >> 1) >> 1);
    } else if (lo && type === 'Q4_K') {
      // The nibbles straight from the block's bytes (most of a Q4_K_M file): chunk c's 32
      // bytes hold sub-block 2c low, 2c+1 high. Measured: 78 → 200 M values/s (Q6_K below: 54 → 130).
      k4ScalesMins(src, blk * bytes, scale, min);
      const qs = blk * bytes + 16;
      const out = v0 >> 1;
      for (let c = 0; c < 4; c++)
        for (let l = 0; l < 32; l += 2) {
          const a = src[qs + 32 * c + l]!;
          const b = src[qs + 32 * c + l + 1]!;
          lo[out + 32 * c + (l >> 1)] = (a & 15) | ((b & 15) << 4);
          lo[out + 32 * c + 16 + (l >> 1)] = (a >> 4) | (b & 0xf0);
        }
    } else if (lo && type === 'Q6_K') {
      // Likewise: each half's four runs of 32 values are ql's low or high nibbles (lo) and
      // a 2-bit field of qh (hi).
      const at = blk * bytes;
      const d = f16(src, at + 208);
      for (let j = 0; j < 16; j++) scale[j] = Math.fround(d * ((src[at + 192 + j]! << 24) >> 24));
      const out = v0 >> 1;
      for (let half = 0; half < 2; half++) {
        const ql = at + 64 * half;
        const qh = at + 128 + 32 * half;
        const y = out + 64 * half;
        for (let l = 0; l < 32; l += 2) {
          const a = src[ql + l]!;
          const b = src[ql + l + 1]!;
          const c = src[ql + l + 32]!;
          const e = src[ql + l + 33]!;
          const h = src[qh + l]!;
          const k = src[qh + l + 1]!;
          const o = y + (l >> 1);
          lo[o] = (a & 15) | ((b & 15) << 4);
          lo[o + 16] = (c & 15) | ((e & 15) << 4);
          lo[o + 32] = (a >> 4) | (b & 0xf0);
          lo[o + 48] = (c >> 4) | (e & 0xf0);
          hi![o] = (h & 3) | ((k & 3) << 4);
          hi![o + 16] = ((h >> 2) & 3) | (((k >> 2) & 3) << 4);
          hi![o + 32] = ((h >> 4) & 3) | (((k >> 4) & 3) << 4);
          hi![o + 48] = ((h >> 6) & 3) | (((k >> 6) & 3) << 4);
        }
      }
    } else if (whole) {
      decodeBlock(type, src, blk * bytes, u, scale, min);
      whole.set(u, v0);
    } else {
      decodeBlock(type, src, blk * bytes, u, scale, min);
      for (let i = 0; i < values; i += 2) {
        lo![(v0 + i) >> 1] = (u[i]! & 15) | ((u[i + 1]! & 15) << 4);
        if (hi) hi[(v0 + i) >> 1] = (u[i]! >> 4) | ((u[i + 1]! >> 4) << 4);
      }
    }
    const s0 = v0 / form.block;
    for (let j = 0; j < scale.length; j++) {
      const s = scale[j]!;
      if (!Number.isFinite(s)) nonFinite ??= Math.floor(blk / blocksPerRow);
      scales[s0 + j] = s;
    }
    if (mins)
      for (let j = 0; j < min.length; j++) {
        if (!Number.isFinite(min[j]!)) nonFinite ??= Math.floor(blk / blocksPerRow);
        mins[v0 / 32 + j] = min[j]!;
      }
  }
  return { parts, ...(nonFinite !== undefined && { nonFinite }) };
}
