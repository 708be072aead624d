// What the main thread (engine/session-host.ts) and the session thread (workers/session.ts)
// say to each other: each message and its answer, declared once for both sides of the
// worker boundary.
import type ort from 'onnxruntime-node';
import type { IndexFeedPlan } from '../../graph/index-feeds.js';
import type { HeldWeights } from '../../graph/held-weights.js';
import type { LoadProgress } from '../../common/load-progress.js';

/** A feed or an output: element type, dimensions, values. */
export interface HostTensor {
  type: 'int64' | 'float32' | 'float16' | 'bool';
  dims: number[];
  data: BigInt64Array | Float32Array | Uint16Array | Uint8Array;
}

/** Positions [offset, offset + count) of row `row` of the KV kept under `handle`. */
export interface KvPiece {
  handle: number;
  row: number;
  offset: number;
  count: number;
}

export interface RunRequest {
  session: string;
  feeds: Record<string, HostTensor>;
  fetches: string[];
  /** Feed the KV kept under this handle as `past.L.key/value` (default: an empty past). */
  past?: number;
  /** Per row of the pass: the row of the past it continues, and that row's valid slots
   * (the row's new tokens' KV follows them). */
  pastRows: number[];
  pastLengths: number[];
  /** The past's slots per row as the pass sees them (its keys are these and its new
   * tokens'): the KV under `past` may have more, room laid out for the new slots. */
  pastSlots: number;
  numLayers: number;
  /** Keep this pass's whole KV (each row's past, then its new slots) under a new handle. */
  keepPresent?: boolean;
  /** The empty past's shape: [rows, kv_heads, 0, head_dim], in the KV dtype. */
  emptyPast: { type: 'float32' | 'float16'; dims: number[] };
}

export interface RunResult {
  outputs: Record<string, HostTensor>;
  present?: number;
  /** Bytes that crossed between host and device: the feeds besides the past as the session
   * took them (index feeds packed), the past fed (host-held KV given to a GPU session; on
   * the CPU the session reads it in place), the present kept, and the layout indices
   * uploaded for this pass. */
  moved: { inputs: number; pastKv: number; presentKv: number; layoutIndex: number };
}

/** Kept KV on the device (a provider with `kvOnDevice`): the model session's new keys and
 * values stay in device buffers, and layouts run as these graphs (one per source count,
 * kv-layout.ts). */
export interface DeviceKv {
  layouts: { sources: number; model: Uint8Array }[];
  kvHeads: number;
  headDim: number;
  type: 'float32' | 'float16';
  /** Options of the layout sessions (the model session's provider). */
  options: ort.InferenceSession.SessionOptions;
}

/** What the session thread is told when it starts: where it keeps KV, and the lock its
 * work on a shared device takes. */
export interface SessionThreadData {
  /** Set when KV stays on the device: the layout graphs (else KV is laid out on the host). */
  deviceKv?: DeviceKv;
  /** One lock for every session thread of the process working on the device (Dawn's device
   * breaks with two at once): a SharedArrayBuffer of one Int32. */
  deviceLock?: SharedArrayBuffer;
}

/** What a session's graph reads besides its own inputs: where its keys lie, as `branches`
 * (past_lengths and past_rows) or `gather` (kv_rows and kv_steps, model/past.ts). */
export type KeyLayoutKind = 'branches' | 'gather';

/** The weights files a session is made from (absolute paths; the checkpoint's folder `dir`),
 * and the weights it holds in a private copy, written from them before it is made. */
export interface SessionWeights {
  dir: string;
  files: string[];
  held?: HeldWeights;
}

/** What `create` answers: the weights files the process still maps once the session is made
 * (undefined where that cannot be told). */
export interface CreatedSession {
  mapped?: string[];
}

/** The weights on the device that every session reads (graph/device-weights.ts). */
export interface DeviceWeightsHeld {
  tensors: number;
  bytes: number;
}

/** What the host asks, and what each answers. */
export type SessionMessage =
  | {
      op: 'create';
      name: string;
      model: Uint8Array;
      options: ort.InferenceSession.SessionOptions;
      keyLayout: KeyLayoutKind;
      indexFeeds?: IndexFeedPlan;
      weights?: SessionWeights;
    }
  | {
      op: 'upload';
      uploads: { model: Uint8Array; outputs: string[] }[];
      /** The upload graphs' sessions: the CPU, folding as the model's session would. */
      foldOptions: ort.InferenceSession.SessionOptions;
      /** The carriers' sessions: the model's device. */
      options: ort.InferenceSession.SessionOptions;
      /** One graph per element type that carries a host tensor `x` to the device. */
      carriers: Record<string, Uint8Array>;
      /** A one-value graph whose pass, read back, waits for the device. */
      sync: Uint8Array;
      weights?: SessionWeights;
    }
  | { op: 'deviceWeights' }
  | { op: 'run'; run: RunRequest }
  | { op: 'gather'; rows: KvPiece[][]; length: number }
  | { op: 'gatherEach'; layouts: { rows: KvPiece[][]; length: number }[] }
  | { op: 'dropPast'; handle: number }
  | { op: 'keptPasts' }
  | { op: 'laidOutBytes' }
  | { op: 'keptTensors' }
  | { op: 'release' }
  | { op: 'exitForTest' };

/** An answer, or (while a create or upload runs) how far it is: a load's progress. */
export type SessionReply = { id: number; result: unknown } | { id: number; error: string } | { id: number; progress: LoadProgress };
