// Laying kept KV out into the tensors a pass reads: pieces of kept entries end to end, a
// row per list, right-padded. One interface, two ways, chosen when the thread starts: on
// the host the thread copies the memory itself; on the device (layouts-device.ts) the copy
// is a graph, as a GPU tensor's memory cannot be read from JavaScript.
import ort from 'onnxruntime-node';
import { stretches, type KvEntry, type KvStore, type KvTensor } from './kv-store.js';
import type { KvPiece } from './protocol.js';

export interface KvLayouts {
  /** Kept KV lies in device buffers: a pass's outputs stay there (each disposed unless
   * kept), and a gather may keep a few slots as a view of the tensor they lie in. */
  readonly onDevice: boolean;
  /** rows[b]: pieces laid end to end, right-padded to `length`: one tensor per layer and
   * kind, shaped as `proto`'s. */
  layOut(rows: KvPiece[][], length: number, proto: KvEntry): Promise<KvTensor[]>;
  /** Row `row` of a one-part laid-out entry as a tensor of its own. */
  rowView(kv: KvEntry & { kind: 'laidOut' }, row: number): Promise<KvTensor[]>;
  /** KV bytes copied into layouts, and layout graph runs, since the thread started. */
  readonly laidOutBytes: number;
  readonly layoutRuns: number;
  /** Layout index bytes uploaded since the last call (what a pass moved besides its own). */
  takeIndexBytes(): number;
  /** Free the layouts' own sessions. */
  release(): Promise<void>;
}

/** On the host: the memory copied row by row, and a row's view a subarray of its tensor. */
export class HostLayouts implements KvLayouts {
  readonly onDevice = false;
  laidOutBytes = 0;
  readonly layoutRuns = 0;

  constructor(private readonly store: KvStore) {}

  async layOut(rows: KvPiece[][], length: number, proto: KvEntry): Promise<KvTensor[]> {
    const B = rows.length;
    const first = proto.parts[0]!;
    const out: KvTensor[] = [];
    for (let i = 0; i < first.length; i++) {
      const [, H, , D] = first[i]!.dims as [number, number, number, number];
      const data = first[i]!.data instanceof Uint16Array ? new Uint16Array(B * H * length * D) : new Float32Array(B * H * length * D);
      rows.forEach((pieces, b) => {
        let at = 0;
        for (const p of pieces) {
          for (const s of stretches(this.store.get(p.handle), i, p.row, p.offset, p.count)) {
            const Ps = s.src.dims[2]!;
            for (let h = 0; h < H; h++) {
              const from = ((s.row * H + h) * Ps + s.offset) * D;
              data.set(s.src.data.subarray(from, from + s.count * D), ((b * H + h) * length + at) * D);
            }
            this.laidOutBytes += H * s.count * D * data.BYTES_PER_ELEMENT;
            at += s.count;
          }
        }
      });
      out.push(new ort.Tensor(first[i]!.type, data, [B, H, length, D]) as KvTensor);
    }
    return out;
  }

  async rowView(kv: KvEntry & { kind: 'laidOut' }, row: number): Promise<KvTensor[]> {
    const tensors = kv.parts[0]!;
    const [B, H, S, D] = tensors[0]!.dims as [number, number, number, number];
    if (B === 1) return tensors;
    const n = H * S * D;
    return tensors.map((t) => new ort.Tensor(t.type, t.data.subarray(row * n, (row + 1) * n), [1, H, S, D]) as KvTensor);
  }

  takeIndexBytes(): number {
    return 0;
  }

  async release(): Promise<void> {}
}
