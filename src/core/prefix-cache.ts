// The prefix cache of one model: a radix trie over token sequences whose nodes hold the
// KV of their tokens and the log-probs already computed at those positions, so a request
// whose prefix some earlier request (any client, either transport) ran computes only the
// rest, and an echo request still gets every position's log-prob.
//
//   root ─[instruction + demos]─┬─[sample 1 context]─┬─[continuation a]
//                               │                    └─[continuation b]
//                               └─[sample 2 context]─…
//
// A node's KV is a range of a segment: a KV tensor kept in the session host under a
// handle (one per computed row; a node split in two shares it). Bytes are counted per
// segment and freed when no node uses it. Eviction removes least recently used leaves
// that no in-flight round has pinned, until the bytes are within the budget: the leaves
// wait in a heap ordered by last use, so a round's lookups, inserts and evictions cost
// what its own paths and evictions cost, whatever the number of entries (a scan of every
// node per round took a small request from 10 ms to 77 ms at 140k entries).
//
// Scores live with the position whose logits made them: position i keeps, per target
// token, its log-prob and greedy flag, and the top-k of its distribution when one was
// asked for. Bit-identity of a hit with a miss rests on the engine being shape-invariant
// (the same row gives the same bits whatever its batch, padding and past split);
// test/prefix-cache.test.ts checks it.
import type { TopK } from './units.js';

/** A KV tensor in the session host: `tokens` positions, freed by `drop` when unused. */
export interface KvSegment {
  handle: number;
  tokens: number;
  refs: number;
}

/** A stretch of cached KV: positions [offset, offset + count) of a segment. */
export interface Piece {
  handle: number;
  offset: number;
  count: number;
}

export interface ScoreEntry {
  logprob: number;
  greedy: boolean;
}

class Node {
  readonly children = new Map<number, Node>();
  scores: (Map<number, ScoreEntry> | undefined)[];
  topK: (TopK | undefined)[];
  pins = 0;
  lastUse = 0;
  /** Out of the trie (evicted or cleared). */
  removed = false;
  /** The one entry of the eviction heap that stands for this node (older ones are stale). */
  heapSeq = 0;
  constructor(
    public parent: Node | undefined,
    /** Absolute position of tokens[0]. */
    public depth: number,
    public tokens: number[],
    public segment: KvSegment | undefined,
    public offset: number,
  ) {
    this.scores = new Array(tokens.length);
    this.topK = new Array(tokens.length);
  }
  get end(): number {
    return this.depth + this.tokens.length;
  }
}

/** The longest cached prefix of a sequence: its nodes (pinned until `release`) and how far
 * into the last one it reaches. */
export interface Match {
  /** Positions with cached KV: [0, depth). */
  depth: number;
  nodes: Node[];
}

export interface CacheStats {
  bytes: number;
  entries: number;
  /** KV tensors held (each a handle in the session thread). */
  segments: number;
  tokens: number;
  evictions: number;
}

/** A leaf waiting for eviction: valid while it is its node's latest (`seq`). */
interface HeapEntry {
  node: Node;
  lastUse: number;
  seq: number;
}

export class PrefixCache {
  private readonly root = new Node(undefined, 0, [], undefined, 0);
  private clock = 0;
  private segments = new Set<KvSegment>();
  /** Matches not yet released: a split must keep their paths and pins right. */
  private live = new Set<Match>();
  /** Segments `rebase` left unused, freed by `settle`. */
  private retired: KvSegment[] = [];
  /** Eviction candidates, least recently used first: a min-heap of unpinned leaves by
   * (last use, push order); stale entries (a leaf pinned, touched, grown or gone since) are
   * skipped as they come up and dropped when they outnumber the entries. */
  private heap: HeapEntry[] = [];
  private heapSeq = 0;
  bytes = 0;
  entries = 0;
  evictions = 0;
  /** Tokens held, over every node. */
  private tokens = 0;
  /** Nodes that evictions and splits have looked at so far: what a round costs the cache
   * beyond its own paths (tests and bench/prefix-cache-entries.ts read it). */
  examined = 0;

  constructor(
    /** KV bytes of one position (all layers, keys and values). */
    readonly bytesPerToken: number,
    /** Bytes the cache may keep between rounds; 0 keeps nothing past a round. */
    readonly budget: number,
    /** Free a segment's tensor. */
    private readonly drop: (handle: number) => void,
  ) {}

  /** Walk `tokens` as far as the trie holds them; the nodes are pinned. */
  match(tokens: readonly number[]): Match {
    const nodes: Node[] = [];
    let node = this.root;
    let depth = 0;
    const now = ++this.clock;
    for (;;) {
      const child = depth < tokens.length ? node.children.get(tokens[depth]!) : undefined;
      if (!child) break;
      let k = 0;
      while (k < child.tokens.length && depth + k < tokens.length && child.tokens[k] === tokens[depth + k]) k++;
      child.pins++;
      child.lastUse = now;
      nodes.push(child);
      depth += k;
      if (k < child.tokens.length) break;
      node = child;
    }
    const match = { depth, nodes };
    this.live.add(match);
    return match;
  }

  release(match: Match): void {
    if (!this.live.delete(match)) return;
    for (const n of match.nodes) if (--n.pins === 0) this.unpinned(n);
  }

  /** The KV of positions [0, upTo) of a match, as segment pieces in order (nodes that
   * continue each other in one segment make one piece). */
  pieces(match: Match, upTo: number): Piece[] {
    const out: Piece[] = [];
    for (const n of match.nodes) {
      if (n.depth >= upTo) break;
      const count = Math.min(n.end, upTo) - n.depth;
      const last = out.at(-1);
      if (last && last.handle === n.segment!.handle && last.offset + last.count === n.offset) last.count += count;
      else out.push({ handle: n.segment!.handle, offset: n.offset, count });
    }
    return out;
  }

  /** The cached score of `target` at position `position` (< match.depth), if it has one
   * with at least `topK` alternatives. */
  score(match: Match, position: number, target: number, topK: number): (ScoreEntry & { topK?: TopK }) | undefined {
    const found = this.lookup(match, position, target, topK);
    if (!found || topK === 0) return found?.entry;
    return { ...found.entry, topK: { ids: found.top!.ids.slice(0, topK), logprobs: found.top!.logprobs.slice(0, topK) } };
  }

  /** Whether `score` would find one (no copies). */
  hasScore(match: Match, position: number, target: number, topK: number): boolean {
    return this.lookup(match, position, target, topK) !== undefined;
  }

  private lookup(match: Match, position: number, target: number, topK: number): { entry: ScoreEntry; top?: TopK } | undefined {
    const n = nodeAt(match, position);
    if (!n) return undefined;
    const i = position - n.depth;
    const entry = n.scores[i]?.get(target);
    if (!entry) return undefined;
    const top = n.topK[i];
    if (topK > 0 && (!top || top.ids.length < topK)) return undefined;
    return { entry, top };
  }

  /** Record what a pass computed for `tokens[from, from + count)`: their KV (positions
   * [kvOffset, kvOffset + count) of `handle`) and scores. The trie must already hold
   * [0, from) (a pinned match); positions it holds already keep their KV and gain the
   * scores. Returns the match of the whole inserted path, pinned; false when the prefix
   * was not there (the handle is then dropped). */
  insert(
    tokens: readonly number[],
    from: number,
    count: number,
    handle: number,
    kvOffset: number,
    scores: { position: number; target: number; entry: ScoreEntry; topK?: TopK }[],
  ): Match | undefined {
    const end = from + count;
    const match = this.match(tokens.slice(0, end));
    const segment: KvSegment = { handle, tokens: count, refs: 0 };
    if (match.depth < from) {
      this.release(match);
      this.drop(handle);
      return undefined;
    }
    if (match.depth < end) {
      let parent = this.root;
      const last = match.nodes.at(-1);
      if (last) parent = last.end === match.depth ? last : this.split(last, match.depth - last.depth);
      const leaf = new Node(parent, match.depth, tokens.slice(match.depth, end), segment, kvOffset + match.depth - from);
      segment.refs++;
      parent.children.set(leaf.tokens[0]!, leaf);
      leaf.pins++;
      leaf.lastUse = this.clock;
      match.nodes.push(leaf);
      match.depth = end;
      this.entries++;
      this.tokens += leaf.tokens.length;
    }
    if (segment.refs > 0) {
      this.segments.add(segment);
      this.bytes += segment.tokens * this.bytesPerToken;
    } else this.drop(handle);
    for (const s of scores) {
      const n = nodeAt(match, s.position)!;
      const i = s.position - n.depth;
      (n.scores[i] ??= new Map()).set(s.target, s.entry);
      if (s.topK && (n.topK[i]?.ids.length ?? 0) < s.topK.ids.length) n.topK[i] = s.topK;
    }
    return match;
  }

  /** Point every node of `match` at the segment of its last node, which holds the whole
   * path's KV from position 0 (a compacted copy made as the last node was inserted): a
   * path grown a token at a time (generation) is read as one piece again. Segments it no
   * longer uses are freed by `settle` (pieces of them may have been handed out to passes
   * of the round still running). */
  rebase(match: Match): void {
    const last = match.nodes.at(-1);
    if (!last) return;
    const target = last.segment!;
    if (last.offset !== last.depth) throw new Error('prefix cache: rebase needs a segment that starts at position 0');
    this.bytes += (last.end - target.tokens) * this.bytesPerToken;
    target.tokens = last.end;
    for (const n of match.nodes) {
      if (n === last || n.segment === target) continue;
      const old = n.segment!;
      n.segment = target;
      n.offset = n.depth;
      target.refs++;
      if (--old.refs === 0) this.retired.push(old);
    }
  }

  /** Free the segments `rebase` left unused: call when no round is running. */
  settle(): void {
    for (const s of this.retired.splice(0)) {
      if (s.refs > 0) continue;
      this.segments.delete(s);
      this.bytes -= s.tokens * this.bytesPerToken;
      this.drop(s.handle);
    }
  }

  /** Split `node` after `k` tokens; returns the upper half (the lower keeps the children). */
  private split(node: Node, k: number): Node {
    const upper = new Node(node.parent, node.depth, node.tokens.slice(0, k), node.segment, node.offset);
    upper.scores = node.scores.slice(0, k);
    upper.topK = node.topK.slice(0, k);
    upper.lastUse = node.lastUse;
    // Matches through `node` now pass through `upper`; those that ended inside the upper
    // half no longer reach the lower one. Only a pinned node is on a live match's path.
    for (const m of node.pins > 0 ? this.live : []) {
      this.examined++;
      const at = m.nodes.indexOf(node);
      if (at < 0) continue;
      upper.pins++;
      if (m.depth <= node.depth + k) {
        m.nodes[at] = upper;
        if (--node.pins === 0) this.unpinned(node);
      } else m.nodes.splice(at, 0, upper);
    }
    node.segment!.refs++;
    node.parent!.children.set(upper.tokens[0]!, upper);
    node.parent = upper;
    node.tokens = node.tokens.slice(k);
    node.scores = node.scores.slice(k);
    node.topK = node.topK.slice(k);
    node.depth += k;
    node.offset += k;
    upper.children.set(node.tokens[0]!, node);
    this.entries++;
    return upper;
  }

  /** Evict unpinned least recently used leaves until the bytes fit the budget. A parent
   * left childless becomes a candidate in its turn, at its own last use (never later
   * than its children's). */
  evict(): void {
    while (this.bytes > this.budget) {
      const leaf = this.popCandidate();
      if (!leaf) return;
      this.remove(leaf);
      const parent = leaf.parent!;
      if (parent !== this.root) this.unpinned(parent);
    }
  }

  /** A node just left unpinned or childless: a leaf with no pin goes in line for eviction
   * at its last use (any earlier entry of it goes stale). Pinned leaves wait out of line:
   * evictions never step over them. */
  private unpinned(node: Node): void {
    if (node.pins > 0 || node.children.size > 0 || node.removed) return;
    const entry = { node, lastUse: node.lastUse, seq: ++this.heapSeq };
    node.heapSeq = entry.seq;
    heapPush(this.heap, entry);
    // Stale entries (a leaf touched again, a leaf that grew children or left) are dropped
    // once they outnumber the entries: amortised O(1) a push.
    if (this.heap.length > 2 * this.entries + 64) {
      this.heap = this.heap.filter((e) => this.current(e));
      heapify(this.heap);
    }
  }

  private current(e: HeapEntry): boolean {
    return e.seq === e.node.heapSeq && !e.node.removed && e.node.children.size === 0 && e.node.pins === 0;
  }

  /** The least recently used leaf, out of the heap. */
  private popCandidate(): Node | undefined {
    for (;;) {
      const e = heapPop(this.heap);
      if (!e) return undefined;
      this.examined++;
      if (this.current(e)) return e.node;
    }
  }

  private remove(leaf: Node): void {
    leaf.parent!.children.delete(leaf.tokens[0]!);
    leaf.removed = true;
    this.entries--;
    this.tokens -= leaf.tokens.length;
    this.evictions++;
    const s = leaf.segment!;
    if (--s.refs === 0) {
      this.segments.delete(s);
      this.bytes -= s.tokens * this.bytesPerToken;
      this.drop(s.handle);
    }
  }

  /** Drop everything (unpinned or not): the model is going away. */
  clear(): void {
    for (const s of this.segments) this.drop(s.handle);
    this.segments.clear();
    this.retired = [];
    this.root.children.clear();
    this.heap = [];
    this.bytes = 0;
    this.entries = 0;
    this.tokens = 0;
  }

  /** The cache's counts, kept as it changes (no walk: batchers read them every round). */
  stats(): CacheStats {
    return { bytes: this.bytes, entries: this.entries, segments: this.segments.size, tokens: this.tokens, evictions: this.evictions };
  }
}

// A binary min-heap of eviction candidates by (last use, push order).
const before = (a: HeapEntry, b: HeapEntry) => a.lastUse < b.lastUse || (a.lastUse === b.lastUse && a.seq < b.seq);

function heapPush(heap: HeapEntry[], e: HeapEntry): void {
  heap.push(e);
  siftUp(heap, heap.length - 1);
}

function heapPop(heap: HeapEntry[]): HeapEntry | undefined {
  const top = heap[0];
  const last = heap.pop();
  if (heap.length > 0 && last) {
    heap[0] = last;
    siftDown(heap, 0);
  }
  return top;
}

function heapify(heap: HeapEntry[]): void {
  for (let i = (heap.length >> 1) - 1; i >= 0; i--) siftDown(heap, i);
}

function siftUp(heap: HeapEntry[], i: number): void {
  while (i > 0) {
    const up = (i - 1) >> 1;
    if (!before(heap[i]!, heap[up]!)) return;
    [heap[i], heap[up]] = [heap[up]!, heap[i]!];
    i = up;
  }
}

function siftDown(heap: HeapEntry[], i: number): void {
  for (;;) {
    const l = 2 * i + 1;
    const r = l + 1;
    let min = i;
    if (l < heap.length && before(heap[l]!, heap[min]!)) min = l;
    if (r < heap.length && before(heap[r]!, heap[min]!)) min = r;
    if (min === i) return;
    [heap[i], heap[min]] = [heap[min]!, heap[i]!];
    i = min;
  }
}

function nodeAt(match: Match, position: number): Node | undefined {
  if (position >= match.depth) return undefined;
  return match.nodes.find((n) => position >= n.depth && position < n.end);
}
