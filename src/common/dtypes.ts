// One home for element types: their names, ONNX codes, what the KV cache crosses the
// graph boundary as, and the 16-bit float conversions (checkpoint writing, f16 answers).
import onnxProto from 'onnx-proto';

const { onnx } = onnxProto;

/** ONNX TensorProto element type codes of the types the graphs use. */
export const ONNX_DTYPE = {
  float32: onnx.TensorProto.DataType.FLOAT,
  float16: onnx.TensorProto.DataType.FLOAT16,
  bfloat16: onnx.TensorProto.DataType.BFLOAT16,
  int64: onnx.TensorProto.DataType.INT64,
  int32: onnx.TensorProto.DataType.INT32,
  bool: onnx.TensorProto.DataType.BOOL,
} as const;
export type DTypeName = keyof typeof ONNX_DTYPE;

/** The names ONNX itself uses (`/model/constants/INT64/…`), by code. */
export const ONNX_DTYPE_LABEL: Record<DTypeName, string> = {
  float32: 'FLOAT',
  float16: 'FLOAT16',
  bfloat16: 'BFLOAT16',
  int64: 'INT64',
  int32: 'INT32',
  bool: 'BOOL',
};

/** What matrix products run in; norms, softmax and log-softmax always run in float32. */
export type ComputeDType = 'float32' | 'float16' | 'bfloat16';

/** The dtype of past/present KV at the graph boundary: onnxruntime-node has no
 * bfloat16 tensors, so bf16 graphs exchange their cache as float32. */
export function kvDType(dtype: ComputeDType): 'float32' | 'float16' {
  return dtype === 'float16' ? 'float16' : 'float32';
}

// ---- 16-bit floats --------------------------------------------------------------------

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

/** float32 values as little-endian float16 bytes (raw attention answers in f16). */
export function toFloat16Bytes(values: Float32Array): Buffer {
  const out = Buffer.alloc(values.length * 2);
  for (let i = 0; i < values.length; i++) out.writeUInt16LE(f32ToF16(values[i]!), i * 2);
  return out;
}
