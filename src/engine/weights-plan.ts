// How a model's weights will lie, decided before anything is built: the memory plan on its
// device (memory.ts) with what was asked of the weights (--weights-at-rest, --quantize,
// --quantized-activations) checked against what the checkpoint holds, and the words the
// load log gives it; then the weight plan, as plain data — each weight's stored type and
// shape, its form at rest, its bytes at rest and while its product runs, where it lives —
// read off the graph the load builds, without making a session: `ctxprobe plan` shows it
// before anything is loaded, and the load log sums it in one line. Every weight a session
// reads is one of the graph's external initializers, and the held copy
// (graph/held-weights.ts) says which it copies or derives.
import onnxProto from 'onnx-proto';
import type { ModelConfig } from '../model/families.js';
import { buildDecoderGraph, type DecoderGraph } from '../model/decoder.js';
import { openCheckpoint } from './checkpoint.js';
import { resolveDevice, type DeviceOptions, type ResolvedDevice } from './device.js';
import { heldWeightsPath } from '../checkpoint/weight-files.js';
import { GGML_TYPES } from '../checkpoint/gguf.js';
import type { CheckpointLinks } from '../checkpoint/files.js';
import type { OpenedCheckpoint } from './checkpoint.js';
import { memoryRefusal, passLimits, planMemory, prepackedForInt8, quantizedAtLoad, type MemoryPlan, type PassLimits } from './memory.js';
import type { WeightsAtRest } from '../model/ops.js';
import type { QuantizeAtLoad, QuantizedActivations } from '../model/quantized.js';
import { onlySoftwareVulkan } from './adapter.js';
import { DeviceError, InvalidArgumentError } from '../common/errors.js';
import { ONNX_ELEMENT_BYTES, dtypeNameOf } from '../common/dtypes.js';

/** What a load asks of the weights (EngineOptions has them): the scorer's passes, for the
 * plan; how narrow weights lie; quantized products' activations; quantize-at-load. */
export interface WeightOptions {
  passLimits?: Partial<PassLimits>;
  weightsAtRest?: WeightsAtRest;
  /** Quantized products on float32 activations (default: exact) or int8 ones (quantized.ts). */
  quantizedActivations?: QuantizedActivations;
  /** Float matrices quantized at load (`--quantize`: approximate), then computed exactly. */
  quantize?: QuantizeAtLoad;
}

/** The memory plan of a model on its device: how its weights lie at rest, and where the
 * host's memory holds them (the CPU) a refusal of a model that cannot fit; on WebGPU the
 * host's memory only picks how they lie (onnxruntime-node cannot tell a GPU's); on CUDA
 * widened at load. */
export function weightsPlan(config: ModelConfig, opened: OpenedCheckpoint, device: ResolvedDevice, options: WeightOptions): MemoryPlan {
  const limits = passLimits(device.profile, device.bufferCache, options.passLimits);
  if (options.weightsAtRest && !device.profile.weightsAsStored)
    throw new DeviceError(`weightsAtRest (--weights-at-rest) is a setting of devices cpu and webgpu, not ${device.kind}`);
  const narrow = opened.stored.some((t) => (t.dtype === 'bfloat16' || t.dtype === 'float16') && t.dtype !== device.dtype);
  if (options.weightsAtRest === 'stored' && !narrow)
    throw new InvalidArgumentError(
      'weightsAtRest',
      `stored: ${opened.name} has no weights narrower than its compute dtype (${device.dtype}) to keep as stored`,
    );
  if (!device.profile.weightsAsStored) {
    return { atRest: 'compute', weights: 0, working: 0, need: 0, reason: `as the ${device.profile.label} graph computes them` };
  }
  const int8 = options.quantizedActivations === 'int8' && device.profile.weightsInHostMemory;
  // A forced way (weightsAtRest) is planned and refused like the chosen one.
  const plan = planMemory(
    config,
    int8 ? prepackedForInt8(opened.stored) : opened.stored,
    device.dtype,
    limits,
    undefined,
    options.weightsAtRest,
  );
  // On WebGPU with only lavapipe to answer, the device's memory is the host's: refused alike.
  const hostMemory = device.profile.weightsInHostMemory || (device.profile.adapter === 'vulkan' && onlySoftwareVulkan());
  if (!plan.fits && hostMemory) throw new DeviceError(memoryRefusal(opened.name, plan, limits));
  return plan;
}

/** What was asked of quantized weights, against what the checkpoint holds: `--quantize`
 * needs float matrices (the memory plan then counts them quantized), int8 activations
 * quantized ones. */
export function checkQuantizedOptions(opened: OpenedCheckpoint, options: WeightOptions): void {
  if (options.quantize) {
    if (!opened.stored.some((t) => t.dtype !== 'quantized' && t.shape.length === 2))
      throw new InvalidArgumentError(
        'quantize',
        `${options.quantize}: ${opened.name} has no float matrices to quantize (its matrices are quantized already: ${opened.storage})`,
      );
    opened.stored = quantizedAtLoad(opened.stored, options.quantize);
  }
  if (options.quantizedActivations === 'int8' && !opened.stored.some((t) => t.dtype === 'quantized'))
    throw new InvalidArgumentError(
      'quantizedActivations',
      `int8: ${opened.name} has no quantized weights (it names how a GGUF file's quantized products run)`,
    );
}

/** The load log's and ListModels' words for how the weights lie, and what was asked of them. */
export function weightsInfo(opened: OpenedCheckpoint, plan: MemoryPlan, options: WeightOptions): string {
  return (
    `${opened.storage}; ${plan.reason}` +
    (options.quantize ? `; its float matrices quantized at load to ${options.quantize} (approximate)` : '') +
    (options.quantizedActivations === 'int8' ? '; quantized products on int8 activations (approximate)' : '')
  );
}

/** `needs 9.0 GiB of 22.7 GiB available` (or of what the host has, where that is unknown). */
export function memoryNeed(p: MemoryPlan): string {
  const gib = (b: number) => `${(b / 2 ** 30).toFixed(1)} GiB`;
  return `needs ${gib(p.need)} of ${p.available === undefined ? 'an unknown amount' : `${gib(p.available)}`} available`;
}

const { onnx } = onnxProto;

/** One weight (or one part of a quantized one) as it will lie. */
export interface TensorPlan {
  /** The initializer: the checkpoint tensor's name, `.lo` / `.scales` … for a part. */
  name: string;
  /** Element type and shape as the session reads it. */
  stored: string;
  /** Its form at rest. */
  form: string;
  /** Bytes at rest, and more while its product runs (a matrix kept narrow, widened). */
  bytes: number;
  passBytes: number;
  /** Where: the private copy the session thread writes, onnxruntime's own copy of what it
   * reads from the checkpoint's file at load, or the device. */
  where: 'private copy' | "onnxruntime's copy" | 'device';
}

export interface WeightPlan {
  model: string;
  device: string;
  weights: string;
  /** The memory plan: how narrow weights lie, the weights' bytes as it counts them, the need. */
  memory: { atRest: string; weights: number; need: number; available?: number; reason: string; words: string };
  tensors: TensorPlan[];
  /** Bytes at rest of every tensor: what the memory plan counts as the weights. */
  bytes: number;
}

/** How each weight of `graph` lies, with the memory plan it was built by. */
export function weightPlanOf(graph: DecoderGraph, memory: MemoryPlan): TensorPlan[] {
  const held = new Map((graph.heldWeights?.pieces ?? []).map((p) => [p.at, p] as const));
  const models = [graph.model, ...(graph.uploads ?? []).map((u) => u.model)];
  const tensors: TensorPlan[] = [];
  models.forEach((bytes, k) => {
    const g = onnx.ModelProto.decode(bytes).graph!;
    for (const init of g.initializer ?? []) {
      if (init.dataLocation !== onnx.TensorProto.DataLocation.EXTERNAL) continue;
      const entry = (key: string) => (init.externalData ?? []).find((e) => e.key === key)?.value ?? '';
      const [dtype, width] = [dtypeNameOf(init.dataType!), ONNX_ELEMENT_BYTES[init.dataType!] ?? 1];
      const dims = (init.dims ?? []).map(Number);
      const n = dims.reduce((a, b) => a * b, 1);
      const piece =
        graph.heldWeights && entry('location').endsWith(graph.heldWeights.file.replace(/^\//, ''))
          ? held.get(Number(entry('offset')))
          : undefined;
      const where: TensorPlan['where'] = k > 0 ? 'device' : piece ? 'private copy' : "onnxruntime's copy";
      const stored = `${dtype} [${dims}]`;
      const narrow = dtype === 'bfloat16' || dtype === 'float16';
      if (piece?.derived) {
        const d = piece.derived;
        const ggml = GGML_TYPES[d.ggmlType]?.name ?? `ggml type ${d.ggmlType}`;
        const type = d.hf ? d.hf.method.toUpperCase() : d.from ? `${d.from} quantized at load to ${ggml}` : ggml;
        const source = d.hf ? d.hf.method.toUpperCase() : (d.from ?? ggml);
        tensors.push({
          name: init.name!,
          stored: `${source} [${d.rows},${d.cols}]`,
          form: `${type}, exact form: part ${d.part}`,
          bytes: d.bytes,
          passBytes: 0,
          where,
        });
      } else if (narrow && memory.atRest === 'stored')
        tensors.push({
          name: init.name!,
          stored,
          form: 'as stored, widened to float32 for each product',
          bytes: n * width,
          passBytes: n * 4,
          where,
        });
      else if (narrow && where === "onnxruntime's copy")
        tensors.push({ name: init.name!, stored, form: 'widened to float32 at load', bytes: n * 4, passBytes: 0, where });
      else tensors.push({ name: init.name!, stored, form: 'as stored', bytes: n * width, passBytes: 0, where });
    }
  });
  return tensors;
}

/** The plan of a model, without loading it: the load's checks and decisions up to the graph. */
export function planModel(dir: string, options: WeightOptions & DeviceOptions & { checkpointLinks?: CheckpointLinks } = {}): WeightPlan {
  const opened = openCheckpoint(dir, options.checkpointLinks);
  checkQuantizedOptions(opened, options);
  const device = resolveDevice({ ...options, checkpointDtype: options.checkpointDtype ?? opened.storedDtype });
  const memory = weightsPlan(opened.config, opened, device, options);
  const graph = buildDecoderGraph(opened.config, opened.weights, device.dtype, undefined, device.kind, {
    atRest: memory.atRest,
    heldWeightsFile: heldWeightsPath(),
    ...(options.quantizedActivations && { quantizedActivations: options.quantizedActivations }),
    ...(options.quantize && { quantize: options.quantize }),
  });
  const tensors = weightPlanOf(graph, memory);
  return {
    model: opened.name,
    device: device.name,
    weights: opened.storage,
    memory: {
      atRest: memory.atRest,
      weights: memory.weights,
      need: memory.need,
      ...(memory.available !== undefined && { available: memory.available }),
      reason: memory.reason,
      words: memoryNeed(memory),
    },
    tensors,
    bytes: tensors.reduce((s, t) => s + t.bytes, 0),
  };
}

const gib = (b: number) => `${(b / 2 ** 30).toFixed(2)} GiB`;
/** A table's size: in the unit that shows it (a small model's weights are KiB). */
const size = (b: number) => (b >= 2 ** 30 ? gib(b) : b >= 2 ** 20 ? `${(b / 2 ** 20).toFixed(1)} MiB` : `${(b / 2 ** 10).toFixed(1)} KiB`);

/** The load log's line of the weight plan of a built graph. */
export const weightPlanLine = (graph: DecoderGraph, memory: MemoryPlan) => planSummary(weightPlanOf(graph, memory));

/** The plan in one line: bytes at rest by form and where (the load log's). */
export function planSummary(tensors: readonly TensorPlan[]): string {
  const by = new Map<string, number>();
  for (const t of tensors) {
    const key = `${t.form.replace(/: part \w+$/, '')} (${t.where})`;
    by.set(key, (by.get(key) ?? 0) + t.bytes);
  }
  return [...by.entries()]
    .sort((a, b) => b[1] - a[1])
    .map(([k, b]) => `${gib(b)} ${k}`)
    .join('; ');
}

/** The plan as a table: one row per weight of the same role in every layer (`layers.*`),
 * a quantized weight's parts in one. */
export function planTable(plan: WeightPlan): string {
  const rows = new Map<string, { tensors: Set<string>; parts: string[]; t: TensorPlan; bytes: number; pass: number }>();
  for (const t of plan.tensors) {
    const tensor = t.name.replace(/\.(rows\.)?(lo|hi|wide|scales|loZeros|hiZeros|wideZeros|mins)$/, '');
    const role = tensor.replace(/\.\d+\./g, '.*.');
    const part = /: part (\w+)$/.exec(t.form)?.[1];
    const form = t.form.replace(/: part \w+$/, '');
    const key = `${role}|${form}|${t.where}`;
    const row = rows.get(key) ?? { tensors: new Set<string>(), parts: [], t: { ...t, form }, bytes: 0, pass: 0 };
    row.tensors.add(tensor);
    if (part && !row.parts.includes(part)) row.parts.push(part);
    row.bytes += t.bytes;
    row.pass = Math.max(row.pass, t.passBytes);
    rows.set(key, row);
  }
  const lines = [...rows.entries()].map(([key, r]) => [
    `${key.split('|')[0]}${r.tensors.size > 1 ? ` ×${r.tensors.size}` : ''}`,
    r.t.stored,
    r.parts.length > 0 ? `${r.t.form} (${r.parts.join(', ')})` : r.t.form,
    size(r.bytes),
    r.pass > 0 ? size(r.pass) : '',
    r.t.where,
  ]);
  const header = ['tensor', 'stored', 'at rest', 'bytes', 'in a pass', 'where'];
  const widths = header.map((h, i) => Math.max(h.length, ...lines.map((l) => l[i]!.length)));
  const line = (cells: string[]) =>
    cells
      .map((c, i) => c.padEnd(widths[i]!))
      .join('  ')
      .trimEnd();
  return [
    `${plan.model} on ${plan.device}: ${plan.weights}; ${plan.memory.reason}`,
    `weights at rest ${size(plan.bytes)}; ${plan.memory.words}`,
    '',
    line(header),
    line(widths.map((w) => '-'.repeat(w))),
    ...lines.map(line),
  ].join('\n');
}
