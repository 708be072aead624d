// A loaded model's weights files changed on disk under the running server (replaced,
// truncated, rewritten in place): noticed at the model's next call or within a few seconds,
// and told once in an error line. A model whose sessions hold every weight in memory of
// their own (the CPU: engine/engine.ts, graph/held-weights.ts) goes on answering with the
// weights it loaded, the same numbers; one that still reads a file in place is refused from
// then on (FAILED_PRECONDITION, its health NOT_SERVING), as its engine refuses every pass.
import { CheckpointError } from '../common/errors.js';
import type { EngineWeights } from '../engine/engine.js';

/** What the watch reads of a served model. */
interface WatchedModel {
  entry: { name: string };
  engine: { weights: EngineWeights };
}

/** How often the files of every model are checked when no call comes. */
export const WEIGHTS_CHECK_MS = 2000;

export class WeightsWatch {
  private readonly noticed = new Set<string>();
  private timer?: NodeJS.Timeout;

  constructor(
    private readonly log: (line: Record<string, unknown>) => void,
    /** Called once for a model that can no longer answer, with the error its calls get. */
    private readonly refuse: (model: string, err: CheckpointError) => void,
  ) {}

  /** One stat per weights file of `m`; a change is told (and acted on) once. */
  check(m: WatchedModel): void {
    const model = m.entry.name;
    if (this.noticed.has(model)) return;
    const changed = m.engine.weights.files.changed();
    if (!changed) return;
    this.noticed.add(model);
    const held = m.engine.weights.held;
    this.log({
      level: 'error',
      event: 'weights_changed',
      model,
      file: changed.file,
      change: changed.change,
      message: held
        ? `${changed.file} was ${changed.change} since model ${model} was loaded; the model goes on answering with the weights it loaded (held in memory), restart the server to load the file as it is now`
        : `${changed.file} was ${changed.change} since model ${model} was loaded, and the model reads it in place: its calls are refused (FAILED_PRECONDITION) until the server is restarted`,
    });
    if (!held)
      this.refuse(
        model,
        new CheckpointError(
          `${changed.file}: the weights file of model ${model} was ${changed.change} since it was loaded: restart the server to load it again`,
        ),
      );
  }

  /** Check every model of `models()` each `everyMs` (the timer keeps no process alive). */
  start(models: () => Iterable<WatchedModel>, everyMs = WEIGHTS_CHECK_MS): void {
    this.stop();
    this.timer = setInterval(() => {
      for (const m of models()) this.check(m);
    }, everyMs).unref();
  }

  stop(): void {
    clearInterval(this.timer);
    this.timer = undefined;
  }
}
