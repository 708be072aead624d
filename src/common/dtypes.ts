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
  uint8: onnx.TensorProto.DataType.UINT8,
  uint32: onnx.TensorProto.DataType.UINT32,
} as const;
export type DTypeName = keyof typeof ONNX_DTYPE;

/** Bytes of one element, by ONNX element type code (the 4-bit types count a byte). */
export const ONNX_ELEMENT_BYTES: Readonly<Record<number, number>> = {
  1: 4,
  2: 1,
  3: 1,
  4: 2,
  5: 2,
  6: 4,
  7: 8,
  9: 1,
  10: 2,
  11: 8,
  12: 4,
  13: 8,
  16: 2,
  21: 1,
  22: 1,
};

/** A code's name among the graphs' types (ONNX_DTYPE's), else `onnx:<code>`. */
export const dtypeNameOf = (code: number): string => Object.entries(ONNX_DTYPE).find(([, c]) => c === code)?.[0] ?? `onnx:${code}`;

/** The names ONNX itself uses (`/model/constants/INT64/…`), by code. */
export const ONNX_DTYPE_LABEL: Record<DTypeName, string> = {
  float32: 'FLOAT',
  float16: 'FLOAT16',
  bfloat16: 'BFLOAT16',
  int64: 'INT64',
  int32: 'INT32',
  bool: 'BOOL',
  uint8: 'UINT8',
  uint32: 'UINT32',
};

/** What matrix products run in; norms, softmax and log-softmax always run in float32. */
export const COMPUTE_DTYPES = ['float32', 'float16', 'bfloat16'] as const;
export type ComputeDType = (typeof COMPUTE_DTYPES)[number];

/** The dtype of past/present KV at the graph boundary: onnxruntime-node has no
 * bfloat16 tensors, so bf16 graphs exchange their cache as float32. */
export function kvDType(dtype: ComputeDType): 'float32' | 'float16' {
  return dtype === 'float16' ? 'float16' : 'float32';
}

// ---- 16-bit floats (the bit conversions live in floats.ts, which the viewer page imports) --

export { bf16ToF32, f16ToF32, f32ToBf16, f32ToF16 } from './floats.js';
import { f32ToF16 } from './floats.js';

/** float32 values as little-endian float16 bytes (raw attention answers in f16). */
export function toFloat16Bytes(values: Float32Array): Buffer {
  const out = Buffer.alloc(values.length * 2);
  for (let i = 0; i < values.length; i++) out.writeUInt16LE(f32ToF16(values[i]!), i * 2);
  return out;
}
