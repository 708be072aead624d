// Float rows as ggml blocks of each format (`--quantize` at load, and the tests' GGUF files),
// written from the formats' description (../shared/quant/README.md), not from the reader
// (ggml-blocks.ts), so a test that writes with these and reads with that checks the layout.
// Round to nearest with a scale from each block's range: not llama.cpp's search for the
// best scales (its files are closer to the float weights), which changes which values a
// file holds, not how they are read: `--quantize` is approximate, and says so.
import { f16Values, f32ToF16 } from '../common/floats.js';
import { BLOCKS, type QuantTypeName } from './ggml-blocks.js';

/** Math.min(hi, Math.max(lo, x)), NaN kept, as comparisons V8 keeps inline. */
const clamp = (x: number, lo: number, hi: number) => (x < lo ? lo : x > hi ? hi : x);
const half = (x: number) => f32ToF16(x);
/** A block's scale read back from the table of every float16. */
const F16 = f16Values();
const f16ToF32 = (h: number) => F16[h]!;
const put16 = (out: Uint8Array, at: number, h: number) => {
  out[at] = h & 255;
  out[at + 1] = h >> 8;
};

/** `rows` rows of `cols` values as blocks of `type` (cols a multiple of its block). */
export function quantizeRows(type: QuantTypeName, data: Float32Array, rows: number, cols: number): Uint8Array {
  const { values, bytes } = BLOCKS[type];
  if (cols % values !== 0) throw new Error(`${type}: ${cols} columns are not whole blocks of ${values}`);
  const blocks = (rows * cols) / values;
  const out = new Uint8Array(blocks * bytes);
  // Each block read at its offset in `data`: a subarray a block cost as much as the block.
  const quantize = QUANTIZE[type];
  for (let b = 0; b < blocks; b++) quantize(data, b * values, out, b * bytes);
  return out;
}

/** The largest |x|, the least and the largest x of x[from, to), in `seen` (0, 1, 2): a
 * block's scratch, not an object a block (quantizing at load runs this per 16 or 32 values). */
const seen = new Float64Array(3);
function range(x: Float32Array, from: number, to: number): Float64Array {
  let amax = 0;
  let min = Infinity;
  let max = -Infinity;
  for (let i = from; i < to; i++) {
    const v = x[i]!;
    const a = Math.abs(v);
    if (a > amax) amax = a;
    if (v < min) min = v;
    if (v > max) max = v;
  }
  seen[0] = amax;
  seen[1] = min;
  seen[2] = max;
  return seen;
}

// Scratch of one block, reused (each thread has its own module).
const SUB16 = new Float32Array(16);
const SC16 = new Int8Array(16);
const Q256 = new Uint8Array(256);
const MINS8 = new Float32Array(8);
const SCALES8 = new Float32Array(8);
const SC8 = new Uint8Array(8);
const M8 = new Uint8Array(8);

const QUANTIZE: Record<QuantTypeName, (x: Float32Array, o: number, out: Uint8Array, at: number) => void> = {
  Q8_0(x, o, out, at) {
    const h = half(range(x, o, o + 32)[0]! / 127);
    const d = f16ToF32(h);
    put16(out, at, h);
    if (!d) out.fill(0, at + 2, at + 34);
    else for (let i = 0; i < 32; i++) out[at + 2 + i] = clamp(Math.round(x[o + i]! / d), -128, 127) & 255;
  },
  Q4_0(x, o, out, at) {
    const h = half(range(x, o, o + 32)[0]! / 7);
    const d = f16ToF32(h);
    put16(out, at, h);
    const q = (v: number) => clamp(Math.round(d ? v / d : 0) + 8, 0, 15);
    for (let j = 0; j < 16; j++) out[at + 2 + j] = q(x[o + j]!) | (q(x[o + j + 16]!) << 4);
  },
  Q4_1(x, o, out, at) {
    const r = range(x, o, o + 32);
    const [lo, hi] = [r[1]!, r[2]!];
    const hd = half((hi - lo) / 15);
    const hm = half(lo);
    const [d, m] = [f16ToF32(hd), f16ToF32(hm)];
    put16(out, at, hd);
    put16(out, at + 2, hm);
    const q = (v: number) => clamp(Math.round(d ? (v - m) / d : 0), 0, 15);
    for (let j = 0; j < 16; j++) out[at + 4 + j] = q(x[o + j]!) | (q(x[o + j + 16]!) << 4);
  },
  Q4_K: (x, o, out, at) => quantizeK(x, o, out, at, 4),
  Q5_K: (x, o, out, at) => quantizeK(x, o, out, at, 5),
  Q6_K(x, o, out, at) {
    // 16 scales of 16 values (int8, times f16 d); 6-bit q in −32..31.
    const sub = SUB16;
    let top = 0;
    for (let j = 0; j < 16; j++) {
      sub[j] = range(x, o + 16 * j, o + 16 * j + 16)[0]! / 31;
      top = Math.max(top, sub[j]!);
    }
    const hd = half(top / 127);
    const d = f16ToF32(hd);
    const sc = SC16;
    for (let j = 0; j < 16; j++) sc[j] = clamp(Math.round(d ? sub[j]! / d : 0), -128, 127);
    const q = Q256;
    for (let i = 0; i < 256; i++) {
      const s = d * sc[i >> 4]!;
      q[i] = clamp(Math.round(s ? x[o + i]! / s : 0), -32, 31) + 32;
    }
    for (let hf = 0; hf < 2; hf++) {
      const ql = at + 64 * hf;
      const qh = at + 128 + 32 * hf;
      const y = 128 * hf;
      for (let l = 0; l < 32; l++) {
        const a = q[y + l]!;
        const b = q[y + l + 32]!;
        const c = q[y + l + 64]!;
        const e = q[y + l + 96]!;
        out[ql + l] = (a & 15) | ((c & 15) << 4);
        out[ql + l + 32] = (b & 15) | ((e & 15) << 4);
        out[qh + l] = (a >> 4) | ((b >> 4) << 2) | ((c >> 4) << 4) | ((e >> 4) << 6);
      }
    }
    for (let j = 0; j < 16; j++) out[at + 192 + j] = sc[j]! & 255;
    put16(out, at + 208, hd);
  },
};

// Q4_K / Q5_K: 8 sub-blocks of 32, each with a 6-bit scale and min (times f16 d and dmin);
// w = d·sc·q − dmin·m with q of `bits` bits.
function quantizeK(x: Float32Array, o: number, out: Uint8Array, at: number, bits: 4 | 5): void {
  const top = (1 << bits) - 1;
  const mins = MINS8;
  const scales = SCALES8;
  let [maxScale, maxMin] = [0, 0];
  for (let j = 0; j < 8; j++) {
    const r = range(x, o + 32 * j, o + 32 * j + 32);
    mins[j] = Math.max(0, -r[1]!);
    scales[j] = (r[2]! + mins[j]!) / top;
    maxScale = Math.max(maxScale, scales[j]!);
    maxMin = Math.max(maxMin, mins[j]!);
  }
  const hd = half(maxScale / 63);
  const hm = half(maxMin / 63);
  const [d, dmin] = [f16ToF32(hd), f16ToF32(hm)];
  const sc = SC8;
  const m = M8;
  for (let j = 0; j < 8; j++) {
    sc[j] = clamp(Math.round(d ? scales[j]! / d : 0), 0, 63);
    m[j] = clamp(Math.round(dmin ? mins[j]! / dmin : 0), 0, 63);
  }
  put16(out, at, hd);
  put16(out, at + 2, hm);
  const s = at + 4;
  for (let j = 0; j < 4; j++) {
    out[s + j] = (sc[j]! & 63) | ((sc[j + 4]! >> 4) << 6);
    out[s + j + 4] = (m[j]! & 63) | ((m[j + 4]! >> 4) << 6);
    out[s + j + 8] = (sc[j + 4]! & 15) | ((m[j + 4]! & 15) << 4);
  }
  const q = Q256;
  for (let j = 0; j < 8; j++) {
    const step = d * sc[j]!;
    const shift = dmin * m[j]!;
    for (let i = 32 * j; i < 32 * j + 32; i++) q[i] = step ? clamp(Math.round((x[o + i]! + shift) / step), 0, top) : 0;
  }
  const qh = at + 16;
  const qs = bits === 4 ? at + 16 : at + 48;
  if (bits === 5) out.fill(0, qh, qh + 32);
  for (let c = 0; c < 4; c++)
    for (let l = 0; l < 32; l++) {
      const a = q[64 * c + l]!;
      const b = q[64 * c + 32 + l]!;
      out[qs + 32 * c + l] = (a & 15) | ((b & 15) << 4);
      if (bits === 5) out[qh + l] = out[qh + l]! | ((a >> 4) << (2 * c)) | ((b >> 4) << (2 * c + 1));
    }
}
