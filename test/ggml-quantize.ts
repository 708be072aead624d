// Quantizers for the tests: float rows as ggml blocks of each format, written from the
// formats' description (../shared/quant/README.md), never from the reader (src/checkpoint/
// ggml-blocks.ts), so a test that writes with these and reads with that checks the layout.
// Round to nearest with a scale from each block's range: not llama.cpp's search for the
// best scales, which only changes which values a file holds, not how they are read.
import { f16ToF32, f32ToF16 } from '../src/common/floats.js';
import { BLOCKS, type QuantTypeName } from '../src/checkpoint/ggml-blocks.js';

const clamp = (x: number, lo: number, hi: number) => Math.min(hi, Math.max(lo, x));
const half = (x: number) => f32ToF16(x);
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
  for (let b = 0; b < blocks; b++) QUANTIZE[type](data.subarray(b * values, (b + 1) * values), out, b * bytes);
  return out;
}

const QUANTIZE: Record<QuantTypeName, (x: Float32Array, out: Uint8Array, at: number) => void> = {
  Q8_0(x, out, at) {
    const h = half(Math.max(...x.map(Math.abs)) / 127);
    const d = f16ToF32(h);
    put16(out, at, h);
    for (let i = 0; i < 32; i++) out[at + 2 + i] = clamp(Math.round(d ? x[i]! / d : 0), -128, 127) & 255;
  },
  Q4_0(x, out, at) {
    const h = half(Math.max(...x.map(Math.abs)) / 7);
    const d = f16ToF32(h);
    put16(out, at, h);
    const q = (v: number) => clamp(Math.round(d ? v / d : 0) + 8, 0, 15);
    for (let j = 0; j < 16; j++) out[at + 2 + j] = q(x[j]!) | (q(x[j + 16]!) << 4);
  },
  Q4_1(x, out, at) {
    const [lo, hi] = [Math.min(...x), Math.max(...x)];
    const hd = half((hi - lo) / 15);
    const hm = half(lo);
    const [d, m] = [f16ToF32(hd), f16ToF32(hm)];
    put16(out, at, hd);
    put16(out, at + 2, hm);
    const q = (v: number) => clamp(Math.round(d ? (v - m) / d : 0), 0, 15);
    for (let j = 0; j < 16; j++) out[at + 4 + j] = q(x[j]!) | (q(x[j + 16]!) << 4);
  },
  Q4_K: (x, out, at) => quantizeK(x, out, at, 4),
  Q5_K: (x, out, at) => quantizeK(x, out, at, 5),
  Q6_K(x, out, at) {
    // 16 scales of 16 values (int8, times f16 d); 6-bit q in −32..31.
    const sub = Array.from({ length: 16 }, (_, j) => Math.max(...x.subarray(16 * j, 16 * j + 16).map(Math.abs)) / 31);
    const hd = half(Math.max(...sub) / 127);
    const d = f16ToF32(hd);
    const sc = sub.map((s) => clamp(Math.round(d ? s / d : 0), -128, 127));
    const q = Array.from(x, (v, i) => {
      const s = d * sc[i >> 4]!;
      return clamp(Math.round(s ? v / s : 0), -32, 31) + 32;
    });
    for (let hf = 0; hf < 2; hf++) {
      const ql = at + 64 * hf;
      const qh = at + 128 + 32 * hf;
      const y = 128 * hf;
      for (let l = 0; l < 32; l++) {
        const [a, b, c, e] = [q[y + l]!, q[y + l + 32]!, q[y + l + 64]!, q[y + l + 96]!];
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
function quantizeK(x: Float32Array, out: Uint8Array, at: number, bits: 4 | 5): void {
  const top = (1 << bits) - 1;
  const subs = Array.from({ length: 8 }, (_, j) => x.subarray(32 * j, 32 * j + 32));
  const mins = subs.map((s) => Math.max(0, -Math.min(...s)));
  const scales = subs.map((s, j) => (Math.max(...s) + mins[j]!) / top);
  const hd = half(Math.max(...scales) / 63);
  const hm = half(Math.max(...mins) / 63);
  const [d, dmin] = [f16ToF32(hd), f16ToF32(hm)];
  const sc = scales.map((s) => clamp(Math.round(d ? s / d : 0), 0, 63));
  const m = mins.map((v) => clamp(Math.round(dmin ? v / dmin : 0), 0, 63));
  put16(out, at, hd);
  put16(out, at + 2, hm);
  const s = at + 4;
  for (let j = 0; j < 4; j++) {
    out[s + j] = (sc[j]! & 63) | ((sc[j + 4]! >> 4) << 6);
    out[s + j + 4] = (m[j]! & 63) | ((m[j + 4]! >> 4) << 6);
    out[s + j + 8] = (sc[j + 4]! & 15) | ((m[j + 4]! & 15) << 4);
  }
  const q = Array.from(x, (v, i) => {
    const j = i >> 5;
    const step = d * sc[j]!;
    return clamp(Math.round(step ? (v + dmin * m[j]!) / step : 0), 0, top);
  });
  const qh = at + 16;
  const qs = bits === 4 ? at + 16 : at + 48;
  for (let c = 0; c < 4; c++)
    for (let l = 0; l < 32; l++) {
      const [a, b] = [q[64 * c + l]!, q[64 * c + 32 + l]!];
      out[qs + 32 * c + l] = (a & 15) | ((b & 15) << 4);
      if (bits === 5) out[qh + l] = out[qh + l]! | ((a >> 4) << (2 * c)) | ((b >> 4) << (2 * c + 1));
    }
}
