// A model's load as the people who run the server see it: a `load_progress` line when a
// step begins, then at least every `intervalMs` while it runs (10 s by default; what a
// newcomer needs to tell a slow load from a hung one: an 8B model took minutes without a
// line), each with the step, its fraction where the step has a measure, and an estimate of
// the time it has left; and where the load is now, for /health's LOADING.
import { LOAD_STEPS, type LoadProgress, type LoadProgressListener, type LoadStep } from '../common/load-progress.js';

/** Where a load is: its model, step and, where the step has a measure, how far and how long it has left. */
export interface LoadState {
  model: string;
  step: LoadStep;
  what: string;
  fraction: number | null;
  stepSeconds: number;
  etaSeconds: number | null;
  seconds: number;
}

/** The reporting interval: CTXPROBE_PROGRESS_INTERVAL_MS (tests lower it), else 10 s. */
export const progressIntervalMs = () => Number(process.env.CTXPROBE_PROGRESS_INTERVAL_MS) || 10_000;

export class LoadLog {
  private readonly started = performance.now();
  private stepStarted = performance.now();
  private last?: LoadProgress;
  private lastLine = -Infinity;
  private readonly timer: NodeJS.Timeout;

  constructor(
    readonly model: string,
    private readonly write: (line: Record<string, unknown>) => void,
    private readonly intervalMs = progressIntervalMs(),
  ) {
    // A step without a measure (onnxruntime making its session) still says it is alive.
    this.timer = setInterval(() => this.last && performance.now() - this.lastLine >= this.intervalMs && this.line(), this.intervalMs / 2);
    this.timer.unref();
  }

  /** What the engine calls with each step and its progress. */
  readonly listener: LoadProgressListener = (p) => {
    const begun = p.step !== this.last?.step;
    if (begun) this.stepStarted = performance.now();
    this.last = p;
    if (begun || performance.now() - this.lastLine >= this.intervalMs) this.line();
  };

  /** Where the load is now (undefined before its first step). */
  state(): LoadState | undefined {
    const p = this.last;
    if (!p) return undefined;
    const now = performance.now();
    const stepSeconds = (now - this.stepStarted) / 1000;
    const fraction = p.total ? Math.min(1, (p.done ?? 0) / p.total) : null;
    const etaSeconds = fraction !== null && fraction > 0.02 ? (stepSeconds * (1 - fraction)) / fraction : null;
    const round = (x: number) => Math.round(x * 10) / 10;
    return {
      model: this.model,
      step: p.step,
      what: LOAD_STEPS[p.step],
      fraction: fraction === null ? null : Math.round(fraction * 1000) / 1000,
      stepSeconds: round(stepSeconds),
      etaSeconds: etaSeconds === null ? null : round(etaSeconds),
      seconds: round((now - this.started) / 1000),
    };
  }

  private line(): void {
    const s = this.state();
    if (!s) return;
    this.lastLine = performance.now();
    const p = this.last!;
    this.write({
      level: 'info',
      event: 'load_progress',
      ...s,
      ...(p.total !== undefined && { done: p.done ?? 0, total: p.total, unit: p.unit }),
    });
  }

  /** The load is over (loaded or failed): no more lines. */
  end(): void {
    clearInterval(this.timer);
  }
}
