// A model's load drawn as a bar when the server's stderr is a terminal: the supervisor
// (stderr-json.ts) shows each `load_progress` line as the bar (a person watching does not
// read JSON), and every other line as it is, above it.
import cliProgress from 'cli-progress';

const SCALE = 1000;

export class LoadBar {
  private bar?: cliProgress.SingleBar;

  constructor(private readonly stream: NodeJS.WriteStream) {}

  /** Show a line: a load_progress line as the bar, any other as itself (true: it was shown as the bar). */
  show(line: string): boolean {
    let event: Record<string, any> | undefined;
    try {
      event = JSON.parse(line);
    } catch {
      event = undefined;
    }
    if (event?.event !== 'load_progress') {
      this.stop();
      this.stream.write(line + '\n');
      return false;
    }
    const fraction: number | null = event.fraction;
    const payload = {
      what: `${event.model}: ${event.what}`,
      left: event.etaSeconds === null ? `${event.stepSeconds}s` : `${event.etaSeconds}s left`,
    };
    if (!this.bar) {
      this.bar = new cliProgress.SingleBar(
        { stream: this.stream, format: '{what} [{bar}] {percentage}% {left}', hideCursor: true, clearOnComplete: true, noTTYOutput: false },
        cliProgress.Presets.shades_classic,
      );
      this.bar.start(SCALE, 0, payload);
    }
    this.bar.update(fraction === null ? 0 : Math.round(fraction * SCALE), payload);
    return true;
  }

  stop(): void {
    this.bar?.stop();
    this.bar = undefined;
  }
}
