// A model's chat template, contained: compiled once in a process of its own
// (src/workers/chat-template.ts) and rendered there, one conversation at a time, so that a
// hostile or broken template costs that process and never the server's event loop or
// memory. Measured on the event loop before: a nested `range(100000)` loop kept /health
// from answering and SIGTERM from draining, `range(1000000000)` aborted the server
// (SIGTRAP) in 2.5 s, a 5e9-character output held the loop 44 s, and a 20 MiB template was
// parsed again for each request (2.4 s each).
//
// Bounds (TEMPLATE_BOUNDS): the process's heap (V8 ends it there), a render's time (the
// renderer stops itself at its deadline; what it cannot stop — a long builtin — is ended
// from here RENDER_GRACE_MS later, the process killed and a new one compiled for the next
// render), and its output (checked in the renderer as loops accumulate it).
import type { ChildProcess } from 'node:child_process';
import type { Readable } from 'node:stream';
import { forkWorker } from '../workers/start.js';
import type { TemplateReply, TemplateRequest } from '../workers/chat-template.js';
import { TEMPLATE_BOUNDS, renderTime, seconds, type RenderResult, type TemplateFailure } from './chat-template.js';

/** How long past its own deadline a render may take before its process is killed. */
const RENDER_GRACE_MS = 500;

type Ended = { ended: TemplateFailure };

export class ChatTemplateProcess {
  private child?: ChildProcess;
  /** Each process's last stderr: V8's reason when it aborts. */
  private readonly stderr = new WeakMap<ChildProcess, string>();
  /** Processes started and not yet closed. */
  private readonly live = new Set<ChildProcess>();
  private tail: Promise<unknown> = Promise.resolve();
  private closed = false;
  /** Test hook: how many times the template has been compiled (once per process). */
  compilations = 0;

  constructor(
    private readonly text: string,
    private readonly bounds = TEMPLATE_BOUNDS,
  ) {}

  /** Start the process and compile the template: what load does. Resolves with the reason
   * it cannot be compiled, if it cannot. */
  start(): Promise<TemplateFailure | undefined> {
    return this.queued(async () => {
      const ready = await this.ready();
      return 'ended' in ready ? ready.ended : undefined;
    });
  }

  /** Render with these template arguments (one render at a time, in order). */
  render(args: Record<string, unknown>): Promise<RenderResult> {
    return this.queued(async () => {
      const child = await this.ready();
      if ('ended' in child) return { failure: child.ended };
      const timeMs = renderTime(args, this.bounds);
      const outcome = await this.ask(child, { type: 'render', args, timeMs }, timeMs + RENDER_GRACE_MS);
      if ('ended' in outcome) return { failure: outcome.ended };
      if (outcome.type !== 'rendered') return { failure: { kind: 'stopped', message: `answered ${outcome.type}` } };
      const { type: _, ...result } = outcome;
      return result;
    });
  }

  /** End the process, and any ended at a bound that has not exited yet: each is waited
   * for (a server that exits right after leaves no zombie). */
  async close(): Promise<void> {
    this.closed = true;
    this.child = undefined;
    await Promise.all(
      [...this.live].map((child) => {
        const gone = new Promise((resolve) => child.once('close', resolve));
        idle(child, false); // held until it is gone
        child.kill('SIGKILL');
        return gone;
      }),
    );
  }

  private queued<T>(work: () => Promise<T>): Promise<T> {
    const run = this.tail.then(work, work);
    this.tail = run.catch(() => undefined);
    return run;
  }

  /** The running process, compiled; a new one when there is none (first use, or the last
   * one was ended). */
  private async ready(): Promise<ChildProcess | Ended> {
    if (this.closed) return { ended: { kind: 'stopped', message: 'is closed (the model is unloading)' } };
    if (this.child) return this.child;
    const child = forkWorker('chat-template', {
      execArgv: [`--max-old-space-size=${this.bounds.heapMb}`],
      serialization: 'advanced',
      stdio: ['ignore', 'ignore', 'pipe', 'ipc'],
      // Nothing of the server's environment (tokens, paths) is the template's business.
      env: {},
    });
    child.stderr!.setEncoding('utf8');
    child.stderr!.on('data', (d: string) => this.stderr.set(child, ((this.stderr.get(child) ?? '') + d).slice(-4096)));
    child.on('error', () => {}); // a failed spawn also ends: 'close' says so
    child.once('close', () => {
      this.live.delete(child);
      if (this.child === child) this.child = undefined;
    });
    this.live.add(child);
    this.child = child;
    idle(child, true);
    const outcome = await this.ask(child, { type: 'compile', text: this.text }, this.bounds.compileMs);
    if ('ended' in outcome) return outcome;
    if (outcome.type === 'compile_failed') {
      this.end(child);
      return { ended: { kind: 'error', message: `does not parse: ${outcome.message}` } };
    }
    this.compilations++;
    return child;
  }

  /** Send a request and wait for its reply, the process's end, or `ms`: then the process is
   * killed (and replaced at the next request). */
  private ask(child: ChildProcess, request: TemplateRequest, ms: number): Promise<TemplateReply | Ended> {
    idle(child, false);
    return new Promise<TemplateReply | Ended>((resolve) => {
      const done = (outcome: TemplateReply | Ended) => {
        clearTimeout(timer);
        child.off('message', onMessage);
        child.off('close', onClose);
        resolve(outcome);
      };
      const onMessage = (reply: TemplateReply) => done(reply);
      const onClose = (code: number | null, signal: NodeJS.Signals | null) => done({ ended: this.howItEnded(child, code, signal) });
      const timer = setTimeout(() => {
        this.end(child);
        const message =
          request.type === 'compile' ? `did not compile within ${seconds(ms)}` : `did not finish within ${seconds(request.timeMs)}`;
        done({ ended: { kind: 'time', message } });
      }, ms);
      child.on('message', onMessage);
      child.on('close', onClose);
      child.send(request, (err) => {
        if (!err) return;
        this.end(child);
        done({ ended: { kind: 'stopped', message: `could not be reached (${err.message})` } });
      });
    }).finally(() => idle(child, true));
  }

  private end(child: ChildProcess): void {
    if (this.child === child) this.child = undefined;
    child.kill('SIGKILL');
  }

  private howItEnded(child: ChildProcess, code: number | null, signal: NodeJS.Signals | null): TemplateFailure {
    if (this.closed) return { kind: 'stopped', message: 'is closed (the model is unloading)' };
    if (/heap out of memory|invalid size error|allocation failed/i.test(this.stderr.get(child) ?? ''))
      return { kind: 'memory', message: `ran out of memory (its process's ${this.bounds.heapMb} MiB)` };
    return { kind: 'stopped', message: `ended its process (${signal ?? `exit code ${code}`})` };
  }
}

/** An idle process, its channel and its pipe keep no process alive (a one-off command
 * exits when its work is done); one at work does. */
function idle(child: ChildProcess, yes: boolean): void {
  const handles = [child, child.channel, child.stderr as (Readable & { ref?(): void; unref?(): void }) | null];
  for (const h of handles) yes ? h?.unref?.() : h?.ref?.();
}
