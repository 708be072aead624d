// The execution providers ctxprobe runs its graphs on, and everything that differs between
// them, in one record. The graph builder, the decoder and the in-graph kernels read what a
// provider's kernels can do and in which form (no name of a provider is compared anywhere
// else); the engine and the session thread read how a pass's inputs and KV travel; the
// scheduler reads its defaults. A new provider is a new key of PROVIDERS: `satisfies`
// makes the compiler ask for every capability, and a capability left out is a type error.
//
// Why each WebGPU form exists is measured where it is built (graph/builder.ts, the
// decoder, kernels/): onnxruntime-node 1.30's WebGPU provider runs a node it has no kernel
// for on the CPU without a word, waits for the device at every If and every copy to the
// host, charges the host about 18 µs a dispatch (H100), and sums some reductions in an
// order that depends on the tensor's shape.
import type { ComputeDType } from './dtypes.js';

/** The providers, by the name `--device` takes (`cuda:N` names a CUDA device). */
export type ProviderKind = 'cpu' | 'cuda' | 'webgpu';

export interface ProviderProfile {
  // ---- graph forms: which kernels a graph may use ----------------------------------------
  /** com.microsoft `FusedMatMul` (a product with a transposed weight); else a MatMul of the
   * weight's Transpose, which onnxruntime folds at load. */
  fusedMatMul: boolean;
  /** A float32 `LogSoftmax` kernel; else x − logSumExp(x), and log-probs never make the
   * [scored, vocab] log-softmax a tensor (kernels/logprobs.ts). */
  logSoftmax: boolean;
  /** `OneHot`; else Equal + Cast. */
  oneHot: boolean;
  /** `ConstantOfShape`; else an Expand of 0. */
  constantOfShape: boolean;
  /** `NonZero` over floats; else a comparison on the device and NonZero over its bools
   * (index arithmetic, which stays on the host). */
  floatNonZero: boolean;
  /** ScatterND's `add` reduction over float16; else the scatter runs in float32. */
  float16ScatterAdd: boolean;
  /** ScatterND's additions land in a fixed order; else a mixture of experts sums each
   * token's expert outputs by gathers in expert order (GraphBuilder.combineExperts). */
  orderedScatterAdd: boolean;
  /** ReduceMean and ReduceLogSumExp give a row the same bits whatever the tensor's shape;
   * else means and sums are MatMuls with a column (GraphBuilder.rowMean, rowSum). */
  shapeStableReductions: boolean;
  /** A layer's RMS norms as `SimplifiedLayerNormalization` (the CPU provider fuses the
   * written-out form itself). */
  fusedNorms: boolean;
  /** In float32, a residual add and the norm after it as one Skip(Simplified)LayerNormalization. */
  skipNorms: boolean;
  /** If nodes run their branch without waiting for the device; else the graph has none:
   * keys are laid out by one gather of rows (model/past.ts) and a pass without a heatmap
   * reduces one row and zeroes it (kernels/attention.ts). */
  ifNodes: boolean;
  /** `ArgMax` spreads a row over threads; else a row's first maximum is found by
   * reductions (GraphBuilder.firstMaxIndex): WebGPU's walks a row in one thread. */
  argMax: boolean;
  /** Rotary embeddings by the `RotaryEmbedding` kernel over the cos/sin tables; else by
   * explicit ops over rows gathered from them. */
  fusedRotary: boolean;
  /** q, k and v from one product, q and k rotated as one tensor, where the provider
   * dispatches each node at a cost to the host (its products are wider, so its bits are
   * not the separate products'). */
  jointQkv: boolean;
  /** A probe layer waits for the last one's results through their Shapes (no dispatch);
   * else through a sum of one element of each, added to the hidden state times zero. */
  orderByShapes: boolean;
  /** Index feeds (ids, positions, rows) as int32 pieces of one upload (graph/index-feeds.ts);
   * else each an int64 input. */
  packedIndexFeeds: boolean;
  /** A greedy pass reads each row's top token from reductions (`top1_*`), not TopK, which
   * sorts the whole padded row on WebGPU. */
  topOneByReduction: boolean;
  /** Quantized products (`MatMulNBits`) give a row the same bits from this many rows up, and
   * other bits below (another kernel): each product is given at least this many rows,
   * padded with zeros (model/quantized.ts). Measured, 4-bit blocks of 16 and 32: the CPU's
   * one-row kernel differs from its many-row one in 93 of 96 outputs, equal from 2 rows up
   * to 256; lavapipe's from 4 rows up (1–3 rows: another kernel, blocks of 32). */
  quantizedMinRows: number;
  /** On int8 activations, a format of more than 4 bits (Q8_0, Q5_K, Q6_K) is one 8-bit
   * MatMulNBits rather than two 4-bit ones (checkpoint/ggml-blocks.ts). Measured on the CPU
   * (M = 512, K = 4096, N = 14336): 298 ms against 656; M = 1: 5 against 8 ms. Not tried
   * on the GPU providers. */
  wideQuantizedProducts: boolean;

  // ---- a pass at run time ----------------------------------------------------------------
  /** A pass's new keys and values stay in device buffers and later passes read them there
   * (the session thread lays out kept KV by graphs on the device, kv-layout.ts); else they
   * come back to the host each pass. */
  kvOnDevice: boolean;
  /** Probes run a graph of their own (made on the first probe); scoring and generation a
   * graph without the probe tap, whose nodes each cost a dispatch. Else one graph serves
   * both, and the weights are prepacked once. */
  separateProbeSession: boolean;
  /** The weights go to the device once, at load, by graphs of their own, and every session
   * of the model reads those device tensors as inputs (graph/device-weights.ts): onnxruntime
   * gives each session its own copy of its initializers. */
  deviceWeights: boolean;
  /** A pass's query and key slots are rounded up to a multiple of this: WebGPU's MatMul sums
   * in fours along a dimension that is a multiple of four, one by one otherwise. */
  slotAlignment: number;
  /** Where each node runs is read from onnxruntime's verbose log at load (placements.ts):
   * the provider may leave nodes to the CPU without a word. */
  checkPlacements: boolean;
  /** Every session thread of the process takes one lock for its work on this provider
   * (two threads at once break Dawn's device). */
  sharedDeviceLock: boolean;
  /** Weights narrower than the compute dtype (BF16, F16 computed in float32) can stay as
   * stored, each widened for its product: where asked (`--weights-at-rest stored`), or where
   * widened they would not fit in the host's memory (engine/memory.ts). */
  weightsAsStored: boolean;
  /** The weights live in the host's memory, which the memory plan measures: a model that
   * cannot fit is refused at load. Else (WebGPU) the device's memory is its own, which
   * onnxruntime-node cannot tell; the host's is the measure only for how weights lie at rest
   * (right where the device's memory is the host's: lavapipe, integrated GPUs) — and for a
   * refusal too where only lavapipe can answer (engine/adapter.ts onlySoftwareVulkan). */
  weightsInHostMemory: boolean;
  /** The provider has a bfloat16 Cast: weights kept as stored widen by it. Else (WebGPU: no
   * bfloat16 type) a bfloat16 matrix is read as uint32 pairs of its values and widened by a
   * table of the 65,536 bfloat16 values (model/ops.ts), exactly. */
  castsBfloat16: boolean;
  /** The largest weight tensor the provider's kernels take whole; a larger embedding or
   * output head is split into row blocks (their own initializers, read in place from the
   * checkpoint). WebGPU binds a tensor over the adapter's maxStorageBufferBindingSize as
   * several segments, and a shader may bind 16 buffers in all: on lavapipe (128 MiB
   * bindings) the Gather and the Transpose of a 152k × 3584 float32 table (2.18 GB) needed
   * 17 and failed on every request. 1 GiB blocks bind as 8 segments there; a GPU's own
   * limits are larger. */
  maxTensorBytes?: number;
  /** A matrix kept as stored is widened for its product in row blocks of at most this many
   * bytes widened, each block its own product (ops.ts linear). WebGPU: onnxruntime keeps
   * freed buffers of up to 160 MiB in its cache for reuse, and a larger one is freed only
   * when the device has caught up, after the pass: an 8B model's widened matrices (235 MB)
   * piled up until the kernel killed the process (lavapipe, 24 GiB). */
  maxWidenedBytes?: number;
  /** The checkpoint weights a session would go on reading from onnxruntime's memory map of
   * the weights file after it is made (a file truncated under the server then faults the
   * process with SIGBUS at the next pass): every weight some node reads other than as one
   * of `copiedAs` (op, input slot), the inputs onnxruntime copies at load — prepacked
   * product weights, Casts folded. The session thread reads those into memory it owns
   * (graph/held-weights.ts). `false` where every weight is copied to the device at load. */
  mappedWeights: false | { copiedAs: readonly (readonly [op: string, input: number])[] };

  // ---- the device ------------------------------------------------------------------------
  /** Its name in messages. */
  label: string;
  /** The device takes an index (`cuda:N`). */
  numbered: boolean;
  /** How the host names the device (adapter.ts). */
  adapter: 'none' | 'nvidia' | 'vulkan';
  /** Compute dtypes the provider can run, with why the others cannot. */
  unsupportedDtypes: Partial<Record<ComputeDType, string>>;
  /** The provider takes WebGPU's settings: its storage buffer cache (`--gpu-buffer-cache`)
   * and validation mode. */
  gpuSettings: boolean;
  /** What a compute dtype the provider runs costs there, said with the dtype's reason. */
  dtypeNotes: Partial<Record<ComputeDType, string>>;
  /** onnxruntime's name for the provider; how to tell it is installed (in the npm package,
   * a backend the bundled build lists, or the CUDA provider library the install script
   * fetches); and whether its own warnings are silenced (the load reports placements). */
  session: { name: 'cpu' | 'cuda' | 'webgpu'; install: 'bundled' | 'listedBackend' | 'cudaLibrary'; quiet: boolean };
  /** The default compute dtype for a checkpoint stored in `checkpointDtype`, and why. */
  defaultDtype(checkpointDtype: string | undefined): { dtype: ComputeDType; reason: string };
  /** What to tell when onnxruntime cannot create a session on the device, if anything
   * beyond its own message. */
  sessionFailureHelp?: string;

  // ---- the scheduler's defaults (core/scorer.ts) ----------------------------------------
  /** Padded tokens per forward pass; `simpleCache` with the provider's `simple` buffer cache. */
  maxBatchTokens: { default: number; simpleCache?: number };
  /** Bytes of one layer's attention scores a pass may build. */
  maxAttentionBytes: number;
  /** KV bytes of past a pass of rows longer than one token may lay out. */
  maxPastBytes: number;
}

const MiB = 2 ** 20;

/** What float16 costs on WebGPU: onnxruntime's WebGPU MatMul accumulates float16 products in
 * float16 (an all-ones 1×4096 · 4096×1 product gives 2048), so log-probs move by far more than
 * float32's rounding (docs/gpus.md, "Limits"; the error measured on the fixtures: bench/RESULTS.md). */
export const WEBGPU_FLOAT16 = 'products accumulate in float16 on WebGPU, log-probs are approximate (docs/gpus.md#limits)';

// The scheduler's defaults, measured:
// - Passes of 512 tokens on the CPU (56M Llama, CHARPEval shapes): 512–1024 tokens per pass
//   beat 4096 by 25–40%, as larger attention and KV-gather tensors fall out of cache. Peak
//   RSS follows the pass (bench/peer.ts, 2 threads, mmap threshold 1 MiB): 512 against 1024
//   took multiple choice from 1.38–1.84 s / 675 MiB to 1.34–1.38 s / 596 MiB and 4 × 1024-token
//   rolling from 2.56–2.71 s / 553–559 MiB to 2.87–2.98 s / 522–531 MiB (llama.cpp: 548).
//   GPUs want large passes.
// - 512 on WebGPU too, for another reason: onnxruntime's WebGPU provider keeps freed buffers
//   for reuse in size buckets up to 160 MiB (a few of each) and makes and frees anything
//   larger every pass; a pass of thousands of tokens has many such tensors (logits of 49,152
//   tokens a row, attention scores). On the H100 (360M shape, 2026-11-27), 16 × 512 scored at
//   5.6k tokens/s in passes of 8192 tokens and 8.3k in passes of 512; 32 × 1024, 2.3k and
//   8.0k. With the provider's `simple` cache, which keeps every buffer size it ever freed,
//   the large passes ran at 14.6k and 13.8k: fast, but device memory that grows with every
//   new shape a server sees.
// - A layer's attention within 192 MiB (bench/long.ts, 32k-token rolling scoring, 8 heads,
//   glibc mmap threshold 1 MiB): peak above the model 2096 MiB / 220 s at 256 MiB, 1965 MiB /
//   233 s at 192, 1834 MiB / 299 s at 128 (smaller blocks copy the growing KV more often).
//   On WebGPU 128 MiB, to stay within the provider's cached buffer sizes (above).
// - Past laid out within 8 MiB a pass on the CPU (bench/peer.ts's multiple choice, 4 × 6
//   continuations of 400-token contexts, mmap threshold 1 MiB), peak RSS / time, a
//   context's continuations sharing its laid-out past (the graph gathers it per row): 32 MiB
//   488–491 MiB / 1.57–1.75 s, 16 MiB 480–485 / 1.54–1.83, 8 MiB 427–435 / 1.76–1.87
//   (llama.cpp 449–456), in-process 1.37–1.54 s at 8 and 1.32–1.51 at 16. Before they shared
//   it (each row's past laid out): no bound 606 / 1.76–1.80, 16 MiB 497 / 1.52–1.59, 8 MiB
//   470 / 2.11–2.29.

/** The kernels onnxruntime's CPU and CUDA providers share, as our graphs use them. */
const FULL_KERNELS = {
  fusedMatMul: true,
  logSoftmax: true,
  oneHot: true,
  constantOfShape: true,
  floatNonZero: true,
  float16ScatterAdd: true,
  orderedScatterAdd: true,
  shapeStableReductions: true,
  fusedNorms: false,
  skipNorms: false,
  ifNodes: true,
  argMax: true,
  fusedRotary: false,
  jointQkv: false,
  orderByShapes: false,
  packedIndexFeeds: false,
  topOneByReduction: false,
} as const;

export const PROVIDERS = {
  cpu: {
    ...FULL_KERNELS,
    quantizedMinRows: 2,
    wideQuantizedProducts: true,
    kvOnDevice: false,
    separateProbeSession: false,
    deviceWeights: false,
    slotAlignment: 1,
    checkPlacements: false,
    sharedDeviceLock: false,
    weightsAsStored: true,
    castsBfloat16: true,
    weightsInHostMemory: true,
    // Measured (/proc/self/maps after session creation, 56M Llama): the embedding, used by a
    // Gather, and every norm weight stayed mapped; every FusedMatMul weight was prepacked.
    mappedWeights: {
      copiedAs: [
        ['MatMul', 1],
        ['FusedMatMul', 1],
        ['Gemm', 1],
        ['Cast', 0],
      ],
    },
    label: 'CPU',
    numbered: false,
    adapter: 'none',
    session: { name: 'cpu', install: 'bundled', quiet: false },
    unsupportedDtypes: { bfloat16: 'the CPU execution provider has no bfloat16 MatMul' },
    gpuSettings: false,
    // Kept for CUDA's numbers on a machine without a GPU (the tests' float16 graph); slower
    // and larger than float32 on a CPU: a 1B shape scored in 14.1 s against 6.3–7.4 s and
    // peaked at 8.1 against 5.8 GiB (the measurement).
    dtypeNotes: {
      float16:
        'the CPU provider has no float16 MatMul: products run in float32 between casts, slower and larger than float32 (use float32 on the CPU; a float16 checkpoint computes in float32 exactly)',
    },
    defaultDtype: () => ({ dtype: 'float32', reason: 'CPU default' }),
    maxBatchTokens: { default: 512 },
    maxAttentionBytes: 192 * MiB,
    maxPastBytes: 8 * MiB,
  },
  webgpu: {
    fusedMatMul: false,
    logSoftmax: false,
    oneHot: false,
    constantOfShape: false,
    floatNonZero: false,
    float16ScatterAdd: false,
    orderedScatterAdd: false,
    shapeStableReductions: false,
    fusedNorms: true,
    skipNorms: true,
    ifNodes: false,
    argMax: false,
    fusedRotary: true,
    jointQkv: true,
    orderByShapes: true,
    packedIndexFeeds: true,
    topOneByReduction: true,
    quantizedMinRows: 4,
    wideQuantizedProducts: false,
    kvOnDevice: true,
    separateProbeSession: true,
    deviceWeights: true,
    slotAlignment: 4,
    checkPlacements: true,
    sharedDeviceLock: true,
    weightsAsStored: true,
    castsBfloat16: false,
    weightsInHostMemory: false,
    maxTensorBytes: 2 ** 30,
    maxWidenedBytes: 128 * 2 ** 20,
    // Measured on lavapipe: no mapping of the weights file is left once the session is made.
    mappedWeights: false,
    label: 'WebGPU',
    numbered: false,
    adapter: 'vulkan',
    // Its warning that some nodes run on the CPU says nothing of which: the load reports the
    // placements itself (placements.ts).
    session: { name: 'webgpu', install: 'listedBackend', quiet: true },
    unsupportedDtypes: { bfloat16: 'the WebGPU provider has no bfloat16 type' },
    gpuSettings: true,
    dtypeNotes: { float16: WEBGPU_FLOAT16 },
    defaultDtype: () => ({
      dtype: 'float32',
      reason: 'WebGPU default: matrix products accumulate in float32 (its float16 MatMul accumulates in float16)',
    }),
    sessionFailureHelp:
      'WebGPU on Linux runs on Vulkan: the Vulkan loader (libvulkan1) and a driver (NVIDIA\'s, or Mesa\'s lavapipe from bookworm-backports for a software GPU) must be installed; see docs/gpus.md#install',
    maxBatchTokens: { default: 512, simpleCache: 8192 },
    maxAttentionBytes: 128 * MiB,
    maxPastBytes: Infinity,
  },
  cuda: {
    ...FULL_KERNELS,
    // Not measured (no CUDA provider here): as WebGPU's.
    quantizedMinRows: 4,
    wideQuantizedProducts: false,
    kvOnDevice: false,
    separateProbeSession: false,
    deviceWeights: false,
    slotAlignment: 1,
    checkPlacements: false,
    sharedDeviceLock: false,
    weightsAsStored: false,
    castsBfloat16: true,
    weightsInHostMemory: false,
    // Not run here (no CUDA provider): weights go to the device at load as on WebGPU; the
    // session thread reports any mapping left (Engine.weightsHeld).
    mappedWeights: false,
    label: 'CUDA',
    numbered: true,
    adapter: 'nvidia',
    session: { name: 'cuda', install: 'cudaLibrary', quiet: false },
    unsupportedDtypes: {},
    gpuSettings: false,
    dtypeNotes: {},
    // bfloat16 for a bfloat16 checkpoint: float16's range is too small for some models'
    // activations (Qwen2.5 and Gemma are known to overflow).
    defaultDtype: (checkpointDtype) =>
      checkpointDtype === 'bfloat16'
        ? {
            dtype: 'bfloat16',
            reason: 'CUDA default for a bfloat16 checkpoint (float16 can overflow where the model was trained in bfloat16)',
          }
        : { dtype: 'float16', reason: `CUDA default for a ${checkpointDtype ?? 'float32'} checkpoint` },
    maxBatchTokens: { default: 8192 },
    maxAttentionBytes: 192 * MiB,
    maxPastBytes: Infinity,
  },
} as const satisfies Record<ProviderKind, ProviderProfile>;

/** In the order `--device` lists them. */
export const PROVIDER_KINDS = Object.keys(PROVIDERS) as ProviderKind[];

/** The profile of a provider by its name. */
export function provider(kind: ProviderKind): ProviderProfile {
  return PROVIDERS[kind];
}
