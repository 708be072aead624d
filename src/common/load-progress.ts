// How far a load is, as the engine tells it: the step it is in and, where the step has a
// measure (bytes scanned, bytes repacked, weights uploaded), how much of it is done. A load
// of an 8B model took a minute and more with not one log line; the serving layer turns these
// into a log event every few seconds, /health's LOADING, and a bar on a terminal.

/** The steps of a load, in order (a step that does not apply is skipped). */
export const LOAD_STEPS = {
  scan: 'scanning the weights for NaN and infinity',
  prepare: 'preparing the weights the session holds (quantized blocks repacked, quantized at load, copied)',
  session: "making onnxruntime's session (it prepacks the weights)",
  upload: 'putting the weights on the device',
  check: 'a first pass (its log-probs must be finite; a GPU compiles its pipelines)',
} as const;
export type LoadStep = keyof typeof LOAD_STEPS;

/** A step begun or advanced: `done` of `total` (in `unit`) where the step has a measure. */
export interface LoadProgress {
  step: LoadStep;
  done?: number;
  total?: number;
  unit?: 'bytes' | 'uploads';
}

export type LoadProgressListener = (p: LoadProgress) => void;

/** Calls `listener` with a step's progress at most every `ms` (its last value and its end
 * always): a repack reports per chunk of a few MiB, thousands a load. */
export function throttled(step: LoadStep, unit: LoadProgress['unit'], listener: LoadProgressListener | undefined, ms = 200) {
  let last = -Infinity;
  return (done: number, total: number) => {
    if (!listener) return;
    const now = performance.now();
    if (done < total && now - last < ms) return;
    last = now;
    listener({ step, done, total, unit });
  };
}
