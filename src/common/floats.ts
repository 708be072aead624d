// 16-bit float bit conversions (bfloat16, IEEE float16), free of Node and of any import:
// the checkpoint reader and writer, float16 answers, and the viewer page (raw attention
// slices in float16) share them.

const f32 = new Float32Array(1);
const u32 = new Uint32Array(f32.buffer);

export function bf16ToF32(bits: number): number {
  u32[0] = bits << 16;
  return f32[0]!;
}

/** float32 → bfloat16 bits, round to nearest even (as torch does). */
export function f32ToBf16(value: number): number {
  f32[0] = value;
  const x = u32[0]!;
  if ((x & 0x7fffffff) > 0x7f800000) return 0x7fc0; // NaN
  return ((x + 0x7fff + ((x >>> 16) & 1)) >>> 16) & 0xffff;
}

export function f16ToF32(h: number): number {
  const sign = h & 0x8000 ? -1 : 1;
  const exp = (h >> 10) & 0x1f;
  const frac = h & 0x3ff;
  if (exp === 0) return sign * 2 ** -14 * (frac / 1024);
  if (exp === 31) return frac ? NaN : sign * Infinity;
  return sign * 2 ** (exp - 15) * (1 + frac / 1024);
}

/** float32 → float16 bits, round to nearest even. */
export function f32ToF16(value: number): number {
  f32[0] = value;
  const x = u32[0]!;
  const sign = (x >>> 16) & 0x8000;
  const exp = (x >>> 23) & 0xff;
  let mant = x & 0x7fffff;
  if (exp === 0xff) return sign | 0x7c00 | (mant ? 0x200 : 0);
  let e = exp - 127 + 15;
  if (e >= 0x1f) return sign | 0x7c00;
  if (e <= 0) {
    if (e < -10) return sign;
    mant |= 0x800000;
    const shift = 14 - e;
    let half = mant >>> shift;
    const rest = mant & ((1 << shift) - 1);
    const mid = 1 << (shift - 1);
    if (rest > mid || (rest === mid && half & 1)) half++;
    return sign | half;
  }
  let half = (e << 10) | (mant >>> 13);
  const rest = mant & 0x1fff;
  if (rest > 0x1000 || (rest === 0x1000 && half & 1)) half++;
  return sign | half;
}

let f16Table: Float32Array | undefined;

/** Every float16 bit pattern's value (256 KiB, made on first use): f16ToF32 at table speed
 * (its powers cost as much as a quantized block's values). */
export function f16Values(): Float32Array {
  if (!f16Table) {
    f16Table = new Float32Array(65536);
    for (let h = 0; h < 65536; h++) f16Table[h] = f16ToF32(h);
  }
  return f16Table;
}

/** 16-bit floats (bfloat16 or IEEE float16 bits) as float32 values, the same as
 * bf16ToF32 / f16ToF32 a value at a time: bfloat16 by a shift of its bits, float16 from
 * f16Values. A value at a time through a callback ran at 6 M values/s, most of `--quantize`'s
 * load. */
export function widenHalves(halves: Uint16Array, dtype: 'bfloat16' | 'float16'): Float32Array {
  const out = new Float32Array(halves.length);
  if (dtype === 'bfloat16') {
    const bits = new Uint32Array(out.buffer);
    for (let i = 0; i < halves.length; i++) bits[i] = halves[i]! << 16;
    return out;
  }
  const table = f16Values();
  for (let i = 0; i < halves.length; i++) out[i] = table[halves[i]!]!;
  return out;
}
