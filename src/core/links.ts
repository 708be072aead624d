// A long unit run in parts across scheduling rounds, so it never holds the model for more
// than a few passes while other requests wait (vLLM's chunked prefill, for scoring too).
//
//   unit: prefix + tail (positions 0 … n)
//   links: [0, c) [c, 2c) … [kc, n), each a unit of its own: the positions before it as its
//          prefix (in the prefix cache: the link before it put them there and pins them),
//          its positions as its tail, the unit's targets among them
//
// Each link but the last keeps its KV pinned in the cache (`keep`, whatever the budget) until
// the next link has run; a link with no target of its own asks for its last position's top
// token (`next`, `nextTop` 1) so that it is computed. The scores are the unit's, to the bit:
// a cached prefix gives the same bits as computing it (the prefix cache's contract).
import { scoredIndex, unitTokens, type KeptKv, type TopK, type Unit, type UnitScore } from './units.js';

/** Whether a unit can run in links: a plain scoring unit (no probe, no hidden keys, not a
 * generation step, which runs in steps of its own) longer than `linkTokens`. */
export function linkable(u: Unit, linkTokens: number): boolean {
  return !u.probe && !u.hidden?.length && !u.next && !u.keep && !u.continues && unitTokens(u) > linkTokens;
}

/** The links of `u`, in order, each at most `linkTokens` positions. */
export function linksOf(u: Unit, linkTokens: number): Unit[] {
  const seq = u.prefix.concat(u.tail);
  const links: Unit[] = [];
  for (let from = 0; from < seq.length; from += linkTokens) {
    const to = Math.min(seq.length, from + linkTokens);
    const last = to === seq.length;
    // The unit's targets whose positions lie in [from, to), as tail indices of the link.
    const targets: number[] = [];
    const scored: number[] = [];
    for (let j = 0; j < u.targets.length; j++) {
      const pos = u.prefix.length + scoredIndex(u, j);
      if (pos >= from && pos < to) {
        targets.push(u.targets[j]!);
        scored.push(pos - from);
      }
    }
    links.push({
      prefix: seq.slice(0, from),
      tail: seq.slice(from, to),
      targets,
      scored,
      topK: u.topK,
      ...(u.sequenceLength !== undefined ? { sequenceLength: u.sequenceLength } : {}),
      ...(targets.length === 0 ? { next: true, nextTop: 1 } : {}),
      ...(from > 0 ? { continues: true, linkedFrom: from } : {}),
      ...(last ? {} : { keep: true }),
    });
  }
  return links;
}

/** The unit's score from its links' scores, in order: their targets' answers end to end. */
export function joinLinks(scores: UnitScore[]): UnitScore {
  const logprobs: number[] = [];
  const greedy: boolean[] = [];
  const topK: TopK[] = [];
  let withTop = false;
  for (const s of scores) {
    logprobs.push(...s.logprobs);
    greedy.push(...s.greedy);
    if (s.topK) {
      withTop = true;
      topK.push(...s.topK);
    }
  }
  return { logprobs, greedy, ...(withTop ? { topK } : {}) };
}

/** A unit in flight in links: the next to run, the scores so far, the pin of the last. */
export class LinkChain {
  private next = 0;
  private readonly scores: UnitScore[] = [];
  private held?: KeptKv;

  constructor(readonly links: Unit[]) {}

  /** The link to run now, if the one before it has finished. */
  take(): Unit | undefined {
    return this.next < this.links.length && this.scores.length === this.next ? this.links[this.next++] : undefined;
  }

  /** A link's score: the previous link's pin can go (this one's KV holds its prefix now). */
  done(score: UnitScore): void {
    this.held?.release();
    this.held = score.kept;
    const { kept: _kept, ...own } = score;
    this.scores.push(own);
  }

  get finished(): boolean {
    return this.scores.length === this.links.length;
  }

  /** The unit's score, once every link has run. */
  result(): UnitScore {
    return joinLinks(this.scores);
  }

  /** Let go of the last pin (the chain finished, failed or was cancelled). */
  release(): void {
    this.held?.release();
    this.held = undefined;
  }
}
