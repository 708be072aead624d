// Laying kept KV out on the device (a provider with `kvOnDevice`): a WebGPU tensor's
// memory cannot be read from JavaScript (onnxruntime-node 1.30: `getData()` on one aborts
// the process, ../shared/gpu/WEBGPU-NODE.md §1), so a layout is a graph run on the device
// (engine/kv-layout.ts), with the pieces' source tensors as inputs and, per output slot,
// where it comes from: only that index crosses to the device (8 bytes a row's slot).
import ort from 'onnxruntime-node';
import { stretches, type KvEntry, type KvStore, type KvTensor } from './kv-store.js';
import type { KvLayouts } from './layouts.js';
import type { DeviceKv, KvPiece } from './protocol.js';

/** Slots [offset, offset + count) of row `row` of source `j`. */
interface SourceStretch {
  j: number;
  row: number;
  offset: number;
  count: number;
}

/** The most sources one layout graph takes (kv-layout.ts's MAX_LAYOUT_SOURCES); a layout
 * of more is made in two stages. */
const MAX_SOURCES = 256;

export class DeviceLayouts implements KvLayouts {
  readonly onDevice = true;
  laidOutBytes = 0;
  layoutRuns = 0;
  /** Layout index bytes uploaded since the last pass took them into its count. */
  private indexBytes = 0;
  private readonly sessions = new Map<number, Promise<ort.InferenceSession>>();
  private zeroSlotTensor?: ort.Tensor;

  constructor(
    private readonly kv: DeviceKv,
    private readonly store: KvStore,
  ) {}

  /** The same layout as the host's, run as a layout graph on the device: every tensor's
   * sources (distinct kept tensors the pieces lie in) and each output row's stretches of
   * them. */
  layOut(rows: KvPiece[][], length: number, proto: KvEntry): Promise<KvTensor[]> {
    const tensors = proto.parts[0]!.length;
    const sources: KvTensor[][] = Array.from({ length: tensors }, () => []);
    const known = new Map<KvTensor, number>();
    const plan = rows.map((pieces) => {
      const out: SourceStretch[] = [];
      for (const p of pieces) {
        const kv = this.store.get(p.handle);
        const each = Array.from({ length: tensors }, (_, i) => stretches(kv, i, p.row, p.offset, p.count));
        each[0]!.forEach((s, k) => {
          let j = known.get(s.src);
          if (j === undefined) {
            j = known.size;
            known.set(s.src, j);
            for (let i = 0; i < tensors; i++) sources[i]!.push(each[i]![k]!.src);
          }
          out.push({ j, row: s.row, offset: s.offset, count: s.count });
          this.laidOutBytes += tensors * s.src.dims[1]! * s.count * s.src.dims[3]! * (s.src.type === 'float16' ? 2 : 4);
        });
      }
      return out;
    });
    return this.run(sources, plan, length);
  }

  /** The tensor itself when it has one row, else a copy of the row. */
  async rowView(kv: KvEntry & { kind: 'laidOut' }, row: number): Promise<KvTensor[]> {
    const tensors = kv.parts[0]!;
    const [B, , S] = tensors[0]!.dims as [number, number, number, number];
    if (B === 1) return tensors;
    return this.run(
      tensors.map((t) => [t]),
      [[{ j: 0, row, offset: 0, count: S }]],
      S,
    );
  }

  takeIndexBytes(): number {
    const n = this.indexBytes;
    this.indexBytes = 0;
    return n;
  }

  async release(): Promise<void> {
    for (const s of await Promise.all(this.sessions.values())) {
      s.endProfiling();
      await s.release();
    }
    this.sessions.clear();
  }

  /** Sources per tensor ([i][j], each [Bⱼ, H, Sⱼ, D]) → [B, H, length, D] per tensor, row b
   * the stretches plan[b] end to end, zeros after. More sources than one graph takes: rows
   * in groups first, then the groups' outputs as the sources of one more layout. */
  private async run(sources: KvTensor[][], plan: SourceStretch[][], length: number): Promise<KvTensor[]> {
    const dk = this.kv;
    const B = plan.length;
    const n = sources[0]!.length;
    if (B * length === 0 || n === 0) {
      return sources.map(
        () =>
          new ort.Tensor(dk.type, dk.type === 'float16' ? new Uint16Array(0) : new Float32Array(0), [
            B,
            dk.kvHeads,
            length,
            dk.headDim,
          ]) as KvTensor,
      );
    }
    // Held while the layout runs: a drop of their entry meanwhile must not free them.
    const held = sources.flat();
    this.store.hold(held);
    try {
      return await (n > MAX_SOURCES ? this.runInGroups(sources, plan, length) : this.runOnce(sources, plan, length));
    } finally {
      this.store.unhold(held);
    }
  }

  private async runOnce(sources: KvTensor[][], plan: SourceStretch[][], length: number): Promise<KvTensor[]> {
    const dk = this.kv;
    const B = plan.length;
    const n = sources[0]!.length;
    let bucket = 1;
    while (bucket < n) bucket *= 2;
    const session = await this.session(bucket);
    const feeds: Record<string, ort.Tensor> = {};
    // Each source read as rows of D: source j's first pool row, then (row, head, slot) on.
    const firstRow: number[] = [];
    let total = 0;
    for (let j = 0; j < bucket; j++) {
      const real = j < n;
      for (let i = 0; i < sources.length; i++) feeds[`src.${i}.${j}`] = real ? sources[i]![j]! : this.zeroSlot();
      firstRow.push(total);
      const [rows, heads, slots] = real ? (sources[0]![j]!.dims as number[]) : [1, dk.kvHeads, 1];
      total += rows! * heads! * slots!;
    }
    // Per output slot (b, t): its pool row for head 0 and the rows between heads; padding
    // reads the zero row after the pool, whatever the head.
    const base = new Int32Array(B * length).fill(total);
    const stride = new Int32Array(B * length);
    plan.forEach((row, b) => {
      let at = b * length;
      for (const s of row) {
        const [, heads, slots] = sources[0]![s.j]!.dims as number[];
        const first = firstRow[s.j]! + s.row * heads! * slots! + s.offset;
        for (let t = 0; t < s.count; t++) {
          base[at + t] = first + t;
          stride[at + t] = slots!;
        }
        at += s.count;
      }
    });
    feeds.base = new ort.Tensor('int32', base, [B, 1, length]);
    feeds.stride = new ort.Tensor('int32', stride, [B, 1, length]);
    feeds.shape = new ort.Tensor('int64', BigInt64Array.from([B, dk.kvHeads, length, dk.headDim], BigInt), [4]);
    this.indexBytes += base.byteLength + stride.byteLength;
    const out = await session.run(feeds);
    this.layoutRuns++;
    return sources.map((_, i) => out[`out.${i}`] as KvTensor);
  }

  private async runInGroups(sources: KvTensor[][], plan: SourceStretch[][], length: number): Promise<KvTensor[]> {
    const groups: { rows: number[]; used: Map<number, number> }[] = [];
    plan.forEach((row, b) => {
      const mine = new Set(row.map((s) => s.j));
      if (mine.size > MAX_SOURCES)
        throw new Error(`a row of kept KV lies in ${mine.size} pieces, more than a layout takes (${MAX_SOURCES})`);
      let group = groups.at(-1);
      const added = group ? [...mine].filter((j) => !group!.used.has(j)).length : Infinity;
      if (!group || group.used.size + added > MAX_SOURCES) groups.push((group = { rows: [], used: new Map() }));
      for (const j of mine) if (!group.used.has(j)) group.used.set(j, group.used.size);
      group.rows.push(b);
    });
    const parts: KvTensor[][] = [];
    try {
      for (const group of groups) {
        const local = sources.map((perTensor) => [...group.used.keys()].map((j) => perTensor[j]!));
        const part = await this.run(
          local,
          group.rows.map((b) => plan[b]!.map((s) => ({ ...s, j: group.used.get(s.j)! }))),
          length,
        );
        this.store.hold(part);
        parts.push(part);
      }
      const rowsOf = groups.flatMap((group, k) => group.rows.map((b, r) => ({ b, stretch: { j: k, row: r, offset: 0, count: length } })));
      rowsOf.sort((x, y) => x.b - y.b);
      return await this.run(
        sources.map((_, i) => parts.map((p) => p[i]!)),
        rowsOf.map((r) => [r.stretch]),
        length,
      );
    } finally {
      for (const p of parts) this.store.unhold(p);
    }
  }

  /** A one-slot zero tensor for a layout graph's unused source inputs (never indexed). */
  private zeroSlot(): ort.Tensor {
    const dk = this.kv;
    const size = dk.kvHeads * dk.headDim;
    this.zeroSlotTensor ??= new ort.Tensor(dk.type, dk.type === 'float16' ? new Uint16Array(size) : new Float32Array(size), [
      1,
      dk.kvHeads,
      1,
      dk.headDim,
    ]);
    return this.zeroSlotTensor;
  }

  /** The layout graph's session for `sources` sources, made on first use. */
  private session(sources: number): Promise<ort.InferenceSession> {
    let session = this.sessions.get(sources);
    if (!session) {
      const model = this.kv.layouts.find((l) => l.sources === sources)?.model;
      if (!model) throw new Error(`no KV layout graph for ${sources} sources`);
      session = ort.InferenceSession.create(model, { ...this.kv.options, preferredOutputLocation: 'gpu-buffer' });
      this.sessions.set(sources, session);
    }
    return session;
  }
}
