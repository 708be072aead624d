// A GGUF file as the decoder's weight source: each Hugging Face tensor the decoder asks
// for is a GGUF tensor (or one expert's slice of a stacked one) referenced in place, its
// dims reversed (ggml's ne = [in, out] is Hugging Face's [out, in]: the same bytes), with
// the rows llama.cpp's converter permuted for llama-type rotary put back by a row order
// (weights.ts). Quantized tensors are handed on as their ggml type and raw bytes (the
// graph derives its exact form from them at load: model/quantized.ts).
import { CheckpointError } from '../common/errors.js';
import type { DTypeName } from '../common/dtypes.js';
import { GGML_FLOAT_TYPES, GGML_TYPES, type GgufFile, type GgufTensorInfo } from './gguf.js';
import type { GgufModel, TensorRef } from './gguf-arch.js';
import type { TensorBytes } from './validate.js';
import type { StoredWeight } from './weights.js';

const FLOAT_DTYPES: Record<number, DTypeName> = { 0: 'float32', 1: 'float16', 30: 'bfloat16' };

export class GgufCheckpoint {
  /** The folder onnxruntime resolves `location` against: the file's real folder. */
  readonly weightsDir: string;
  /** Every Hugging Face tensor with its shape, for the config checks (config-checks.ts). */
  readonly tensors = new Map<string, { shape: number[]; file: string; name: string }>();

  constructor(
    readonly g: GgufFile,
    readonly model: GgufModel,
  ) {
    this.weightsDir = g.dir;
    for (const [name, ref] of model.names) {
      const t = g.tensors.get(ref.tensor)!;
      this.tensors.set(name, {
        shape: hfShape(t, ref),
        file: g.file,
        name: `${ref.tensor}${ref.expert ? ` [expert ${ref.expert.index}]` : ''} (${name})`,
      });
    }
  }

  has(name: string): boolean {
    return this.model.names.has(name);
  }

  /** The Hugging Face tensor `name` of `shape`, where its bytes lie and what to do to them. */
  get(name: string, expectedShape: number[]): StoredWeight {
    const ref = this.model.names.get(name);
    if (!ref) throw new CheckpointError(`${this.g.file}: no tensor holds ${name} (the model needs it)`);
    const t = this.g.tensors.get(ref.tensor)!;
    const shape = hfShape(t, ref);
    if (expectedShape.length !== shape.length || expectedShape.some((d, i) => d !== shape[i]))
      throw new CheckpointError(
        `${this.g.file}: tensor ${this.tensors.get(name)!.name} has shape [${shape}], config says [${expectedShape}]`,
      );
    const slice = ref.expert ? t.bytes / ref.expert.of : t.bytes;
    const layout = GGML_TYPES[t.type]!;
    return {
      dtype: FLOAT_DTYPES[t.type] ?? 'float32',
      shape,
      location: this.g.location,
      offset: t.offset + (ref.expert ? ref.expert.index * slice : 0),
      length: slice,
      label: this.tensors.get(name)!.name,
      file: this.g.file,
      ...(ref.permutedHeads !== undefined && { rowOrder: this.rowOrder(name, shape[0]!, ref.permutedHeads) }),
      ...(!GGML_FLOAT_TYPES.has(t.type) && {
        quantized: {
          ggmlType: t.type,
          typeName: layout.name,
          dims: ref.expert ? t.dims.slice(0, 2) : [...t.dims],
          blockValues: layout.block!,
          blockBytes: layout.bytes!,
        },
      }),
    };
  }

  /** llama.cpp's converter (LlamaModel.permute) stores each head's rows as rotary pairs side
   * by side: its row h·d + 2j + i is Hugging Face row h·d + i·d/2 + j (d the head's rows). */
  private rowOrder(name: string, rows: number, heads: number) {
    const d = rows / heads;
    if (!Number.isInteger(d) || d % 2 !== 0)
      throw new CheckpointError(
        `${this.g.file}: tensor ${this.tensors.get(name)!.name}: ${rows} rows do not split into ${heads} heads of rotary pairs`,
      );
    const order = new Array<number>(rows);
    for (let h = 0; h < heads; h++)
      for (let i = 0; i < 2; i++) for (let j = 0; j < d / 2; j++) order[h * d + i * (d / 2) + j] = h * d + 2 * j + i;
    return { key: `rope_pairs_${heads}x${d}`, order };
  }

  /** Every float tensor's bytes, for the scan for NaN and infinity (validate.ts). */
  scanList(): TensorBytes[] {
    return [...this.g.tensors.values()]
      .filter((t) => GGML_FLOAT_TYPES.has(t.type))
      .map((t) => ({
        name: t.name,
        dtype: FLOAT_DTYPES[t.type]!,
        dir: this.g.dir,
        location: this.g.location,
        offset: t.offset,
        length: t.bytes,
        file: this.g.file,
      }));
  }

  /** The stored dtypes of the float tensors (the device's dtype choice). */
  get dtypes(): Set<DTypeName> {
    return new Set([...this.g.tensors.values()].map((t) => FLOAT_DTYPES[t.type]).filter((d): d is DTypeName => d !== undefined));
  }
}

/** The Hugging Face shape of a GGUF tensor: its dims reversed (one expert's for a stacked one). */
function hfShape(t: GgufTensorInfo, ref: TensorRef): number[] {
  const dims = ref.expert ? t.dims.slice(0, 2) : t.dims;
  return [...dims].reverse();
}
