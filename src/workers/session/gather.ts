// Pasts made of kept pieces (`gather`): each row's pieces end to end, kept under a new
// handle, made the cheapest way the pieces allow. On the device two ways need no layout
// run: the last decode pass's keys and values whole (`LastStep`), and a few slots kept as a
// view of the tensor they lie in.
import { rowSlots, slotsOf, stretches, width, type KvEntry, type KvStore, type KvTensor } from './kv-store.js';
import type { KvLayouts } from './layouts.js';
import type { KvPiece } from './protocol.js';

/** How `gather` makes rows[b] (pieces laid end to end, right-padded to `length`):
 * - `full`: the last decode pass's keys and values whole (its rows continued, `LastStep`);
 * - `view`: one piece of a few slots, kept as it lies (`viewOf`);
 * - `keptRow`: one row whose first piece is a whole one-part row (the prefix cache's
 *   compacted copy of a sequence, a prompt's KV), read where it lies, and only the pieces
 *   after it (the tokens generated since) laid out: a decode step with a 1900-token past
 *   copied 61 MiB outside the graph before it ran (measured: the gather 8–25 ms of a 40 ms
 *   step);
 * - `copy`: a layout of every piece. */
type GatherWay =
  | { way: 'full'; tensors: KvTensor[] }
  | { way: 'view'; view: Omit<KvEntry & { kind: 'view' }, 'length'> }
  | { way: 'keptRow'; kv: KvEntry & { kind: 'laidOut' }; first: KvPiece; rest: KvPiece[] }
  | { way: 'copy' };

/** The most slots a tensor may have to be kept in part as a view: a decode step's new KV
 * (its slots rounded up to fours). A view keeps its whole tensor alive, every row of it. */
const VIEW_MAX_SLOTS = 8;

const samePiece = (a: KvPiece, b: KvPiece) => a.handle === b.handle && a.row === b.row && a.offset === b.offset && a.count === b.count;

/** On the device, the keys and values whole of the last kept pass of decode steps
 * (`full.L.*`, every layer's key then value; row b its past then its new tokens), with the
 * pieces its rows' pasts were gathered from and its new KV: the next step's past, when that
 * step's rows are these rows' pieces and each its new tokens. One at a time. */
class LastStep {
  private last?: { tensors: KvTensor[]; pieces: KvPiece[][]; fresh: KvTensor; slots: number };

  constructor(private readonly store: KvStore) {}

  set(next: LastStep['last']): void {
    if (this.last) this.store.unhold(this.last.tensors);
    this.last = next;
    if (next) this.store.hold(next.tensors);
  }

  /** Its tensors, if `rows` are its rows continued: row b the pieces row b's past came
   * from, then row b's new tokens (a view of the pass's new KV), and `length` slots fit. */
  continuedBy(rows: KvPiece[][], length: number): KvTensor[] | undefined {
    const f = this.last;
    if (!f || rows.length !== f.pieces.length || f.slots < length) return undefined;
    const continued = rows.every((pieces, b) => {
      const last = pieces.at(-1);
      const kv = last && this.store.find(last.handle);
      const before = f.pieces[b]!;
      return (
        kv?.kind === 'view' &&
        kv.parts[0]![0] === f.fresh &&
        kv.row === b &&
        kv.offset === 0 &&
        last!.offset === 0 &&
        pieces.length === before.length + 1 &&
        before.every((p, k) => samePiece(p, pieces[k]!))
      );
    });
    return continued ? f.tensors : undefined;
  }

  forget(): void {
    this.last = undefined;
  }
}

export class KvGather {
  private readonly lastStep: LastStep;

  constructor(
    private readonly store: KvStore,
    private readonly layouts: KvLayouts,
  ) {
    this.lastStep = new LastStep(store);
  }

  /** rows[b]: pieces laid end to end, right-padded to `length`, kept under a new handle. */
  async gather(rows: KvPiece[][], length: number): Promise<{ handle: number }> {
    const w = this.way(rows, length);
    const pieces = this.layouts.onDevice ? { pieces: rows } : {};
    switch (w.way) {
      case 'full':
        return { handle: this.store.keep({ kind: 'laidOut', parts: [w.tensors], pieces: rows }) };
      case 'view':
        return { handle: this.store.keep({ ...w.view, length }) };
      case 'keptRow': {
        const base = await this.layouts.rowView(w.kv, w.first.row);
        const parts = w.rest.length > 0 ? [base, await this.layouts.layOut([w.rest], length - w.first.count, w.kv)] : [base];
        return { handle: this.store.keep({ kind: 'laidOut', parts, ...pieces }) };
      }
      case 'copy':
        return {
          handle: this.store.keep({
            kind: 'laidOut',
            parts: [await this.layouts.layOut(rows, length, this.store.get(rows.flat()[0]!.handle))],
            ...pieces,
          }),
        };
    }
  }

  /** Pasts laid out from pieces, one handle per layout, as `gather` makes each. On the
   * device, the layouts of one row that `gather` would copy (the prefix cache taking a row
   * of a pass whole: a running generation every 16 tokens) are one layout of all their
   * rows, each kept as a view of its row: a layout graph run costs about the same whatever
   * its rows (H100, 16 streams: 16 such runs took 170–212 ms between two decode steps of
   * 45 ms). */
  async gatherEach(layouts: { rows: KvPiece[][]; length: number }[]): Promise<number[]> {
    const handles: (number | undefined)[] = new Array(layouts.length);
    const together = this.layouts.onDevice
      ? layouts.flatMap((l, i) => (l.rows.length === 1 && l.rows[0]!.length > 0 && this.way(l.rows, l.length).way === 'copy' ? [i] : []))
      : [];
    if (together.length > 1) {
      const rows = together.map((i) => layouts[i]!.rows[0]!);
      const tensors = await this.layouts.layOut(
        rows,
        Math.max(...together.map((i) => layouts[i]!.length)),
        this.store.get(rows[0]![0]!.handle),
      );
      together.forEach((i, row) => {
        const count = rows[row]!.reduce((n, p) => n + p.count, 0);
        handles[i] = this.store.keep({ kind: 'view', parts: [tensors], row, offset: 0, count, length: layouts[i]!.length });
      });
    }
    for (const [i, l] of layouts.entries()) handles[i] ??= (await this.gather(l.rows, l.length)).handle;
    return handles as number[];
  }

  /** A kept pass's keys and values whole (`full.L.*`, returned by passes of decode steps) as
   * the next step's past, when its rows' pasts were gathered from kept pieces, row b from
   * row b; else they are freed. */
  keepLastStep(fedPast: number | undefined, full: KvTensor[], fresh: KvTensor[], rows: number[]): void {
    const fed = fedPast === undefined ? undefined : this.store.find(fedPast);
    const pieces = fed?.kind === 'laidOut' ? fed.pieces : undefined;
    if (slotsOf(full[0]!) > 0 && pieces && pieces.length === rows.length && rows.every((row, b) => row === b)) {
      this.lastStep.set({ tensors: full, pieces, fresh: fresh[0]!, slots: slotsOf(full[0]!) });
    } else {
      for (const t of full) if (t.location === 'gpu-buffer') t.dispose();
    }
  }

  /** Forget the last step (the thread is releasing everything). */
  forget(): void {
    this.lastStep.forget();
  }

  /** Each pass row's past laid out once, row for row (a pass whose past cannot be read as
   * it lies). */
  layOutRows(handle: number, pastRows: number[]): Promise<KvTensor[]> {
    const kv = this.store.get(handle);
    const rows = pastRows.map((row) => [{ handle, row, offset: 0, count: rowSlots(kv, row) }]);
    return this.layouts.layOut(rows, width(kv), kv);
  }

  private way(rows: KvPiece[][], length: number): GatherWay {
    const tensors = this.layouts.onDevice ? this.lastStep.continuedBy(rows, length) : undefined;
    if (tensors) return { way: 'full', tensors };
    const [first, ...rest] = rows[0]!;
    if (rows.length !== 1 || !first) return { way: 'copy' };
    const view = this.layouts.onDevice && rest.length === 0 ? this.viewOf(first) : undefined;
    if (view) return { way: 'view', view };
    const kv = this.store.get(first.handle);
    if (kv.kind === 'laidOut' && kv.parts.length === 1 && first.offset === 0 && first.count === width(kv))
      return { way: 'keptRow', kv, first, rest };
    return { way: 'copy' };
  }

  /** A piece that lies in one stretch of one small tensor per layer and kind, as a view of
   * it: a decode step's new token going into the prefix cache. On the device a copy is a
   * layout graph, a session run of its own a step (on lavapipe 9.8 ms, besides the pass). */
  private viewOf(p: KvPiece): Omit<KvEntry & { kind: 'view' }, 'length'> | undefined {
    const kv = this.store.get(p.handle);
    // Every layer's and kind's tensors of an entry are laid out alike: the first decides.
    const [s, more] = stretches(kv, 0, p.row, p.offset, p.count);
    if (!s || more || s.count !== p.count || slotsOf(s.src) > VIEW_MAX_SLOTS) return undefined;
    const parts = [kv.parts[0]!.map((_, i) => stretches(kv, i, p.row, p.offset, p.count)[0]!.src)];
    return { kind: 'view', parts, row: s.row, offset: s.offset, count: p.count };
  }
}
