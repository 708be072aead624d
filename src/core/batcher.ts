// The scheduler of one model (the dynamic batcher): one queue, shared by every client
// and every request kind.
//
// Requests arrive as units (core/units.ts): continuations, rolling windows, echoes,
// attribution variants, probe samples, raw attention — a kind's `prepare` made them. A scheduling round starts when the queue
// holds a round's worth of tokens or its oldest request has waited `maxQueueDelayMs`; it
// takes requests in arrival order up to `maxRoundTokens` and hands all their units to
// the scorer at once, which plans passes (each distinct prefix once, across requests and
// clients; rows of similar length packed into `maxBatchTokens`) and runs them. Cancelled
// or expired requests are dropped before their round; a round whose every request was
// cancelled stops at the next pass.
import { CancelledError, OverloadedError } from '../common/errors.js';
import type { Scorer } from './scorer.js';
import type { PrefixCache } from './prefix-cache.js';
import { queueTokens, type Unit, type UnitScore } from './units.js';

/** What the scheduler reports, by model: prom-client's counter, gauge and histogram
 * shapes, which the serving layer's Metrics has (the core names no layer above it). */
type ByModel = { model: string };
interface Count {
  inc(labels: ByModel, value?: number): void;
}
interface Level extends Count {
  dec(labels: ByModel, value?: number): void;
}
interface Observed {
  observe(labels: ByModel, value: number): void;
}
export interface SchedulerMetrics {
  unitsQueued: Level;
  unitsInFlight: Level;
  queueWaitSeconds: Observed;
  batchUnits: Observed;
  batchTokens: Observed;
  forwardSeconds: Observed;
  tokensComputed: Count;
  tokensRequested: Count;
  cacheTokensReused: Count;
  cacheEvictions: Count;
  /** The cache's bytes, entries and budget, read when scraped. */
  watchCache(model: string, cache: PrefixCache): void;
}

export interface BatcherOptions {
  /** Tokens gathered into one scheduling round (the scorer splits it into passes). */
  maxRoundTokens?: number;
  /** How long the first request in the queue may wait for others to join it. */
  maxQueueDelayMs?: number;
  /** Tokens waiting in the queue before new requests are refused. */
  maxQueuedTokens?: number;
}

interface Job {
  units: Unit[];
  /** A generation's next step: it runs at the next round without waiting for company
   * (the other running sequences resubmit in the same tick). */
  continuing: boolean;
  tokens: number;
  enqueuedAt: number;
  cancelled: boolean;
  resolve(result: any): void;
  reject(err: unknown): void;
}

export interface Submitted {
  result: Promise<UnitScore[]>;
  /** Drop the request: it leaves the queue (or its answer is discarded if running). */
  cancel(): void;
}

export class Batcher {
  readonly maxRoundTokens: number;
  readonly maxQueueDelayMs: number;
  readonly maxQueuedTokens: number;
  private readonly queue: Job[] = [];
  private queuedTokens = 0;
  private running = false;
  private runningJobs: Job[] = [];
  private timer: NodeJS.Timeout | undefined;
  private immediate: NodeJS.Immediate | undefined;
  private idleWaiters: (() => void)[] = [];
  /** Evictions already counted (the cache's own count only grows). */
  private evictionsSeen = 0;

  constructor(
    private readonly model: string,
    private readonly scorer: Scorer,
    options: BatcherOptions = {},
    private readonly metrics?: SchedulerMetrics,
  ) {
    this.maxRoundTokens = options.maxRoundTokens ?? 4 * scorer.maxBatchTokens;
    this.maxQueueDelayMs = options.maxQueueDelayMs ?? 5;
    this.maxQueuedTokens = options.maxQueuedTokens ?? 1 << 20;
    if (scorer.cache) metrics?.watchCache(model, scorer.cache);
  }

  get queuedItems(): number {
    return this.queue.reduce((n, j) => n + jobItems(j), 0);
  }

  submit(units: Unit[], options: { continuing?: boolean } = {}): Submitted {
    return this.enqueue(
      units,
      units.reduce((n, u) => n + queueTokens(u), 0),
      options.continuing ?? false,
    );
  }

  private enqueue(units: Unit[], tokens: number, continuing: boolean): Submitted {
    if (this.queuedTokens + tokens > this.maxQueuedTokens) {
      return {
        result: Promise.reject(
          new OverloadedError(`queue of model ${this.model} is full (${this.queuedTokens} tokens waiting, limit ${this.maxQueuedTokens})`),
        ),
        cancel: () => {},
      };
    }
    let job!: Job;
    const result = new Promise<UnitScore[]>((resolve, reject) => {
      job = { units, tokens, continuing, enqueuedAt: performance.now(), cancelled: false, resolve, reject };
    });
    this.queue.push(job);
    this.queuedTokens += tokens;
    this.metrics?.unitsQueued.inc({ model: this.model }, jobItems(job));
    this.schedule();
    return {
      result,
      cancel: () => {
        if (job.cancelled) return;
        job.cancelled = true;
        const at = this.queue.indexOf(job);
        if (at >= 0) {
          this.queue.splice(at, 1);
          this.dequeued(job);
        }
        job.reject(new CancelledError());
      },
    };
  }

  /** Refuse everything still queued with `reason` (a drain that ran out of time); the
   * running round, if any, stops at its next pass when all of its jobs are refused. */
  abortAll(reason: Error): void {
    for (const job of this.queue.splice(0)) {
      this.dequeued(job);
      job.cancelled = true;
      job.reject(reason);
    }
    for (const job of this.runningJobs) {
      job.cancelled = true;
      job.reject(reason);
    }
    this.schedule();
  }

  /** Resolves once the queue is empty and no round is running (for draining). */
  idle(): Promise<void> {
    if (!this.running && this.queue.length === 0) return Promise.resolve();
    return new Promise((resolve) => this.idleWaiters.push(resolve));
  }

  private dequeued(job: Job): void {
    this.queuedTokens -= job.tokens;
    this.metrics?.unitsQueued.dec({ model: this.model }, jobItems(job));
  }

  private schedule(): void {
    if (this.running) return;
    if (this.queue.length === 0) {
      this.idleWaiters.splice(0).forEach((w) => w());
      return;
    }
    if (this.queuedTokens >= this.maxRoundTokens) {
      this.clearTimers();
      void this.runRound();
      return;
    }
    if (this.immediate) return; // a round starts at the end of this tick
    const waited = performance.now() - this.queue[0]!.enqueuedAt;
    if (this.queue.some((j) => j.continuing) || waited >= this.maxQueueDelayMs) {
      // A decode step waits only for the others of its tick, and so does a request that
      // has waited its delay: the generations a round answered resubmit from its promise
      // callbacks, all before the event loop's check phase. (A timer of 0 did this too,
      // but Node makes it 1 ms: about half of a decode step's time between runs on
      // lavapipe's tiny shape, 1.8 ms.)
      clearTimeout(this.timer);
      this.timer = undefined;
      this.immediate = setImmediate(() => {
        this.immediate = undefined;
        if (!this.running && this.queue.length > 0) void this.runRound();
      });
    } else if (!this.timer) {
      this.timer = setTimeout(
        () => {
          this.timer = undefined;
          if (!this.running && this.queue.length > 0) void this.runRound();
        },
        this.maxQueueDelayMs - waited,
      );
    }
  }

  private clearTimers(): void {
    clearTimeout(this.timer);
    clearImmediate(this.immediate);
    this.timer = undefined;
    this.immediate = undefined;
  }

  private async runRound(): Promise<void> {
    this.running = true;
    const jobs: Job[] = [];
    let tokens = 0;
    while (this.queue.length > 0 && (jobs.length === 0 || tokens + this.queue[0]!.tokens <= this.maxRoundTokens)) {
      const job = this.queue.shift()!;
      this.dequeued(job);
      jobs.push(job);
      tokens += job.tokens;
    }
    this.runningJobs = jobs;
    const now = performance.now();
    const units = jobs.reduce((n, j) => n + jobItems(j), 0);
    for (const j of jobs) this.metrics?.queueWaitSeconds.observe({ model: this.model }, (now - j.enqueuedAt) / 1000);
    this.metrics?.batchUnits.observe({ model: this.model }, units);
    this.metrics?.batchTokens.observe({ model: this.model }, tokens);
    this.metrics?.unitsInFlight.inc({ model: this.model }, units);
    try {
      await this.score(jobs);
    } finally {
      this.metrics?.unitsInFlight.dec({ model: this.model }, units);
      this.metrics?.forwardSeconds.observe({ model: this.model }, (performance.now() - now) / 1000);
      this.running = false;
      this.runningJobs = [];
      this.schedule();
    }
  }

  /** Score the jobs of a round together; if that fails, each alone, so one request's
   * failure never costs another client its answer. */
  private async score(jobs: Job[]): Promise<void> {
    const live = jobs.filter((j) => !j.cancelled);
    if (live.length === 0) return;
    try {
      const scores = await this.scoreJobs(live);
      let at = 0;
      for (const j of live) {
        answer(j, scores.slice(at, at + j.units.length));
        at += j.units.length;
      }
    } catch (err) {
      if (live.length === 1) return live[0]!.reject(err);
      for (const j of live) {
        if (j.cancelled) continue; // already answered (cancelled or refused)
        try {
          answer(j, await this.scoreJobs([j]));
        } catch (e) {
          j.reject(e);
        }
      }
    }
  }

  /** Plan and run the jobs' units together; the work done goes to the metrics. */
  private async scoreJobs(jobs: Job[]): Promise<UnitScore[]> {
    const { scores, work } = await this.scorer.scoreUnits(
      jobs.flatMap((j) => j.units),
      { shouldStop: () => jobs.every((j) => j.cancelled) },
    );
    const model = { model: this.model };
    this.metrics?.tokensComputed.inc(model, work.tokensComputed);
    this.metrics?.tokensRequested.inc(model, work.tokensRequested);
    this.metrics?.cacheTokensReused.inc(model, work.tokensReused);
    const cache = this.scorer.cache;
    if (this.metrics && cache) {
      // Bytes, entries and budget are read when scraped (Metrics.watchCache).
      const stats = cache.stats();
      this.metrics.cacheEvictions.inc(model, stats.evictions - this.evictionsSeen);
      this.evictionsSeen = stats.evictions;
    }
    return scores;
  }
}

/** Give a job its scores. A job cancelled while its round ran (its caller gone, its
 * deadline passed: its promise is settled) takes none, and what the round kept for it (a
 * generation step's pinned sequence) is released here: nobody else would, and each such
 * pin kept its path in the prefix cache for good, out of reach of eviction. */
function answer(job: Job, scores: UnitScore[]): void {
  if (job.cancelled) for (const s of scores) s.kept?.release();
  else job.resolve(scores);
}

/** Items a job stands for: its units (scored sequences, probed samples). */
function jobItems(job: Job): number {
  return job.units.length;
}
