// The KV the session thread keeps between passes, under handles the engine names: each
// entry's tensors, how its rows' slots lie in them, and who holds each tensor.
//
// Tensors of kept KV are shared: an extended entry holds the past it was fed (another
// entry's, or a layout made for the pass), a row view may be its source itself. Each is
// counted by the entries and passes holding it; a GPU tensor is disposed when none does
// (onnxruntime-node frees a GPU buffer on dispose() only, never on garbage collection:
// WEBGPU-NODE.md §1, memory grew by one KV a pass without it).
import type ort from 'onnxruntime-node';
import type { KvPiece } from './protocol.js';

export type KvTensor = ort.Tensor & { data: Float32Array | Uint16Array };

/** KV kept under a handle; per layer its key then its value, each [rows, kv_heads, slots,
 * head_dim], in one or two parts laid end to end (a part before the last one full in every
 * row). `laidOut`: every row all of its slots (a gather's: a long past kept whole may be
 * its first part as it lies, the pieces after it laid out as the second). `extended`: a
 * pass's KV as the pass saw it — row b the first `pastLengths[b]` slots of row
 * `pastRows[b]` of the past it was fed, then its new tokens' — kept without copying that
 * past again: the graph returns only the new tokens' KV. */
export type Parts = KvTensor[][];
export type KvEntry =
  // `pieces`: on the device, the kept pieces a gather laid it out from, row by row.
  | { kind: 'laidOut'; parts: Parts; pieces?: KvPiece[][] }
  | { kind: 'extended'; parts: Parts; pastSlots: number; pastRows: number[]; pastLengths: number[]; fresh: KvTensor[] }
  // On the device, a few slots of one kept tensor per layer and kind, kept as they lie
  // (`parts` is those tensors): one row of `length` slots, its first `count` from slots
  // [offset, offset + count) of row `row`, zeros after (`gather`).
  | { kind: 'view'; parts: Parts; row: number; offset: number; count: number; length: number };

/** Slots [offset, offset + count) of row `row` of `src`. */
export interface Stretch {
  src: KvTensor;
  row: number;
  offset: number;
  count: number;
}

export const slotsOf = (t: KvTensor) => t.dims[2]!;
const partsWidth = (parts: Parts) => parts.reduce((n, p) => n + slotsOf(p[0]!), 0);

/** Slots per row of an entry (the engine's `PastKV.length`). */
export function width(kv: KvEntry): number {
  switch (kv.kind) {
    case 'laidOut':
      return partsWidth(kv.parts);
    case 'extended':
      return kv.pastSlots + slotsOf(kv.fresh[0]!);
    case 'view':
      return kv.length;
  }
}

/** Slots row `row` of an entry holds: an extended row's past, then its new slots. */
export function rowSlots(kv: KvEntry, row: number): number {
  switch (kv.kind) {
    case 'laidOut':
      return width(kv);
    case 'extended':
      return kv.pastLengths[row]! + slotsOf(kv.fresh[0]!);
    case 'view':
      return kv.count;
  }
}

/** Where slots [offset, offset + count) of `row` lie for tensor `i` (layer·2 + key/value):
 * a stretch of each part they reach (an extended row's past: its first pastLengths[row]
 * slots), then of its new slots. */
export function stretches(kv: KvEntry, i: number, row: number, offset: number, count: number): Stretch[] {
  const out: Stretch[] = [];
  if (kv.kind === 'view') {
    const n = Math.min(count, kv.count - offset);
    if (n > 0) out.push({ src: kv.parts[0]![i]!, row: kv.row, offset: kv.offset + offset, count: n });
    return out;
  }
  const end = offset + count;
  let at = 0;
  const take = (src: KvTensor, srcRow: number, slots: number) => {
    const from = Math.max(offset, at);
    const to = Math.min(end, at + slots);
    if (to > from) out.push({ src, row: srcRow, offset: from - at, count: to - from });
    at += slots;
  };
  let past = kv.kind === 'laidOut' ? Infinity : kv.pastLengths[row]!;
  const pastRow = kv.kind === 'laidOut' ? row : kv.pastRows[row]!;
  for (const part of kv.parts) {
    const slots = Math.min(slotsOf(part[i]!), past);
    take(part[i]!, pastRow, slots);
    past -= slots;
  }
  if (kv.kind === 'extended') take(kv.fresh[i]!, row, slotsOf(kv.fresh[i]!));
  return out;
}

const entryTensors = (kv: KvEntry): KvTensor[] => [...kv.parts.flat(), ...(kv.kind === 'extended' ? kv.fresh : [])];

export class KvStore {
  private readonly entries = new Map<number, KvEntry>();
  private nextHandle = 1;
  private readonly holders = new Map<ort.Tensor, number>();

  /** Keep `entry` under a new handle, holding its tensors. */
  keep(entry: KvEntry): number {
    const handle = this.nextHandle++;
    this.hold(entryTensors(entry));
    this.entries.set(handle, entry);
    return handle;
  }

  /** The entry under `handle`; an error if it is gone. */
  get(handle: number): KvEntry {
    const kv = this.entries.get(handle);
    if (!kv) throw new Error(`past KV handle ${handle} is gone`);
    return kv;
  }

  /** The entry under `handle`, if any. */
  find(handle: number): KvEntry | undefined {
    return this.entries.get(handle);
  }

  /** Forget `handle`, letting go of its tensors. */
  drop(handle: number): void {
    const kv = this.entries.get(handle);
    this.entries.delete(handle);
    if (kv) this.unhold(entryTensors(kv));
  }

  /** Count one more holder of each tensor (an entry, a pass reading it, a layout). */
  hold(ts: Iterable<ort.Tensor>): void {
    for (const t of ts) this.holders.set(t, (this.holders.get(t) ?? 0) + 1);
  }

  /** One holder fewer; a device tensor held by none is disposed. */
  unhold(ts: Iterable<ort.Tensor>): void {
    for (const t of ts) {
      const n = (this.holders.get(t) ?? 1) - 1;
      if (n > 0) {
        this.holders.set(t, n);
        continue;
      }
      this.holders.delete(t);
      if (t.location === 'gpu-buffer') t.dispose();
    }
  }

  /** Entries kept (what leaks show as). */
  get size(): number {
    return this.entries.size;
  }

  /** Tensors held (on a GPU, device buffers not yet freed). */
  get tensors(): number {
    return this.holders.size;
  }

  /** Free everything: device tensors disposed, entries forgotten. */
  clear(): void {
    for (const t of this.holders.keys()) if (t.location === 'gpu-buffer') t.dispose();
    this.holders.clear();
    this.entries.clear();
  }
}
