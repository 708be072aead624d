// The options each of a model's sessions is made with: the device's, where its external
// weights live, what it keeps on the device, how the weights go up once (device weights),
// and the KV layout graphs of a provider that keeps KV on the device.
import type ort from 'onnxruntime-node';
import type { ModelConfig } from '../model/families.js';
import type { DecoderGraph } from '../model/decoder.js';
import { kvDType } from '../common/dtypes.js';
import { carrierGraphs, syncGraph } from '../graph/onnx-graph.js';
import type { WeightFiles } from '../checkpoint/weight-files.js';
import type { ResolvedDevice } from './device.js';
import { buildKvLayoutGraph, layoutBuckets } from './kv-layout.js';
import { SessionHost } from './session-host.js';
import type { LoadProgressListener } from '../common/load-progress.js';

/** The weights files a session is made from, and the weights it holds in memory of its own. */
export function sessionWeights(graph: DecoderGraph, files: WeightFiles, dir: string) {
  return { dir, files: [...files.files], ...(graph.heldWeights && { held: graph.heldWeights }) };
}

/** onnxruntime session options: the device's, and where external weights live. With KV on
 * the device the new keys and values stay in device buffers (the next pass reads them
 * there) and everything else comes back to the host. */
export function sessionOptions(weightsDir: string, device: ResolvedDevice, layers: number): Record<string, unknown> {
  const options: Record<string, unknown> = {
    ...device.sessionOptions,
    extra: {
      session: { model_external_initializers_file_folder_path: weightsDir },
      // A weight widened at load is one constant folded: onnxruntime skips folding any
      // output over 1 GiB (a guard against hostile models) and would widen such a weight
      // every pass instead (a 128k-vocabulary embedding of width 2304 in BF16: 2.3 s a pass
      // against 0.2 for its F32 twin). The memory plan counts every widened weight, so the
      // guard is off ("0": no limit); a plan that keeps weights as stored folds none.
      optimization: { constant_folding_max_output_size_in_bytes: '0' },
    },
  };
  if (device.profile.kvOnDevice) {
    const kv = Array.from({ length: layers }, (_, i) => [`new.${i}.key`, `new.${i}.value`, `full.${i}.key`, `full.${i}.value`]).flat();
    options.preferredOutputLocation = Object.fromEntries(kv.map((name) => [name, 'gpu-buffer']));
  }
  return options;
}

/** How the weights go up (graph/device-weights.ts): upload sessions on the CPU, folding as
 * the model's session would (no arena: nothing is kept), carrier sessions on its device. */
export function uploadOptions(device: ResolvedDevice, options: Record<string, unknown>) {
  return {
    foldOptions: { executionProviders: ['cpu'], enableCpuMemArena: false, extra: options.extra } as ort.InferenceSession.SessionOptions,
    options: device.sessionOptions,
    carriers: carrierGraphs(),
    sync: syncGraph(),
  };
}

/** The layout graphs the session thread runs to lay out kept KV on the device (kv-layout.ts). */
export function deviceKv(config: ModelConfig, device: ResolvedDevice) {
  const shape = { tensors: 2 * config.numLayers, kvHeads: config.numKvHeads, headDim: config.headDim, dtype: device.dtype };
  return {
    layouts: layoutBuckets().map((sources) => ({ sources, model: buildKvLayoutGraph(shape, sources) })),
    kvHeads: config.numKvHeads,
    headDim: config.headDim,
    type: kvDType(device.dtype),
    options: device.sessionOptions,
  };
}

/** The model's session thread and its session `name` (and where a provider keeps the weights on
 * the device, their upload once it is made: graph/device-weights.ts, which the graph reads
 * instead of files): which weights files stay mapped, and what the device holds. */
export async function startSession(
  name: string,
  graph: DecoderGraph,
  runOptions: Record<string, unknown>,
  device: ResolvedDevice,
  config: ModelConfig,
  files: WeightFiles,
  weightsDir: string,
  progress: LoadProgressListener | undefined,
): Promise<{ host: SessionHost; mapped?: string[]; deviceWeightBytes?: number }> {
  const host = new SessionHost({
    ...(device.profile.kvOnDevice ? { deviceKv: deviceKv(config, device) } : {}),
    sharedDeviceLock: device.profile.sharedDeviceLock,
  });
  try {
    const weights = sessionWeights(graph, files, weightsDir);
    const reads = { keyLayout: graph.keyLayout, indexFeeds: graph.indexFeeds, ...(!graph.uploads && { weights }) };
    const { mapped } = await host.create(name, graph.model, runOptions, reads, progress);
    if (!graph.uploads) return { host, ...(mapped && { mapped }) };
    const up = await host.upload(graph.uploads, uploadOptions(device, runOptions), weights, progress);
    return { host, ...(up.mapped && { mapped: up.mapped }), deviceWeightBytes: up.bytes };
  } catch (e) {
    await host.close();
    throw e;
  }
}
