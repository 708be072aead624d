// A GPTQ / AWQ safetensors checkpoint as the decoder's weight source: each quantized linear's
// `P.qweight`, `P.qzeros`, `P.scales` (and GPTQ's `P.g_idx`) handed on as the one weight
// `P.weight` [N, K] the decoder asks for, quantized (its parts are made at load from the three
// tensors: hf-quantized.ts); every other tensor as the checkpoint stores it.
import { CheckpointError } from '../common/errors.js';
import type { DTypeName } from '../common/dtypes.js';
import { formParts, partRowBytes } from './ggml-blocks.js';
import { actOrder, blockOfGroup, hfForm, type HfQuantConfig, type HfQuantized } from './hf-quantized.js';
import type { SafetensorsCheckpoint, StoredTensor } from './safetensors.js';
import type { TensorBytes } from './validate.js';
import type { StoredWeight } from './weights.js';

const FLOATS = new Set<DTypeName>(['float32', 'float16', 'bfloat16']);
const PACKED = ['qweight', 'qzeros', 'scales', 'g_idx'] as const;

interface Linear {
  prefix: string;
  N: number;
  K: number;
  hf: HfQuantized;
  qweight: StoredTensor;
}

export class HfQuantizedCheckpoint {
  readonly weightsDir: string;
  /** Every tensor the decoder may ask for, with its shape, for the config checks. */
  readonly tensors = new Map<string, { shape: number[]; file: string; name?: string }>();
  private readonly linears = new Map<string, Linear>();

  constructor(
    readonly ckpt: SafetensorsCheckpoint,
    readonly q: HfQuantConfig,
  ) {
    this.weightsDir = ckpt.weightsDir;
    for (const [name, t] of ckpt.tensors) if (!name.endsWith('.qweight')) this.tensors.set(name, t);
    for (const name of ckpt.tensors.keys()) {
      if (!name.endsWith('.qweight')) continue;
      const linear = this.linear(name.slice(0, -'.qweight'.length));
      this.linears.set(`${linear.prefix}.weight`, linear);
      for (const p of PACKED) this.tensors.delete(`${linear.prefix}.${p}`);
      this.tensors.set(`${linear.prefix}.weight`, { shape: [linear.N, linear.K], file: linear.qweight.file, name: `${name} (${linear.prefix}.weight)` });
    }
    if (this.linears.size === 0) throw new CheckpointError(`${ckpt.dir}: config.json has a quantization_config (${q.label}) but no tensor is a .qweight`);
  }

  /** One quantized linear's tensors, checked against each other and the config. */
  private linear(prefix: string): Linear {
    const get = (part: string) => this.ckpt.get(`${prefix}.${part}`);
    const qweight = get('qweight');
    const bad = (what: string) => new CheckpointError(`${qweight.file}: ${prefix}: ${what}`);
    const [qz, scales] = [get('qzeros'), get('scales')];
    for (const [t, part] of [[qweight, 'qweight'], [qz, 'qzeros']] as const)
      if (t.dtype !== 'int32' || t.shape.length !== 2) throw bad(`${part} is [${t.shape}] ${t.dtype}, where ${this.q.method.toUpperCase()} packs int32 words in a matrix`);
    if (scales.dtype !== 'float16' || scales.shape.length !== 2) throw bad(`scales is [${scales.shape}] ${scales.dtype}, where float16 [groups, out] was expected`);
    const [rows, cols] = qweight.shape as [number, number];
    const [K, N] = this.q.method === 'gptq' ? [rows * 8, cols] : [rows, cols * 8];
    const group = this.q.group ?? K;
    if (K % group !== 0) throw bad(`${K} input columns do not split into groups of quantization_config.group_size ${group}`);
    if (N % 8 !== 0) throw bad(`${N} output rows are not whole words of 8 zero points`);
    const same = (t: StoredTensor, shape: number[]) => t.shape.length === 2 && t.shape[0] === shape[0] && t.shape[1] === shape[1];
    if (!same(qz, [K / group, N / 8])) throw bad(`qzeros is [${qz.shape}], where qweight [${qweight.shape}] and group ${group} make [${K / group}, ${N / 8}]`);
    if (!same(scales, [K / group, N])) throw bad(`scales is [${scales.shape}], where qweight [${qweight.shape}] and group ${group} make [${K / group}, ${N}]`);
    if (qz.location !== qweight.location || scales.location !== qweight.location) throw bad('qweight, qzeros and scales lie in different files');
    const hf: HfQuantized = {
      method: this.q.method,
      group,
      block: blockOfGroup(group),
      v1Zeros: this.q.v1Zeros,
      qzeros: { offset: qz.offset, length: qz.length },
      scales: { offset: scales.offset, length: scales.length },
    };
    // Act-order groups a weight's columns as its g_idx says: without one, no order can be taken for it.
    if (this.q.actOrder && !this.ckpt.has(`${prefix}.g_idx`))
      throw bad('quantization_config.desc_act is true (act-order) but there is no g_idx saying which group each input column is in');
    if (this.q.method === 'gptq' && this.ckpt.has(`${prefix}.g_idx`)) {
      const g = get('g_idx');
      if (g.dtype !== 'int32' || g.shape.length !== 1 || g.shape[0] !== K) throw bad(`g_idx is [${g.shape}] ${g.dtype}, where int32 [${K}] was expected`);
      const bytes = this.ckpt.readBytes(`${prefix}.g_idx`);
      const order = actOrder(new Int32Array(bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.length)), group, `${g.file}: ${prefix}`);
      if (order) hf.order = order;
    }
    return { prefix, N, K, hf, qweight };
  }

  has(name: string): boolean {
    return this.linears.has(name) || this.ckpt.has(name);
  }

  get(name: string, expectedShape: number[]): StoredWeight {
    const l = this.linears.get(name);
    if (!l) return this.ckpt.get(name, expectedShape);
    if (expectedShape.length !== 2 || expectedShape[0] !== l.N || expectedShape[1] !== l.K)
      throw new CheckpointError(`${l.qweight.file}: tensor ${l.prefix}.qweight holds a [${l.N}, ${l.K}] weight, config says [${expectedShape}]`);
    const { location, offset, length } = l.qweight;
    return {
      dtype: 'float32',
      shape: [l.N, l.K],
      location,
      offset,
      length,
      label: `${l.prefix}.qweight`,
      quantized: { ggmlType: -1, typeName: this.q.method.toUpperCase(), dims: [l.K, l.N], blockValues: l.hf.block, blockBytes: l.hf.block / 2, hf: l.hf },
    };
  }

  /** The float tensors (the scales among them) for the scan for NaN and infinity. */
  scanList(): TensorBytes[] {
    return [...this.ckpt.tensors].filter(([, t]) => FLOATS.has(t.dtype)).map(([name, t]) => ({ name, ...t }));
  }

  /** Every tensor as the memory plan counts it: a quantized linear as its parts' bytes. */
  stored(): { dtype: DTypeName | 'quantized'; shape: number[]; bytes?: number }[] {
    const packed = new Set([...this.linears.values()].flatMap((l) => PACKED.map((p) => `${l.prefix}.${p}`)));
    const floats = [...this.ckpt.tensors].filter(([name]) => !packed.has(name)).map(([, t]) => ({ dtype: t.dtype, shape: t.shape }));
    const form = (l: Linear) => hfForm(l.hf);
    const quantized = [...this.linears.values()].map((l) => ({
      dtype: 'quantized' as const,
      shape: [l.N, l.K],
      bytes: formParts(form(l)).reduce((n, p) => n + l.N * partRowBytes(form(l), p, l.K), 0),
    }));
    return [...floats, ...quantized];
  }

  /** How the weights are stored, in words. */
  get storage(): string {
    const floats = new Set([...this.tensors.keys()].filter((n) => !this.linears.has(n)).map((n) => this.ckpt.get(n).dtype));
    return `${this.q.label} checkpoint: ${this.linears.size} linear layers quantized, the rest ${[...floats].join('/')}`;
  }
}
