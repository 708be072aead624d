// How a model's weights will lie, decided before anything is built: the memory plan on its
// device (memory.ts) with what was asked of the weights (--weights-at-rest, --quantize,
// --quantized-activations) checked against what the checkpoint holds, and the words the
// load log gives it.
import type { ModelConfig } from '../model/families.js';
import type { OpenedCheckpoint } from './checkpoint.js';
import type { ResolvedDevice } from './device.js';
import { memoryRefusal, passLimits, planMemory, prepackedForInt8, quantizedAtLoad, type MemoryPlan, type PassLimits } from './memory.js';
import type { WeightsAtRest } from '../model/ops.js';
import type { QuantizeAtLoad, QuantizedActivations } from '../model/quantized.js';
import { onlySoftwareVulkan } from './adapter.js';
import { DeviceError, InvalidArgumentError } from '../common/errors.js';

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
