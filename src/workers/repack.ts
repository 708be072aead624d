// A writer of part of a model's held weights (checkpoint/weight-files.ts writeHeldPart), in
// a thread of its own: the session thread deals the derived tensors — quantized blocks
// repacked, matrices quantized at load — to as many writers as it has threads, so the load's
// longest step (an 8B Q4_K_M file: 34 s on one thread here) runs on every core.
import { parentPort, workerData } from 'node:worker_threads';
import { writeHeldPart } from '../checkpoint/weight-files.js';
import type { HeldWeights } from '../graph/held-weights.js';

export interface RepackWriter {
  dir: string;
  held: HeldWeights;
  part: number;
  parts: number;
}

/** What a writer says: bytes read since its last word, then that it is done. */
export type RepackReply = { bytes: number } | { done: true };

const { dir, held, part, parts } = workerData as RepackWriter;
let pending = 0;
let last = performance.now();
writeHeldPart(dir, held, part, parts, (n) => {
  pending += n;
  // A few words a second carry the progress; each chunk would be thousands.
  if (performance.now() - last < 100) return;
  parentPort!.postMessage({ bytes: pending } satisfies RepackReply);
  pending = 0;
  last = performance.now();
});
parentPort!.postMessage({ bytes: pending } satisfies RepackReply);
parentPort!.postMessage({ done: true } satisfies RepackReply);
